"""Reference pages generated from the code, written into the Markdown of docs/.

A page holds a block that starts with a marker line ``<!-- generated: NAME ... -->``
and ends with ``<!-- end generated: NAME -->``; between them is Markdown generated
from the code, committed, so the page reads the same on GitHub, in an editor and in
the HTML build:

* ``config-reference``: every key of a ``[consumers.<name>]`` table, from
  :data:`rmqk.app.config.COMPOSITION_KEYS` and :data:`rmqk.options.OPTIONS`;
* ``plugin-options`` (and ``spark-sink-options``): every built-in plugin's options
  table, from the classes the plugins declare with :func:`rmqk.options.option`;
* ``hook-reference``: every hook spec of :mod:`rmqk.spi.hookspecs`, with its signature
  and docstring;
* ``cli-reference``: ``rmqk --help`` and the help of every sub-command, from the
  parser the CLI builds (so plugins' commands appear as installed).

After changing an option, a hook or a command, regenerate every page with::

    python docs/_ext/rmqk_reference.py --write

(``--check`` only says which pages are stale). A new block needs only its begin
marker line; ``--write`` fills it in and adds the end marker. ``tests/test_docs.py``
fails, naming the page and this command, when a committed block differs from what
the code generates, and checks that every option, hook and command appears.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "COMMAND",
    "GENERATORS",
    "cli_reference",
    "config_reference",
    "expand",
    "hook_reference",
    "main",
    "setup",
    "stale_pages",
]

# The one command that rewrites every generated block (named in the markers, the
# staleness test's message and the docs).
COMMAND = "python docs/_ext/rmqk_reference.py --write"
DOCS = Path(__file__).resolve().parent.parent
# A begin marker may carry a note after the name; the end marker names the block it
# closes. The block's first line (DO_NOT_EDIT) says how to regenerate it.
BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+)(?:[;:,] .*)? -->\s*$")
END = re.compile(r"^<!-- end generated: ([a-z0-9-]+) -->\s*$")
# argparse lays help out differently from one Python to the next (3.13 joins an
# option's spellings before its metavar); the committed CLI reference is 3.11's,
# the version CI runs, so only that version can compare it byte for byte.
CLI_REFERENCE_PYTHON = (3, 11)


# -- config reference -------------------------------------------------------------


def _option_section(spec: Any) -> str:
    from rmqk.options import OptionType

    rows: list[tuple[str, str]] = [("type", spec.value_type.value)]
    if spec.plugin_kind:
        rows[0] = ("type", f"name of a registered {spec.plugin_kind}")
    rows.append(
        ("default", f"`{spec.default_repr}`" if spec.default_text is None else spec.default_repr)
    )
    if spec.choices:
        rows.append(("allowed", ", ".join(f"`{c}`" for c in spec.choices)))
    if spec.range_text:
        checked = " (checked as Java's checkConfig does)" if spec.java_checked else ""
        rows.append(("range", f"`{spec.range_text}`{checked}"))
    if spec.unit:
        rows.append(("unit", spec.unit))
    if spec.java_name:
        rows.append(("Java", f"`{spec.java_name}`"))
    if spec.value_type is OptionType.ADDRESSES:
        rows.append(("form", '`"host:port;host:port"` or `["host:port", ...]`'))
    if spec.compat_only:
        rows.append(("effect", f"none: {COMPAT_ONLY} {_cell(spec.compat_only)}"))
    if getattr(spec, "secret", False):
        rows.append(("shown", "never: output says only that it is set"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    # The heading stays the bare name: other pages link to it by that anchor.
    mark = "**Java compatibility only: no effect.** " if spec.compat_only else ""
    return f"### {spec.name}\n\n{mark}{spec.doc}\n\n| | |\n| --- | --- |\n{table}\n"


COMPAT_ONLY = "accepted so Java settings carry over, and ignored."


def compat_only_summary(specs: Any) -> str:
    """The options of ``specs`` accepted for Java compatibility only, one line each."""
    marked = [s for s in specs if s.compat_only]
    if not marked:
        return ""
    lines = [f"- `{s.name}`: {_cell(s.compat_only)}" for s in marked]
    return (
        "These options are accepted so that Java settings carry over, and have no effect "
        "(the reason is Java 4.9.8's own behaviour or what rmqk has no counterpart for):\n\n"
        + "\n".join(lines)
        + "\n"
    )


def config_reference() -> str:
    """Every key of a consumer table, grouped as the config reference shows them."""
    from rmqk.app.config import COMPOSITION_KEYS
    from rmqk.options import OPTIONS, OptionType

    names = [o.name for o in OPTIONS]
    first_consumer = names.index("message_model")
    client = [o for o in OPTIONS[:first_consumer]]
    plugins = [
        o for o in OPTIONS[first_consumer:] if o.value_type in (OptionType.PLUGIN, OptionType.TABLE)
    ]
    consuming = [o for o in OPTIONS[first_consumer:] if o not in plugins]
    parts = [
        "## Options accepted for Java compatibility only\n\n" + compat_only_summary(OPTIONS),
        "## What the consumer is\n\n"
        "The group, what it subscribes to and where its messages go. `group`, "
        "`namesrv_addr` and `subscription` are required.\n",
        *(_option_section(s) for s in COMPOSITION_KEYS),
        "## Client (Java's ClientConfig)\n\n"
        "How the consumer finds and talks to name servers and brokers.\n",
        *(_option_section(s) for s in client),
        "## Consuming (Java's DefaultMQPushConsumer)\n\n"
        "Where consumption starts, how much is pulled and buffered, how failures are retried.\n",
        *(_option_section(s) for s in consuming),
        "## Plugins the consumer is composed of\n\n"
        "Each names a registered implementation (`rmqk plugins` lists them) and has an options "
        "table handed to its factory.\n",
        *(_option_section(s) for s in plugins),
    ]
    return "\n".join(parts)


# -- plugin options ------------------------------------------------------------------


def _cell(text: str) -> str:
    # A "<room>" in a doc would be read as an HTML tag and vanish.
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def options_table(cls: type, extra: list[tuple[str, str, str, str, str]] | None = None) -> str:
    """One row per option ``cls`` declares with :func:`rmqk.options.option`."""
    from rmqk.options import option_specs

    return specs_table(list(option_specs(cls).values()), extra)


def specs_table(specs: list[Any], extra: list[tuple[str, str, str, str, str]] | None = None) -> str:
    """One row per :class:`rmqk.options.OptionSpec` (a plugin's ``option_specs``)."""
    rows = []
    for spec in specs:
        allowed = ", ".join(f"`{c}`" for c in spec.choices) or (
            f"`{spec.range_text}`" if spec.range_text else ""
        )
        kind = spec.value_type.value + (f" ({spec.unit})" if spec.unit else "")
        default = spec.default_repr
        if spec.default_text is None and spec.required is None:
            default = f"`{default}`"
        doc = spec.doc
        if spec.compat_only:
            doc = f"{doc} **Java compatibility only**: {COMPAT_ONLY} {spec.compat_only}"
        rows.append((f"`{spec.name}`", kind, default, allowed, doc))
    for key, kind, default, allowed, doc in extra or []:
        rows.append((f"`{key}`", kind, default, allowed, doc))
    if not rows:
        return "No options.\n"
    head = "| key | type | default | allowed | what |\n| --- | --- | --- | --- | --- |\n"
    return head + "\n".join("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows) + "\n"


def plugin_option_classes() -> list[tuple[str, str, str, type]]:
    """(kind, name, options table, declaring class) of every built-in plugin's options."""
    from rmqk.plugins.allocation.options import STRATEGY_OPTIONS
    from rmqk.plugins.offsets.options import STORE_OPTIONS
    from rmqk.plugins.sinks.jsonl_options import JsonlOptions
    from rmqk.plugins.sinks.python_options import PythonSinkOptions
    from rmqk.plugins.sinks.sqlite_options import SqliteOptions

    out = [
        ("allocation strategy", name, "allocate_options", cls)
        for name, cls in STRATEGY_OPTIONS.items()
    ]
    out += [
        ("offset store", name, "offset_store_options", cls) for name, cls in STORE_OPTIONS.items()
    ]
    out += [
        ("sink", "jsonl", "sink_options", JsonlOptions),
        ("sink", "python", "sink_options", PythonSinkOptions),
        ("sink", "sqlite", "sink_options", SqliteOptions),
    ]
    return out


def plugin_options() -> str:
    """The options table of every built-in plugin, from the plugins' declarations."""
    parts = []
    for kind, name, table, cls in plugin_option_classes():
        parts.append(f"### {table} of the {name} {kind}\n\n{options_table(cls)}")
    from rmqk.plugins.remoting.options import TCP_OPTION_SPECS

    parts.append(
        "### transport_options of the tcp transport\n\n" + specs_table(list(TCP_OPTION_SPECS))
    )
    parts.append(
        "### sink_options of the spark sink\n\n"
        "Also in the [Spark guide](spark.md).\n\n" + spark_sink_options()
    )
    return "\n".join(parts)


# -- hook reference ---------------------------------------------------------------

_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc):`~?([^`]+)`")


def _markdown_docstring(doc: str) -> str:
    text = inspect.cleandoc(doc)
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    # reST literals (``x``) become Markdown code spans.
    return text.replace("``", "`")


def hook_names() -> list[str]:
    from rmqk.spi import hookspecs

    return sorted(n for n in dir(hookspecs) if n.startswith("rmqk_"))


def _hook_kind(name: str, function: Any) -> str:
    opts = getattr(function, "rmqk_spec", {}) or {}
    if name.startswith("rmqk_register_"):
        return "registration hook; called once, when its registry is built; sync only"
    if opts.get("historic"):
        return "historic event hook; a plugin registered later still receives the call"
    return "event hook"


def hook_reference() -> str:
    """One section per hook spec: signature, kind, docstring."""
    from rmqk.spi import hookspecs

    registration = [n for n in hook_names() if n.startswith("rmqk_register_")]
    events = [n for n in hook_names() if n not in registration]
    # Keep the order the module declares them in, which groups related hooks.
    order = {name: i for i, name in enumerate(vars(hookspecs))}
    parts = []
    for title, names in (("Registration hooks", registration), ("Event hooks", events)):
        parts.append(f"## {title}\n")
        for name in sorted(names, key=order.__getitem__):
            function = getattr(hookspecs, name)
            signature = inspect.signature(function)
            params = ", ".join(signature.parameters)
            parts.append(
                f"### {name}\n\n"
                f"```python\n@hookimpl\ndef {name}({params}): ...\n```\n\n"
                f"*{_hook_kind(name, function)}*\n\n"
                f"{_markdown_docstring(function.__doc__ or '')}\n"
            )
    return "\n".join(parts)


# -- CLI reference ----------------------------------------------------------------


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    # argparse wraps help to the terminal's width; the reference should not depend on it.
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def command_names() -> list[str]:
    from rmqk.app.cli import _all_commands

    return sorted(_all_commands())


def cli_reference() -> str:
    """``rmqk --help`` and every sub-command's ``--help``, as the installed CLI prints them."""
    import argparse

    from rmqk.app.cli import build_parser

    with _columns(96):
        parser = build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parts = ["## rmqk\n", "```text", parser.format_help().rstrip(), "```\n"]
        for name, sub in sorted(subparsers.choices.items()):
            parts += [f"## rmqk {name}\n", "```text", sub.format_help().rstrip(), "```\n"]
    return "\n".join(parts)


# -- migration from Java ---------------------------------------------------------------


def java_options() -> str:
    """Each Java setter of DefaultMQPushConsumer / ClientConfig and its rmqk key."""
    from rmqk.app.config import COMPOSITION_KEYS
    from rmqk.options import OPTIONS

    rows = []
    for spec in (*COMPOSITION_KEYS, *OPTIONS):
        if not spec.java_name:
            continue
        setter = "set" + spec.java_name[0].upper() + spec.java_name[1:]
        default = spec.default_repr.replace("|", "\\|")
        rows.append(
            f"| `{setter}` | [`{spec.name}`](config-reference.md#{spec.name}) | {default} |"
        )
    head = "| Java | rmqk key and keyword | rmqk default |\n| --- | --- | --- |\n"
    return head + "\n".join(rows) + "\n"


# -- Spark ----------------------------------------------------------------------------


def spark_sink_options() -> str:
    """The spark sink's ``sink_options`` keys, from the sink's option declarations."""
    from rmqk.plugins.spark.options import SinkOptions

    return options_table(SinkOptions)


def spark_source_options() -> str:
    """The rocketmq source's options, from the source's option declarations, then every
    client option a range reader takes (generated from CLIENT_OPTIONS), then those it
    refuses with why."""
    from rmqk.engine.reader import READER_REFUSES
    from rmqk.options import option_specs
    from rmqk.plugins.spark.options import SourceOptionTable, source_client_specs

    client = source_client_specs()
    taken = [spec for name, spec in client.items() if spec.attr not in READER_REFUSES]
    table = specs_table([*option_specs(SourceOptionTable).values(), *taken])
    refused = "; ".join(
        f"`{name}` ({READER_REFUSES[spec.attr]})"
        for name, spec in client.items()
        if spec.attr in READER_REFUSES
    )
    return (
        f"{table}\nThe client options after `transportOptions` are every client kind's "
        "(`rmqk.ClientOptions`, the same names in camelCase). The source refuses the "
        f"others, which a range reader has no use for: {refused}.\n"
    )


def spark_columns() -> str:
    """The columns the sink writes and the source reads, as Spark DDL."""
    from rmqk.plugins.spark.columns import DDL

    fields, depth, current = [], 0, ""
    for ch in DDL:
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            fields.append(current.strip())
            current = ""
        else:
            current += ch
    fields.append(current.strip())
    return "```text\n" + ",\n".join(fields) + "\n```\n"


def lite_pull_options() -> str:
    """The lite pull consumer's own options, from their declarations."""
    from rmqk.options.lite_pull import LitePullOptions

    return options_table(LitePullOptions)


def client_options() -> str:
    """The client options every client kind takes (ClientOptions), linked to their sections."""
    from rmqk.spi.client_options import CLIENT_OPTIONS

    return (
        ", ".join(f"[`{s.name}`](config-reference.md#{s.name})" for s in CLIENT_OPTIONS) + "\n"
    )


def producer_options() -> str:
    """The producer's options, from their declarations."""
    from rmqk.options.producer import ProducerOptions

    return options_table(ProducerOptions)


GENERATORS: dict[str, Callable[[], str]] = {
    "client-options": client_options,
    "lite-pull-options": lite_pull_options,
    "producer-options": producer_options,
    "java-options": java_options,
    "spark-sink-options": spark_sink_options,
    "plugin-options": plugin_options,
    "spark-source-options": spark_source_options,
    "spark-columns": spark_columns,
    "config-reference": config_reference,
    "hook-reference": hook_reference,
    "cli-reference": cli_reference,
}


def begin_marker(name: str) -> str:
    return f"<!-- generated: {name} -->"


# The first line of every block, for whoever opens the page to edit it.
DO_NOT_EDIT = (
    f"<!-- do not edit this block: it is generated from the code; regenerate: {COMMAND} -->"
)


def end_marker(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def generated_names(text: str) -> list[str]:
    """The names of the generated blocks ``text`` holds, in order."""
    return [m.group(1) for line in text.splitlines() if (m := BEGIN.match(line))]


def expand(text: str, where: str = "<text>", keep: Collection[str] = ()) -> str:
    """``text`` with each generated block's content replaced by what its generator returns.

    A begin marker with no end marker before the next begin marker (or the end of
    the page) opens a new block: the generated content and the end marker are
    inserted after it, and the lines that follow stay. The blocks named in ``keep``
    keep their committed content.
    """
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        begin = BEGIN.match(lines[i])
        if begin is None:
            if END.match(lines[i]):
                raise ValueError(f"{where}:{i + 1}: an end marker with no generated block open")
            out.append(lines[i])
            i += 1
            continue
        name = begin.group(1)
        if name not in GENERATORS:
            raise ValueError(
                f"{where}:{i + 1}: unknown generated section {name!r}; "
                f"known: {', '.join(GENERATORS)}"
            )
        j = i + 1
        while j < len(lines) and not BEGIN.match(lines[j]) and not END.match(lines[j]):
            j += 1
        closing = END.match(lines[j]) if j < len(lines) else None
        if closing is not None:
            if closing.group(1) != name:
                raise ValueError(
                    f"{where}:{j + 1}: block {name!r} (line {i + 1}) ends with the end "
                    f"marker of {closing.group(1)!r}"
                )
            committed: str | None = "".join(lines[i + 1 : j])
            i = j + 1
        else:
            committed = None
            i += 1
        if name in keep and committed is not None:
            body = committed.strip("\n")
        else:
            body = GENERATORS[name]().strip("\n")
        if body.startswith(DO_NOT_EDIT):
            body = body[len(DO_NOT_EDIT) :].strip("\n")
        out.append(f"{begin_marker(name)}\n{DO_NOT_EDIT}\n\n{body}\n\n{end_marker(name)}\n")
    return "".join(out)


def stale_pages(docs: Path = DOCS) -> list[Path]:
    """The pages of ``docs`` whose generated blocks differ from what the code generates.

    On a Python other than :data:`CLI_REFERENCE_PYTHON` the CLI reference is taken
    as committed (argparse's layout differs there, not rmqk's commands).
    """
    keep = () if sys.version_info[:2] == CLI_REFERENCE_PYTHON else ("cli-reference",)
    stale = []
    for page in sorted(docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if generated_names(text) and expand(text, str(page), keep) != text:
            stale.append(page)
    return stale


def write(docs: Path = DOCS) -> list[Path]:
    """Rewrite every generated block of the pages of ``docs``; the pages that changed."""
    changed = []
    for page in sorted(docs.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if not generated_names(text):
            continue
        new = expand(text, str(page))
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python docs/_ext/rmqk_reference.py",
        description="Regenerate the reference blocks of docs/*.md from the code.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the stale blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    args = parser.parse_args(argv)
    if args.write:
        for page in write():
            print(f"rewrote {page.relative_to(DOCS.parent)}")
        return 0
    stale = stale_pages()
    for page in stale:
        print(f"stale: {page.relative_to(DOCS.parent)}; regenerate with: {COMMAND}")
    return 1 if stale else 0


_OTHER_PAGES = "<!-- other pages -->"
_TOCTREE_ENTRY = re.compile(r"^([a-z0-9][a-z0-9_/-]*)$", re.M)


def other_pages(text: str, found: set[str], docname: str) -> str:
    """``text`` with its ``<!-- other pages -->`` line replaced by the pages no toctree names.

    Pages that other work adds (status, performance, reliability, ...) then appear in
    the navigation without the index naming each, and a page named but not yet
    written does not fail the build.
    """
    named = set(_TOCTREE_ENTRY.findall(text))
    rest = sorted(found - named - {docname})
    return text.replace(_OTHER_PAGES, "\n".join(rest))


def _on_source_read(app: Any, docname: str, source: list[str]) -> None:
    # The generated blocks are committed Markdown and render as they are; the
    # staleness test (tests/test_docs.py) keeps them in step with the code.
    if _OTHER_PAGES in source[0]:
        source[0] = other_pages(source[0], set(app.env.found_docs), docname)


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _on_source_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    raise SystemExit(main())
