"""Plugins declare their options with rmqk.options; the reference comes from the declarations."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
import pytest

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.options import (
    OptionInvalid,
    OptionType,
    Where,
    load_options,
    option,
    option_specs,
    parse_options,
    rehome,
)
from rmqk.plugins.sinks.jsonl import JsonlSink
from rmqk.plugins.sinks.python import PythonSink

ROOT = Path(__file__).resolve().parent.parent


def _even(n: int) -> int:
    if n % 2:
        raise OptionInvalid(f"must be even, got {n}")
    return n


@attrs.frozen
class BatchOptions:
    path: str = option(OptionType.PATH, "File to write to.", required="the file to write to")
    batch_rows: int = option(OptionType.INT, "Rows per write.", 1000, minimum=1, unit="rows")
    mode: str = option(OptionType.STR, "How to write.", "append", allowed=("append", "replace"))
    pairs: int = option(OptionType.INT, "Rows per pair group.", 2, minimum=2, check=_even)
    ratio: float = option(OptionType.FLOAT, "A fraction.", 0.5, minimum=0, maximum=1)
    tags: tuple[str, ...] = option(OptionType.STR_LIST, "Tags.", ())
    extra: Mapping[str, Any] = option(
        OptionType.TABLE, "More.", MappingProxyType({}), default_text="{}"
    )


WHERE = Where("consumers.toml", "consumers.orders.sink_options")


def test_values_are_resolved_frozen_with_defaults() -> None:
    opts = load_options(
        BatchOptions, {"path": "out", "tags": ["a", "b"], "extra": {"k": [1, 2]}}, WHERE
    )
    assert opts.path == "out"
    assert opts.batch_rows == 1000
    assert opts.tags == ("a", "b")
    assert opts.extra["k"] == (1, 2)
    with pytest.raises(TypeError):
        opts.extra["k"] = 3  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        opts.path = "x"  # type: ignore[misc]


def test_problems_name_file_table_and_key_all_at_once() -> None:
    opts, problems = parse_options(
        BatchOptions,
        {"batch_rows": 0, "mode": "apend", "pairs": 3, "ratio": 2, "tags": ["a", 1], "pth": 1},
        WHERE,
    )
    assert opts.batch_rows == 1000  # a rejected value keeps its default
    text = {p.key: str(p) for p in problems}
    assert text["batch_rows"] == (
        "consumers.toml: [consumers.orders.sink_options] batch_rows: must be an integer >= 1, got 0"
    )
    assert "must be one of append, replace, got 'apend'" in text["mode"]
    assert "must be even, got 3" in text["pairs"]
    assert "must be in [0, 1], got 2" in text["ratio"]
    assert "must be a non-empty string, got 1" in text["tags[1]"]
    assert "unknown option (did you mean 'path'?); allowed: path, batch_rows" in text["pth"]
    assert "required key is missing: the file to write to" in text["path"]
    with pytest.raises(ConfigError) as info:
        load_options(BatchOptions, {"batch_rows": True}, WHERE)
    assert [p.key for p in info.value.problems] == ["batch_rows", "path"]


def test_a_table_that_is_not_a_table_is_one_problem() -> None:
    _, problems = parse_options(BatchOptions, ["x"], WHERE)
    assert [(p.key, p.message) for p in problems] == [
        (None, 'options must be a table, got array ["x"]')
    ]
    assert parse_options(BatchOptions, None, Where("f"))[1][0].key == "path"


def test_specs_document_the_declarations() -> None:
    specs = option_specs(BatchOptions)
    assert list(specs) == ["path", "batch_rows", "mode", "pairs", "ratio", "tags", "extra"]
    assert specs["batch_rows"].range_text == ">= 1"
    assert specs["mode"].choices == ("append", "replace")
    assert specs["path"].default_repr == "(required)"
    assert specs["extra"].default_repr == "{}"


def test_rehome_fills_in_the_placeholders() -> None:
    error = ConfigError(
        [
            ConfigProblem("<sink_options>", "jsonl", "path", "required"),
            ConfigProblem("<options>", "allocate_options", "x", "AVG: unknown option"),
            ConfigProblem("/etc/other.toml", "t", "k", "kept"),
        ]
    )
    out = [str(p) for p in rehome(error, "c.toml", "consumers.orders").problems]
    assert out == [
        "c.toml: [consumers.orders.sink_options] path: jsonl: required",
        "c.toml: [consumers.orders.allocate_options] x: AVG: unknown option",
        "/etc/other.toml: [t] k: kept",
    ]


def test_jsonl_and_python_sinks_report_through_the_declarations(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        JsonlSink({"body_format": "xml", "fsync": "yes", "paht": "x"})
    problems = {p.key: p.message for p in info.value.problems}
    assert set(problems) == {"paht", "path", "body_format", "fsync"}
    assert all(p.table == "jsonl" for p in info.value.problems)
    assert "text, base64, json" in problems["body_format"]
    assert "true or false" in problems["fsync"]
    sink = JsonlSink({"path": str(tmp_path / "o.jsonl"), "fsync": False})
    assert (sink.body_format, sink.fsync) == ("text", False)

    with pytest.raises(ConfigError, match="function: required key is missing"):
        PythonSink({})
    with pytest.raises(ConfigError, match="is not callable"):
        PythonSink({"function": "math:pi"})
    assert PythonSink({"function": "builtins:print"}).function is print


def _reference() -> Any:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import rmqk_reference

        return rmqk_reference
    finally:
        sys.path.pop(0)


def test_every_builtin_plugin_option_is_in_the_reference() -> None:
    ref = _reference()
    text = ref.plugin_options()
    for kind, name, table, cls in ref.plugin_option_classes():
        assert f"### {table} of the {name} {kind}" in text
        for spec in option_specs(cls).values():
            assert f"| `{spec.name}` |" in text
    from rmqk.plugins.remoting.options import TCP_OPTION_SPECS
    from rmqk.plugins.spark.options import SinkOptions

    for name in option_specs(SinkOptions):
        assert f"| `{name}` |" in ref.spark_sink_options()
    assert "### transport_options of the tcp transport" in text
    for spec in TCP_OPTION_SPECS:
        assert f"| `{spec.name}` |" in text
    page = (ROOT / "docs" / "config-reference.md").read_text()
    assert "<!-- generated: plugin-options -->" in page


def test_rmqk_run_names_the_file_and_table_of_a_sink_option(tmp_path: Path) -> None:
    import asyncio

    from rmqk.app.config import load_config
    from rmqk.app.runtime import run_config

    path = tmp_path / "consumers.toml"
    path.write_text(
        "[consumers.orders]\n"
        'group = "g"\nnamesrv_addr = "127.0.0.1:9876"\nsubscription = { T = "*" }\n'
        'sink = "jsonl"\nsink_options = { path = "o.jsonl", fsync = 1 }\n'
    )
    config = load_config(path)
    with pytest.raises(ConfigError) as info:
        asyncio.run(run_config(config, asyncio.Event()))
    assert str(info.value.problems[0]) == (
        f"{path}: [consumers.orders.sink_options] fsync: jsonl: "
        "must be true or false, got integer 1"
    )


def test_text_values_and_table_keys_other_than_the_attribute() -> None:
    from rmqk.plugins.spark.options import SourceOptionTable

    table = load_options(
        SourceOptionTable,
        {"namesrv": "h:1", "topics": "A", "maxMessagesPerTrigger": "5", "failOnDataLoss": "FALSE"},
        Where("<spark options>", "rocketmq"),
        text=True,
    )
    assert (table.max_messages_per_trigger, table.fail_on_data_loss) == (5, False)
    assert table.topics == ("A",) and table.pull_timeout_ms == 10_000
    _, problems = parse_options(
        SourceOptionTable,
        {"namesrv": "h:1", "topics": "A", "pullTimeoutMs": "soon"},
        Where("x"),
        text=True,
    )
    assert [(p.key, p.message) for p in problems] == [
        ("pullTimeoutMs", 'must be an integer >= 1, got string "soon"')
    ]
    ref = _reference()
    for name in option_specs(SourceOptionTable):
        assert f"| `{name}` |" in ref.spark_source_options()
    assert "<!-- generated: spark-source-options -->" in (ROOT / "docs" / "spark.md").read_text()
