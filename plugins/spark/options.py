"""The ``spark`` sink's options (a consumer's ``sink_options`` table), validated.

Every mistake is reported at once in one :class:`~rmqk.model.errors.ConfigError`
naming the key and what is allowed. Spark settings are given either as quoted
keys (``"spark.driver.memory" = "1g"``) or, since TOML turns an unquoted dotted
key into nested tables, as ``spark.driver.memory = "1g"``; both end up as the
flat setting ``spark.driver.memory``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.model.namespace import check_namespace
from rmqk.plugins.sinks.badbody import (
    BAD_BODY_ACTIONS,
    CORRUPT_RECORD_COLUMN,
    CORRUPT_RECORD_COLUMN_DOC,
    ON_BAD_BODY_DOC,
    check_column_name,
)
from rmqk.plugins.spark.columns import COLUMN_NAMES
from rmqk.spi.client_options import CLIENT_OPTIONS
from rmqk.spi.options import OptionInvalid, OptionSpec, OptionType, Where, option, parse_options

__all__ = [
    "BODY_FORMATS",
    "FORMATS",
    "SPARK_SETTINGS_DOC",
    "WRITERS",
    "SinkOptions",
    "SourceOptionTable",
    "parse_sink_options",
]

BODY_FORMATS = ("binary", "text", "json")
WRITERS = ("arrow", "spark")
# File formats whose output is a set of part files the exactly-once mode can move.
FORMATS = ("parquet", "orc")
DEFAULT_MASTER = "local[2]"
DEFAULT_APP_NAME = "rmqk"

_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
_DDL_NAME = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s")
_EMPTY: Mapping[str, str] = MappingProxyType({})
# Keys of the table that are Spark settings rather than the sink's own options.
SPARK_SETTINGS_DOC = 'any Spark setting, e.g. "spark.driver.memory" = "1g"'


def _empty() -> Mapping[str, str]:
    return _EMPTY


def _spark_setting(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise OptionInvalid(f"a Spark setting must be a string, number or boolean, got {value!r}")


def _partition_columns(value: object) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if isinstance(names, tuple) and names and all(isinstance(p, str) and p for p in names):
        return names
    if names == ():
        return ()
    raise OptionInvalid(f"must be a column name or a list of them, got {value!r}")


def _namespace(value: str) -> str:
    problem = check_namespace(value)
    if problem:
        raise OptionInvalid(problem)
    return value


def _log_file(value: object) -> str | None:
    if value is False:
        return None
    if isinstance(value, str) and value.strip():
        return value
    raise OptionInvalid(f"must be a file name, or false for the terminal, got {value!r}")


def _positive_seconds(value: float) -> float:
    if value <= 0:
        raise OptionInvalid(f"must be greater than 0, got {value:g}")
    return value


@attrs.frozen
class SinkOptions:
    """The spark sink's options; the Spark settings (``spark.*``) are in ``spark_conf``."""

    path: str | None = option(
        OptionType.STR,
        "Directory the files go to. Required unless table is given.",
        None,
        default_text="(none)",
        nullable=True,
    )
    table: str | None = option(
        OptionType.STR,
        "Table name to append to (with path: an external table over path).",
        None,
        default_text="(none)",
        nullable=True,
    )
    format: str = option(OptionType.STR, "File format.", "parquet", allowed=FORMATS)
    partition_by: tuple[str, ...] = option(
        OptionType.ANY,
        "Column name or list of column names to partition the output by.",
        (),
        default_text="[]",
        check=_partition_columns,
    )
    body_format: str = option(
        OptionType.STR,
        "binary, text (UTF-8) or json (parsed with body_schema into columns).",
        "binary",
        allowed=BODY_FORMATS,
    )
    body_schema: str | None = option(
        OptionType.STR,
        "Spark DDL of the JSON body, e.g. 'order_id STRING, amount DOUBLE'.",
        None,
        default_text="(none)",
        nullable=True,
    )
    on_bad_body: str = option(OptionType.STR, ON_BAD_BODY_DOC, "keep", allowed=BAD_BODY_ACTIONS)
    corrupt_record_column: str = option(
        OptionType.STR, CORRUPT_RECORD_COLUMN_DOC, CORRUPT_RECORD_COLUMN, check=check_column_name
    )
    flush_rows: int = option(
        OptionType.INT,
        "Flush when this many rows are buffered, at most this many per flush; rmqk run lets "
        "a consumer keep twice this in flight (the sink's window_rows).",
        100_000,
        minimum=1,
        unit="rows",
    )
    flush_bytes: int = option(
        OptionType.INT,
        "Flush when the buffered bodies reach this many bytes.",
        64 * 1024 * 1024,
        default_text="67108864 (64 MiB)",
        minimum=1,
        unit="bytes",
    )
    flush_seconds: float = option(
        OptionType.FLOAT,
        "Flush when the oldest buffered row is this old (greater than 0).",
        1.0,
        unit="seconds",
        check=_positive_seconds,
    )
    files_per_flush: int = option(
        OptionType.INT, "Files written per flush; 0 lets Spark decide.", 1, minimum=0
    )
    exactly_once: bool = option(
        OptionType.BOOL,
        "Record each flush in a commit log so a replay writes nothing twice (needs path).",
        False,
    )
    writer: str | None = option(
        OptionType.STR,
        "Who writes the files: arrow (pyarrow, no JVM; Parquet at path) or spark (a Spark "
        "job per flush; tables, ORC, and partitions by timestamp or floating-point columns).",
        None,
        default_text="arrow for Parquet at path, else spark",
        nullable=True,
        allowed=WRITERS,
    )
    catalog_dir: str | None = option(
        OptionType.STR,
        "With table: the folder of the catalog the table is registered in, Spark's Hive "
        "catalog with its embedded metastore (metastore_db, derby.log) beside its warehouse "
        "(spark-warehouse), so that other Spark sessions find the table.",
        None,
        default_text="the working directory",
        nullable=True,
    )
    spark_log: str | None = option(
        OptionType.ANY,
        "File the JVM's own output (its stdout and stderr: startup notices, Spark's log) is "
        "appended to when this sink starts the process's Spark session; false: the terminal.",
        "spark.log",
        default_text="spark.log (in the working directory)",
        check=_log_file,
    )
    master: str = option(OptionType.STR, "Spark master of the process's session.", DEFAULT_MASTER)
    app_name: str = option(OptionType.STR, "Spark application name.", DEFAULT_APP_NAME)
    # Every key under spark (a dotted "spark.x.y" key or a [spark] table): Spark settings.
    spark_conf: Mapping[str, str] = option(
        OptionType.ANY,
        SPARK_SETTINGS_DOC,
        factory=_empty,
        name="spark.*",
        default_text="(none)",
        check=_spark_setting,
    )
    # The keys the table gave, for the checks across options (sink_option_problems).
    given_keys: frozenset[str] = attrs.field(factory=frozenset, eq=False)

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
            self.on_bad_body,
            self.corrupt_record_column,
            self.exactly_once,
            self.files_per_flush,
            self.resolved_writer,
        )

    @property
    def resolved_writer(self) -> str:
        """``writer``, or when unset: arrow for Parquet files at path, spark otherwise."""
        if self.writer is not None:
            return self.writer
        return "arrow" if _arrow_problem(self) is None else "spark"


def _arrow_problem(options: SinkOptions) -> str | None:
    """Why the Arrow writer cannot write this output as Spark would, if so."""
    from rmqk.plugins.spark.arrow_writer import arrow_partition_problem

    if options.table:
        return "tables are written by Spark (writer = 'spark')"
    if options.format != "parquet":
        return f"it writes Parquet; {options.format} is written by Spark (writer = 'spark')"
    return arrow_partition_problem(options)


def parse_sink_options(options: Mapping[str, Any], where: str = "<sink_options>") -> SinkOptions:
    """Validate ``options``; raises ConfigError listing every problem."""
    at = Where(where, "spark")
    parsed, problems = parse_options(SinkOptions, options, at)
    problems += sink_option_problems(parsed, where)
    if problems:
        raise ConfigError(problems)
    return parsed


def sink_option_problems(parsed: SinkOptions, where: str = "<sink_options>") -> list[ConfigProblem]:
    """What the declarations cannot say: the checks across the options of ``parsed``."""
    at = Where(where, "spark")
    own = parsed.given_keys
    problems: list[ConfigProblem] = []

    def problem(key: str, message: str) -> None:
        problems.append(at.problem(key, message))

    path, table, body_format = parsed.path, parsed.table, parsed.body_format
    if path is None and table is None and "path" not in own and "table" not in own:
        problem("path", "required: the directory to write to (or give table)")
    partition_by = parsed.partition_by
    for name in partition_by:
        if name in ("body", "properties"):
            problem("partition_by", f"cannot partition by {name!r} (binary and map columns)")

    body_schema = parsed.body_schema
    if body_format == "json" and body_schema is None and "body_schema" not in own:
        problem("body_schema", "required with body_format = 'json': the Spark DDL of the body")
    if body_schema is not None and body_format != "json":
        problem("body_schema", "only used with body_format = 'json'")
    for key in ("on_bad_body", "corrupt_record_column"):
        if key in own and body_format != "json":
            problem(key, "only used with body_format = 'json'")

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
        corrupt = parsed.corrupt_record_column
        if corrupt in output_columns:
            problem(
                "corrupt_record_column",
                f"{corrupt!r} clashes with the column of that name; columns: "
                f"{', '.join(output_columns)}",
            )
    for name in partition_by:
        if name not in output_columns and name not in ("body", "properties"):
            problem(
                "partition_by",
                f"no column {name!r}; columns: {', '.join(output_columns)}",
            )

    if parsed.exactly_once and path is None and "path" not in own:
        problem(
            "exactly_once",
            "needs path: the commit log and staged files live beside the output "
            "(with table, the table is created over path)",
        )
    if parsed.catalog_dir is not None and table is None:
        problem("catalog_dir", "only used with table: the catalog the table is registered in")
    if parsed.writer == "arrow" and not problems:
        why = _arrow_problem(parsed)
        if why is not None:
            problem("writer", f"arrow cannot write this output: {why}")
    return problems


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


# -- the rocketmq source ------------------------------------------------------------


def _topic_list(text: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in text.split(",") if t.strip())
    if not topics:
        raise OptionInvalid("names no topic; give comma-separated topics")
    bad = [t for t in topics if not _TOPIC.match(t)]
    if bad:
        raise OptionInvalid(f"{bad[0]!r} is not a valid topic name")
    return topics


def _namesrv_list(text: str) -> tuple[str, ...]:
    addrs = tuple(a.strip() for a in re.split(r"[;,]", text) if a.strip())
    if not addrs:
        raise OptionInvalid("names no address; give host:port, e.g. 127.0.0.1:9876")
    return addrs


def _json_table(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OptionInvalid(f'must be a JSON object, e.g. {{"key": 1}}: {exc}') from None
    if not isinstance(value, dict):
        raise OptionInvalid(f'must be a JSON object, e.g. {{"key": 1}}, got {text!r}')
    return MappingProxyType(value)


@attrs.frozen
class SourceOptionTable:
    """The options of ``spark.read(Stream).format("rocketmq")``, as Spark hands them over.

    Keys are case-insensitive and have aliases (see ``SOURCE_ALIASES``); values are text.
    """

    namesrv: tuple[str, ...] = option(
        OptionType.STR,
        "Name server(s), ';' or ',' separated.",
        (),
        required="the name server(s), e.g. 127.0.0.1:9876",
        check=_namesrv_list,
    )
    topics: tuple[str, ...] = option(
        OptionType.STR,
        "Comma-separated topics to read.",
        (),
        required="comma-separated topics",
        check=_topic_list,
    )
    starting_offsets: str | None = option(
        OptionType.STR,
        "earliest, latest, a timestamp (ms or ISO 8601) or JSON per queue; for a new query only.",
        None,
        name="startingOffsets",
        default_text="latest (streaming), earliest (batch)",
    )
    starting_offsets_by_timestamp: str | None = option(
        OptionType.STR,
        "JSON per queue of timestamps (ms), keyed as JSON startingOffsets: a named queue "
        "starts at its first message stored at or after its timestamp, the others as "
        "startingOffsets' default; not together with startingOffsets.",
        None,
        name="startingOffsetsByTimestamp",
        default_text="(none)",
    )
    ending_offsets: str | None = option(
        OptionType.STR,
        "Batch reads: latest, a timestamp (ms or ISO 8601: each queue ends before its first "
        "message stored at or after it) or JSON per queue.",
        None,
        name="endingOffsets",
        default_text="latest",
    )
    ending_offsets_by_timestamp: str | None = option(
        OptionType.STR,
        "Batch reads: JSON per queue of timestamps (ms), keyed as JSON endingOffsets: a named "
        "queue ends before its first message stored at or after its timestamp, the others at "
        "latest; not together with endingOffsets.",
        None,
        name="endingOffsetsByTimestamp",
        default_text="(none)",
    )
    max_messages_per_trigger: int | None = option(
        OptionType.INT,
        "At most this many messages per micro-batch, shared fairly among queues (streaming); "
        "Kafka's name maxOffsetsPerTrigger is accepted too (not both).",
        None,
        name="maxMessagesPerTrigger",
        default_text="(no limit)",
        minimum=1,
    )
    min_partitions: int | None = option(
        OptionType.INT,
        "At least this many input partitions per batch: when fewer queues have messages to "
        "read, their ranges are split into consecutive pieces, the biggest into the most.",
        None,
        name="minPartitions",
        default_text="(one per queue)",
        minimum=1,
    )
    sub_expression: str = option(
        OptionType.STR,
        "A subscription expression of expressionType: tags (TagA || TagB) or an SQL92 filter; "
        "checked as a consumer's subscription is.",
        "*",
        name="subExpression",
    )
    expression_type: str = option(
        OptionType.STR,
        "How subExpression is read: TAG, or SQL92 (brokers evaluate it over the message "
        "properties, and refuse it without enablePropertyFilter).",
        "TAG",
        name="expressionType",
        allowed=("TAG", "SQL92"),
    )
    fail_on_data_loss: bool = option(
        OptionType.BOOL,
        "Fail when planned offsets are gone from the broker.",
        True,
        name="failOnDataLoss",
    )
    pull_timeout_ms: int = option(
        OptionType.INT,
        "Timeout of each broker request.",
        10_000,
        name="pullTimeoutMs",
        minimum=1,
        unit="ms",
    )
    consumer_group: str = option(
        OptionType.STR,
        "The group named in pull requests (the source commits no offsets).",
        "rmqk-spark-source",
        name="consumerGroup",
    )
    namespace: str | None = option(
        OptionType.STR,
        "A client namespace, as Java's: with ns1, topics, JSON offset keys and consumerGroup "
        "are read as ns1%name on the brokers; the rows' topic column holds the names without "
        "it. Unset, a name server endpoint such as MQ_INST_1_abc.example.com:80 supplies it.",
        None,
        default_text="(none)",
        nullable=True,
        check=_namespace,
    )
    transport: str = option(
        OptionType.PLUGIN,
        "The registered remoting transport the source's driver and executors use, as a "
        "consumer's transport option; executors must have the plugin installed too.",
        "tcp",
        plugin_kind="transport",
    )
    transport_options: Mapping[str, Any] = option(
        OptionType.STR,
        "Options passed to the transport's factory, as a JSON object.",
        factory=_empty,
        name="transportOptions",
        default_text="{}",
        check=_json_table,
    )


# -- the client options -------------------------------------------------------------


def spark_name(name: str) -> str:
    """A client option's name as a Spark option (camelCase): ``use_tls`` -> ``useTls``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# Client options the source has an option of its own for, and that option.
SOURCE_OWN_CLIENT_OPTIONS: Mapping[str, str] = MappingProxyType(
    {"namesrv_addr": "namesrv", "namespace": "namespace"}
)


# What a client option means for the source where a consumer's words would mislead:
# (doc, default text) by ClientOptions name.
_SOURCE_NOTES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "instance_name": (
            "Starts the client id of each of the source's readers, "
            "<ip>@<instanceName>#<pid>#<nanos>[@unitName]: one client per reader.",
            "rmqk-spark",
        ),
        "hook_plugins": (
            "Comma-separated plugins (as `rmqk plugins` names them) whose filter hooks run "
            "on the source's pulls; empty for none. Unset, every plugin's.",
            "(every plugin)",
        ),
        "unit_mode": ("Unit mode, as the filter hooks' context says it.", "false"),
        "mq_client_api_timeout": (
            "Timeout of the source's route and offset requests; pulls take pullTimeoutMs.",
            "pullTimeoutMs",
        ),
    }
)


def source_client_specs() -> dict[str, OptionSpec]:
    """Every client option of every client kind (rmqk.ClientOptions, CLIENT_OPTIONS) under
    its Spark name, but those the source has its own option for: generated, so a client
    option added to the kernel is a Spark option too (or refused by the range reader,
    which says why)."""
    out = {}
    for spec in CLIENT_OPTIONS:
        if spec.name in SOURCE_OWN_CLIENT_OPTIONS:
            continue
        renamed = attrs.evolve(spec, name=spark_name(spec.name))
        if spec.name in _SOURCE_NOTES:
            doc, default = _SOURCE_NOTES[spec.name]
            renamed = attrs.evolve(renamed, doc=doc, default_text=default)
        out[renamed.name] = renamed
    return out
