"""The ``spark`` sink's options (a consumer's ``sink_options`` table), validated.

Every mistake is reported at once in one :class:`~rmqk.errors.ConfigError`
naming the key and what is allowed. Spark settings are given either as quoted
keys (``"spark.driver.memory" = "1g"``) or, since TOML turns an unquoted dotted
key into nested tables, as ``spark.driver.memory = "1g"``; both end up as the
flat setting ``spark.driver.memory``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from rmqk.errors import ConfigError, ConfigProblem
from rmqk.plugins.spark.columns import COLUMN_NAMES

__all__ = [
    "BODY_FORMATS",
    "FORMATS",
    "SINK_KEYS",
    "SinkOptions",
    "parse_sink_options",
]

BODY_FORMATS = ("binary", "text", "json")
# File formats whose output is a set of part files the exactly-once mode can move.
FORMATS = ("parquet", "orc")
DEFAULT_MASTER = "local[2]"
DEFAULT_APP_NAME = "rmqk"

# key -> what it is, for the unknown-key message and the docs.
SINK_KEYS: dict[str, str] = {
    "path": "directory the files go to",
    "table": "table name to append to (with path: an external table over path)",
    "format": f"file format, one of {', '.join(FORMATS)} (default parquet)",
    "partition_by": "column name or list of column names to partition the output by",
    "body_format": "binary (default), text (UTF-8) or json (with body_schema)",
    "body_schema": "Spark DDL of the JSON body, e.g. 'order_id STRING, amount DOUBLE'",
    "flush_rows": "flush when this many rows are buffered (default 100000), at most this many "
    "per flush; rmqk run lets a consumer keep twice this in flight (the sink's window_rows)",
    "flush_bytes": "flush when the buffered bodies reach this many bytes (default 64 MiB)",
    "flush_seconds": "flush when the oldest buffered row is this old (default 1.0)",
    "files_per_flush": "files written per flush (default 1; 0 lets Spark decide)",
    "exactly_once": "record each flush in a commit log so a replay writes nothing twice",
    "master": f"Spark master of the process's session (default {DEFAULT_MASTER})",
    "app_name": f"Spark application name (default {DEFAULT_APP_NAME})",
    "spark.*": 'any Spark setting, e.g. "spark.driver.memory" = "1g"',
}
_DDL_NAME = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s")
_EMPTY: Mapping[str, str] = MappingProxyType({})


def _empty() -> Mapping[str, str]:
    return _EMPTY


@attrs.frozen
class SinkOptions:
    path: str | None = None
    table: str | None = None
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    body_format: str = "binary"
    body_schema: str | None = None
    flush_rows: int = 100_000
    flush_bytes: int = 64 * 1024 * 1024
    flush_seconds: float = 1.0
    files_per_flush: int = 1
    exactly_once: bool = False
    master: str = DEFAULT_MASTER
    app_name: str = DEFAULT_APP_NAME
    spark_conf: Mapping[str, str] = attrs.field(factory=_empty, hash=False)

    @property
    def target(self) -> str:
        """What the output is, for messages and for sharing one writer per output."""
        if self.table and self.path:
            return f"table {self.table} at {self.path}"
        if self.table:
            return f"table {self.table}"
        return f"{self.format} files at {self.path}"

    def output_settings(self) -> tuple[Any, ...]:
        """The options that shape the written rows; sinks sharing an output must agree."""
        return (
            self.path,
            self.table,
            self.format,
            self.partition_by,
            self.body_format,
            self.body_schema,
            self.exactly_once,
            self.files_per_flush,
        )


def _spark_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def _flatten_spark(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten_spark(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def parse_sink_options(options: Mapping[str, Any], where: str = "<sink_options>") -> SinkOptions:
    """Validate ``options``; raises ConfigError listing every problem."""
    problems: list[ConfigProblem] = []

    def problem(key: str, message: str) -> None:
        problems.append(ConfigProblem(where, "spark", key, message))

    values: dict[str, Any] = {}
    spark_settings: dict[str, Any] = {}
    for key, value in options.items():
        if key == "spark" and isinstance(value, Mapping):
            _flatten_spark("spark", value, spark_settings)
        elif key.startswith("spark."):
            _flatten_spark(key, value, spark_settings)
        elif key in SINK_KEYS:
            values[key] = value
        else:
            from difflib import get_close_matches

            close = get_close_matches(key, list(SINK_KEYS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problem(key, f"unknown key{hint}; allowed keys: {', '.join(SINK_KEYS)}")

    conf: dict[str, str] = {}
    for key, value in spark_settings.items():
        text = _spark_value(value)
        if text is None:
            problem(key, f"a Spark setting must be a string, number or boolean, got {value!r}")
        else:
            conf[key] = text

    def string(key: str, required: bool = False) -> str | None:
        value = values.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            problem(key, f"must be a non-empty string, got {value!r}")
            return None
        return value

    def integer(key: str, default: int, minimum: int) -> int:
        value = values.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            problem(key, f"must be an integer, got {value!r}")
            return default
        if value < minimum:
            problem(key, f"must be at least {minimum}, got {value}")
            return default
        return value

    def boolean(key: str, default: bool) -> bool:
        value = values.get(key, default)
        if not isinstance(value, bool):
            problem(key, f"must be true or false, got {value!r}")
            return default
        return value

    path = string("path")
    table = string("table")
    if path is None and table is None and "path" not in values and "table" not in values:
        problem("path", "required: the directory to write to (or give table)")
    fmt = string("format") or "parquet"
    if fmt not in FORMATS:
        problem("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")

    partition_raw = values.get("partition_by", ())
    partition_by: tuple[str, ...] = ()
    if isinstance(partition_raw, str):
        partition_raw = [partition_raw]
    if isinstance(partition_raw, list | tuple) and all(
        isinstance(p, str) and p for p in partition_raw
    ):
        partition_by = tuple(partition_raw)
    else:
        problem("partition_by", f"must be a column name or a list of them, got {partition_raw!r}")
    for name in partition_by:
        if name in ("body", "properties"):
            problem("partition_by", f"cannot partition by {name!r} (binary and map columns)")

    body_format = values.get("body_format", "binary")
    if body_format not in BODY_FORMATS:
        problem("body_format", f"must be one of {', '.join(BODY_FORMATS)}, got {body_format!r}")
    body_schema = string("body_schema")
    if body_format == "json" and body_schema is None and "body_schema" not in values:
        problem("body_schema", "required with body_format = 'json': the Spark DDL of the body")
    if body_schema is not None and body_format != "json":
        problem("body_schema", "only used with body_format = 'json'")

    output_columns = [c for c in COLUMN_NAMES if c != "body" or body_format != "json"]
    if body_format == "json" and body_schema is not None:
        json_names = body_schema_names(body_schema)
        if not json_names:
            problem("body_schema", f"names no field: {body_schema!r}")
        for name in json_names:
            if name in output_columns:
                problem(
                    "body_schema",
                    f"field {name!r} clashes with the message column of that name; rename it",
                )
        output_columns += json_names
    for name in partition_by:
        if name not in output_columns and name not in ("body", "properties"):
            problem(
                "partition_by",
                f"no column {name!r}; columns: {', '.join(output_columns)}",
            )

    flush_rows = integer("flush_rows", 100_000, 1)
    flush_bytes = integer("flush_bytes", 64 * 1024 * 1024, 1)
    files_per_flush = integer("files_per_flush", 1, 0)
    flush_seconds_raw = values.get("flush_seconds", 1.0)
    flush_seconds = 1.0
    if isinstance(flush_seconds_raw, bool) or not isinstance(flush_seconds_raw, int | float):
        problem("flush_seconds", f"must be a number of seconds, got {flush_seconds_raw!r}")
    elif flush_seconds_raw <= 0:
        problem("flush_seconds", f"must be greater than 0, got {flush_seconds_raw}")
    else:
        flush_seconds = float(flush_seconds_raw)
    exactly_once = boolean("exactly_once", False)
    if exactly_once and path is None and "path" not in values:
        problem(
            "exactly_once",
            "needs path: the commit log and staged files live beside the output "
            "(with table, the table is created over path)",
        )
    master = string("master") or DEFAULT_MASTER
    app_name = string("app_name") or DEFAULT_APP_NAME
    if problems:
        raise ConfigError(problems)
    return SinkOptions(
        path=path,
        table=table,
        format=fmt,
        partition_by=partition_by,
        body_format=str(body_format),
        body_schema=body_schema,
        flush_rows=flush_rows,
        flush_bytes=flush_bytes,
        flush_seconds=flush_seconds,
        files_per_flush=files_per_flush,
        exactly_once=exactly_once,
        master=master,
        app_name=app_name,
        spark_conf=MappingProxyType(conf),
    )


def body_schema_names(ddl: str) -> list[str]:
    """Top-level field names of a simple DDL string (best effort, before Spark runs)."""
    names: list[str] = []
    depth = 0
    current = ""
    for ch in ddl + ",":
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            match = _DDL_NAME.match(current + " ")
            if match:
                names.append(match.group(1))
            current = ""
        else:
            current += ch
    return names
