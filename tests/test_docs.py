"""The documentation's generated reference pages cover everything the code has.

The reference blocks are generated into the Markdown of docs/ by
``python docs/_ext/rmqk_reference.py --write`` and committed, so GitHub, an editor
and a source distribution show them; these tests call the same generators, check
that every committed block is what the code generates today (naming the stale page
and the command), and check the pages that hold the blocks, so an option, hook or
command missing from the reference fails here, not only in a reader's hands. The
Sphinx build itself runs in ``tox -e docs`` with warnings as errors.
"""

from __future__ import annotations

import inspect
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from rmqk.app.config import COMPOSITION_KEYS, load_config
from rmqk.options import OPTIONS
from rmqk.spi import hookspecs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import rmqk_reference

        return rmqk_reference
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def sections(markdown: str, level: int = 3) -> list[str]:
    return re.findall(rf"^{'#' * level}\s+(\S.*?)\s*$", markdown, re.M)


def test_every_config_key_has_a_section_with_its_default_and_doc(reference: ModuleType) -> None:
    text = reference.config_reference()
    headings = sections(text)
    keys = [s.name for s in (*COMPOSITION_KEYS, *OPTIONS)]
    assert sorted(headings) == sorted(keys)
    for spec in (*COMPOSITION_KEYS, *OPTIONS):
        body = text.split(f"### {spec.name}\n", 1)[1].split("\n### ", 1)[0]
        assert spec.doc in body, spec.name
        assert spec.default_repr in body, spec.name
        if spec.java_name:
            assert f"`{spec.java_name}`" in body, spec.name
        if spec.range_text:
            assert spec.range_text in body, spec.name
        for choice in spec.choices:
            assert f"`{choice}`" in body, spec.name


def test_every_hook_has_a_section_with_its_signature_and_docstring(reference: ModuleType) -> None:
    text = reference.hook_reference()
    names = sorted(n for n in dir(hookspecs) if n.startswith("rmqk_"))
    assert sorted(sections(text)) == names
    for name in names:
        body = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        first_line = (getattr(hookspecs, name).__doc__ or "").strip().splitlines()[0]
        assert first_line.replace("``", "`") in body, name
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"def {name}({params})" in body


def test_every_command_is_in_the_cli_reference_with_its_examples(reference: ModuleType) -> None:
    from rmqk.app.cli import _all_commands

    text = reference.cli_reference()
    commands = _all_commands()
    assert sorted(sections(text, 2)) == ["rmqk", *(f"rmqk {n}" for n in sorted(commands))]
    for name, command in commands.items():
        body = text.split(f"## rmqk {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "--log-format" in body
        for example in command.examples:
            assert example in body, (name, example)


def test_migration_table_maps_every_java_setter(reference: ModuleType) -> None:
    text = reference.java_options()
    for spec in (*COMPOSITION_KEYS, *OPTIONS):
        if spec.java_name:
            setter = "set" + spec.java_name[0].upper() + spec.java_name[1:]
            assert f"`{setter}` | [`{spec.name}`](config-reference.md#{spec.name})" in text


def test_every_generated_block_is_committed_and_known(reference: ModuleType) -> None:
    expected = {
        "config-reference.md": [
            "config-reference",
            "lite-pull-options",
            "client-options",
            "producer-options",
            "plugin-options",
        ],
        "hook-reference.md": ["hook-reference"],
        "cli.md": ["cli-reference"],
        "migration-from-java.md": ["java-options"],
        "spark.md": ["spark-columns", "spark-sink-options", "spark-source-options"],
    }
    found = {
        page.name: reference.generated_names(page.read_text())
        for page in sorted(DOCS.glob("*.md"))
        if reference.generated_names(page.read_text())
    }
    assert found == expected
    assert sorted(n for names in found.values() for n in names) == sorted(reference.GENERATORS)
    for page, names in expected.items():
        source = (DOCS / page).read_text()
        for name in names:
            # The content is in the page itself, between its begin and end markers.
            body = source.split(reference.begin_marker(name), 1)[1]
            body = body.split(reference.end_marker(name), 1)[0]
            assert body.strip() == (
                f"{reference.DO_NOT_EDIT}\n\n{reference.GENERATORS[name]().strip()}"
            ), (page, name)
    with pytest.raises(ValueError, match="unknown generated section 'nope'"):
        reference.expand("<!-- generated: nope -->\n")


def test_no_committed_reference_is_stale(reference: ModuleType) -> None:
    stale = [str(p.relative_to(ROOT)) for p in reference.stale_pages(DOCS)]
    assert not stale, (
        f"{', '.join(stale)}: the generated reference differs from what the code generates "
        f"now; regenerate it with `{reference.COMMAND}` and commit the result"
    )


def test_a_changed_option_makes_its_page_stale_until_regenerated(
    reference: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "spark.md"
    page.write_text((DOCS / "spark.md").read_text())
    (tmp_path / "notes.md").write_text("no generated block here\n")
    assert reference.stale_pages(tmp_path) == []
    real = reference.GENERATORS["spark-sink-options"]
    monkeypatch.setitem(
        reference.GENERATORS, "spark-sink-options", lambda: real() + "| `new_option` | |\n"
    )
    assert reference.stale_pages(tmp_path) == [page]
    assert reference.write(tmp_path) == [page]
    assert "| `new_option` | |" in page.read_text()
    assert reference.stale_pages(tmp_path) == []
    # Writing again changes nothing: the blocks are rewritten in place, not appended.
    assert reference.write(tmp_path) == []


def test_a_new_block_needs_only_its_begin_marker(reference: ModuleType) -> None:
    text = "# Page\n\n<!-- generated: spark-columns -->\n\nProse after.\n"
    expanded = reference.expand(text)
    assert expanded == (
        "# Page\n\n"
        "<!-- generated: spark-columns -->\n"
        f"{reference.DO_NOT_EDIT}\n\n"
        f"{reference.spark_columns().strip()}\n\n"
        f"{reference.end_marker('spark-columns')}\n"
        "\nProse after.\n"
    )
    assert reference.expand(expanded) == expanded
    with pytest.raises(ValueError, match="ends with the end marker of 'java-options'"):
        reference.expand(
            "<!-- generated: spark-columns -->\n<!-- end generated: java-options -->\n"
        )
    with pytest.raises(ValueError, match="an end marker with no generated block open"):
        reference.expand("<!-- end generated: java-options -->\n")


def test_the_regenerate_command_runs_as_documented(reference: ModuleType) -> None:
    import subprocess

    assert reference.COMMAND == "python docs/_ext/rmqk_reference.py --write"
    check = subprocess.run(
        [sys.executable, "docs/_ext/rmqk_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (check.returncode, check.stdout) == (0, "")
    for where in ("README.md", "docs/index.md"):
        assert reference.COMMAND in (ROOT / where).read_text(), where


def test_every_page_is_reachable_from_the_index(reference: ModuleType) -> None:
    index = (DOCS / "index.md").read_text()
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    listed = set(re.findall(r"^([a-z0-9][a-z0-9_/-]*)$", index, re.M))
    expanded = reference.other_pages(index, pages | {"index"}, "index")
    reachable = set(re.findall(r"^([a-z0-9][a-z0-9_/-]*)$", expanded, re.M))
    assert pages <= reachable
    # The hand-ordered part of the navigation names the pages this issue wrote.
    for page in (
        "quickstart",
        "concepts",
        "operations",
        "spark",
        "migration-from-java",
        "tutorial-allocation-strategy",
        "config-reference",
        "hook-reference",
        "cli",
        "hooks",
    ):
        assert page in listed


def test_example_configs_are_valid() -> None:
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert {p.name for p in examples} >= {
        "jsonl.toml",
        "broadcast-jsonl.toml",
        "orderly-python.toml",
        "prometheus.toml",
        "spark-table.toml",
    }
    modes = set()
    sinks = set()
    # The plugin's own config names a strategy only the plugin registers; its test checks it.
    assert (ROOT / "examples" / "plugin-every-other" / "every-other.toml").is_file()
    for path in examples:
        config = load_config(path)
        for spec in config.consumers:
            modes.add((spec.message_model.name, spec.consume_service))
            sinks.add(spec.sink)
        tomllib.loads(path.read_text())
    assert {
        ("CLUSTERING", "concurrent"),
        ("CLUSTERING", "orderly"),
        ("BROADCASTING", "concurrent"),
    } <= modes
    assert {"jsonl", "python", "spark"} <= sinks


def test_the_package_names_where_its_documentation_is() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert set(urls) >= {"Documentation", "Source", "Issues"}
    source = urls["Source"]
    assert source.startswith("https://")
    # Documentation is the docs folder of that repository, where the reference is committed.
    assert urls["Documentation"] == f"{source}/tree/main/docs"
    assert urls["Issues"] == f"{source}/issues"
    readme = (ROOT / "README.md").read_text()
    for page in ("config-reference.md", "cli.md", "spark.md", "hook-reference.md"):
        assert f"](docs/{page}" in readme, page
