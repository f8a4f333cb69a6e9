"""The documentation's generated reference pages cover everything the code has.

The pages are generated while Sphinx reads them (docs/_ext/rmqk_reference.py); these
tests call the same generators, and check the pages that hold their markers, so an
option, hook or command missing from the reference fails here, not only in a
reader's hands. The Sphinx build itself runs in ``tox -e docs`` with warnings as
errors.
"""

from __future__ import annotations

import inspect
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from rmqk import hookspecs
from rmqk.config import COMPOSITION_KEYS, load_config
from rmqk.options import OPTIONS

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
    from rmqk.cli import _all_commands

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


def test_marked_pages_expand_and_every_marker_is_known(reference: ModuleType) -> None:
    expected = {
        "config-reference.md": "config-reference",
        "hook-reference.md": "hook-reference",
        "cli.md": "cli-reference",
        "migration-from-java.md": "java-options",
        "spark.md": "spark-columns",
    }
    for page, marker in expected.items():
        source = (DOCS / page).read_text()
        assert f"<!-- generated: {marker} -->" in source, page
        expanded = reference.expand(source)
        assert "<!-- generated:" not in expanded
    with pytest.raises(ValueError, match="unknown generated section 'nope'"):
        reference.expand("<!-- generated: nope -->")


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
