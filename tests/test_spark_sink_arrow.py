"""The ``spark`` sink's Arrow writer: Spark's layout, renames, Spark's schema, and crashes.

The crash test (both writers) runs the consumer in subprocesses that it kills
with SIGKILL after an exactly-once flush is committed and after it is published
(both before the acknowledgement), finishes the job in this process and checks
that the output holds every message exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from spark_support import (  # the spark fixture
    check_exactly_once,
    consumer_toml,
    message,
    orders_topic,
    spark_session,  # noqa: F401
)

from rmqk.app.config import load_config
from rmqk.app.runtime import ComposedConsumer
from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.commitlog import CommitLog, control_dir
from rmqk.plugins.spark.options import parse_sink_options

pytestmark = pytest.mark.timeout(600)

BODY_SCHEMA = "order_id STRING, amount DOUBLE, items INT"
# Partition values Spark escapes in folder names, and the ones it sends to its default folder.
TAGS = ("paid", "a/b", "x=y:z", "with space", "grüße", "%", "", None)


def _tagged(queue_id: int, offset: int, tag: str | None) -> MessageExt:
    m = message(queue_id, offset, {"order_id": f"O-{offset}", "amount": offset / 4, "items": 3})
    props = dict(m.properties)
    props.pop("TAGS")
    if tag is not None:
        props["TAGS"] = tag
    props["origin"] = f"q{queue_id}"
    return MessageExt(
        topic=m.topic,
        body=m.body,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        born_timestamp=m.born_timestamp,
        store_timestamp=m.store_timestamp,
        store_host=m.store_host,
        properties=props,
    )


def _batches() -> list[tuple[MessageQueue, list[MessageExt]]]:
    return [
        (
            MessageQueue("Orders", "broker-a", q),
            [_tagged(q, q * 1000 + i, TAGS[(i + q) % len(TAGS)]) for i in range(40)],
        )
        for q in range(3)
    ]


async def _sink(options: dict[str, Any]) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    sink = SparkSink({"flush_seconds": 0.1, **options})
    await sink.start()
    await asyncio.gather(*(sink.write(q, msgs) for q, msgs in _batches()))
    await sink.close()


# -- without Spark ---------------------------------------------------------------------------


def test_writer_option_defaults_to_arrow_for_parquet_files_only() -> None:
    assert parse_sink_options({"path": "o"}).resolved_writer == "arrow"
    assert parse_sink_options({"path": "o", "writer": "spark"}).resolved_writer == "spark"
    assert parse_sink_options({"table": "t"}).resolved_writer == "spark"
    assert parse_sink_options({"path": "o", "format": "orc"}).resolved_writer == "spark"
    by_time = {"path": "o", "partition_by": "born_timestamp"}
    assert parse_sink_options(by_time).resolved_writer == "spark"
    json_int = {"path": "o", "body_format": "json", "body_schema": BODY_SCHEMA}
    assert parse_sink_options({**json_int, "partition_by": "items"}).resolved_writer == "arrow"
    assert parse_sink_options({**json_int, "partition_by": "amount"}).resolved_writer == "spark"
    for bad in ({"table": "t"}, {"path": "o", "format": "orc"}, {**by_time}):
        with pytest.raises(ConfigError, match="writer: arrow cannot write this output"):
            parse_sink_options({**bad, "writer": "arrow"})
    with pytest.raises(ConfigError, match="writer"):
        parse_sink_options({"path": "o", "writer": "pandas"})


def test_a_line_break_in_any_body_sends_the_flush_to_spark() -> None:
    # pyarrow reads one body per line: a body with a line break of its own (here JSON
    # whitespace pyarrow would skip, before or after the object) goes to Spark's from_json.
    import random

    from rmqk.plugins.spark.arrow_writer import decode_json_bodies, flat_json_schema
    from rmqk.plugins.spark.columns import messages_to_arrow

    schema = flat_json_schema(BODY_SCHEMA)
    assert schema is not None
    rng = random.Random(18)
    for _ in range(200):
        bodies = [
            f'{{"order_id": "O-{i}", "amount": {i / 4}, "items": {i % 7}}}'.encode()
            for i in range(rng.randrange(1, 40))
        ]
        broken = rng.random() < 0.5
        if broken:
            at = rng.randrange(len(bodies))
            brk = rng.choice([b"\n", b"\r", b"\r\n", b"\n\n"])
            bodies[at] = rng.choice([brk + bodies[at], bodies[at] + brk])
        msgs = [
            MessageExt(topic="Orders", body=b, queue_offset=i, store_host="127.0.0.1:10911")
            for i, b in enumerate(bodies)
        ]
        decoded = decode_json_bodies(messages_to_arrow([(None, msgs)]), schema)
        if broken:
            assert decoded is None, bodies
        else:
            assert decoded is not None
            assert decoded.column("order_id").to_pylist() == [f"O-{i}" for i in range(len(bodies))]


def test_partition_values_are_escaped_as_spark_escapes_them() -> None:
    from rmqk.plugins.spark.arrow_writer import escape_partition_value

    assert escape_partition_value("paid") == "paid"
    assert escape_partition_value("a/b=c:d") == "a%2Fb%3Dc%3Ad"
    assert escape_partition_value("with space grüße") == "with space grüße"
    assert escape_partition_value("%\\\x01") == "%25%5C%01"


@pytest.mark.parametrize("seed", range(4))
def test_partitions_group_rows_as_one_folder_per_row_would(seed: int) -> None:
    """Random keys (strings Spark escapes, "", nulls, ints, bools; one to three of them,
    in tables of several chunks): the writer's grouping against a per-row reference."""
    pa = pytest.importorskip("pyarrow")
    import random

    from rmqk.plugins.spark.arrow_writer import ArrowFileWriter, escape_partition_value

    def folder(value: object) -> str:
        if value is None or value == "":
            return "__HIVE_DEFAULT_PARTITION__"
        if isinstance(value, bool):
            return str(value).lower()
        return escape_partition_value(str(value))

    rng = random.Random(seed)
    for _ in range(50):
        n = rng.randrange(0, 80)
        tags = TAGS[: rng.randrange(1, len(TAGS) + 1)]
        columns = {
            "tags": pa.array([rng.choice(tags) for _ in range(n)], pa.string()),
            "keys": pa.array([rng.choice(["k", None, "", "k/2"]) for _ in range(n)], pa.string()),
            "queue_id": pa.array([rng.choice([0, 3, None]) for _ in range(n)], pa.int32()),
            "flag": pa.array([rng.choice([True, False, None]) for _ in range(n)], pa.bool_()),
            "row": pa.array(range(n), pa.int64()),
        }
        table = pa.table(columns)
        if n > 3 and rng.random() < 0.5:
            table = pa.concat_tables([table.slice(0, n // 3), table.slice(n // 3)])
        keys = tuple(rng.sample(["tags", "keys", "queue_id", "flag"], rng.randrange(1, 4)))
        expected: dict[str, list[int]] = {}
        for r in table.to_pylist():
            path = "/".join(f"{escape_partition_value(k)}={folder(r[k])}" for k in keys)
            expected.setdefault(path, []).append(r["row"])
        writer = ArrowFileWriter.__new__(ArrowFileWriter)
        # Only partition_by is read; "flag" is no message column, so no real options.
        writer.options = types.SimpleNamespace(partition_by=keys)  # type: ignore[assignment]
        got = writer._partitions(table)
        assert len(got) == len(expected)  # one file per folder
        assert {f.replace(os.sep, "/"): t.column("row").to_pylist() for f, t in got} == expected
        for _, part in got:
            assert not set(keys) & set(part.column_names)


async def test_one_file_per_flush_and_partition_renamed_into_place(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    await _sink({"path": str(out), "partition_by": ["queue_id", "tags"], "writer": "arrow"})
    folders = sorted(str(p.parent.relative_to(out)) for p in out.rglob("*.parquet"))
    expected = {
        f"queue_id={q}/tags={'__HIVE_DEFAULT_PARTITION__' if t in ('', None) else t}"
        for q in range(3)
        for t in TAGS
    }
    expected = {e.replace("a/b", "a%2Fb").replace("x=y:z", "x%3Dy%3Az").replace("=%", "=%25")
                for e in expected}  # fmt: skip
    assert set(folders) == expected
    assert len(folders) == len(set(folders))  # one file per partition for the one flush
    # Written under a hidden temporary name, then renamed: nothing hidden is left.
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]
    rows = sum(pq.read_metadata(p).num_rows for p in out.rglob("*.parquet"))
    assert rows == 120
    names = pq.read_schema(next(out.rglob("*.parquet"))).names
    assert "queue_id" not in names and "tags" not in names  # in the folder names only


async def test_a_failed_file_write_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from rmqk.plugins.spark.sink import SparkSink

    real = pq.write_table
    calls = {"n": 0}

    def second_fails(table: Any, where: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        real(table, where, **kwargs)
        if calls["n"] == 2:
            raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", second_fails)
    out = tmp_path / "out"
    sink = SparkSink({"path": str(out), "partition_by": "tags", "flush_seconds": 0.1})
    await sink.start()
    with pytest.raises(OSError, match="disk full"):
        await sink.write(*_batches()[0])
    await sink.close()
    assert sink.stats.failed_flushes == 1
    # The file whose write failed never got its name; nothing half-written is visible.
    assert len(list(out.rglob("*.parquet"))) == 1
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]


# -- read back with Spark ----------------------------------------------------------------------


def _spark_rows(spark: Any, path: Path) -> tuple[Any, list[tuple[Any, ...]]]:
    df = spark.read.parquet(str(path))
    # (queue_id, queue_offset) is unique: the order is the same for both outputs.
    rows = [
        tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in r)
        for r in df.orderBy("queue_id", "queue_offset").collect()
    ]
    return df.schema, rows


@pytest.mark.spark
@pytest.mark.parametrize(
    "options",
    [
        {"partition_by": "tags", "body_format": "json", "body_schema": BODY_SCHEMA},
        {"partition_by": ["queue_id", "tags"], "body_format": "text"},
        {"body_format": "binary"},
        {"partition_by": "items", "body_format": "json", "body_schema": BODY_SCHEMA},
        {"body_format": "json", "body_schema": "order_id STRING, amount DECIMAL(10,2)"},
    ],
    ids=["json-by-tags", "text-by-queue-and-tags", "binary", "json-by-int-field", "json-spark"],
)
@pytest.mark.parametrize("exactly_once", [False, True])
async def test_spark_reads_the_arrow_output_as_it_reads_its_own(
    spark: Any, tmp_path: Path, options: dict[str, Any], exactly_once: bool
) -> None:
    outputs = {}
    for writer in ("spark", "arrow"):
        outputs[writer] = tmp_path / writer
        await _sink(
            {
                "path": str(outputs[writer]),
                "writer": writer,
                "exactly_once": exactly_once,
                **options,
            }
        )
    spark_schema, spark_rows = _spark_rows(spark, outputs["spark"])
    arrow_schema, arrow_rows = _spark_rows(spark, outputs["arrow"])
    assert arrow_schema == spark_schema
    assert len(arrow_rows) == 120
    assert arrow_rows == spark_rows


_CRASH_CHILD = r"""
import asyncio, sys, time
from pathlib import Path

config, stage, nth, marker, total = sys.argv[1:6]

from rmqk.plugins.spark.sink import OutputWriter

if stage != "none":
    seen = {"n": 0}

    def pause_for_the_kill(self, step, entry):
        if step == stage:
            seen["n"] += 1
            if seen["n"] == int(nth):
                Path(marker).write_text(entry.flush_id)
                time.sleep(3600)  # the test kills this process (SIGKILL) here

    OutputWriter._stage_hook = pause_for_the_kill

from rmqk.app.config import load_config
from rmqk.plugins.sinks.commitlog import CommitLog, control_dir
from rmqk.app.runtime import ComposedConsumer


async def main():
    spec = load_config(config).consumers[0]
    composed = ComposedConsumer(spec)
    await composed.start()
    log = CommitLog(control_dir(spec.sink_options["path"]))
    committed = 0
    while committed < int(total):
        await asyncio.sleep(0.2)
        committed += sum(e.rows for e in log.read_new())
    await composed.stop()
    print("done", committed, flush=True)


asyncio.run(main())
"""


@pytest.mark.spark
@pytest.mark.parametrize("writer", ["spark", "arrow"])
async def test_kill_9_between_write_and_ack_leaves_each_message_once(
    spark: Any, broker: Any, tmp_path: Path, writer: str
) -> None:
    produced = await orders_topic(broker, 4000)
    out = tmp_path / "orders"
    config = consumer_toml(
        tmp_path / "c.toml",
        broker.namesrv_addr,
        "g-spark-crash",
        {
            "path": str(out),
            "exactly_once": True,
            "writer": writer,
            "flush_rows": 400,
            "flush_seconds": 0.3,
            "spark.driver.memory": "512m",
        },
        persist_consumer_offset_interval=1000,
    )
    script = tmp_path / "child.py"
    script.write_text(_CRASH_CHILD)
    marker = tmp_path / "paused"
    logs = tmp_path / "child.log"
    killed: list[str] = []
    # Killed after the commit-log line (before publishing), then after publishing
    # (before the acknowledgement); a crash before the commit-log line is the
    # reconcile test's. Then this process finishes the job.
    for stage in ("committed", "published"):
        with open(logs, "ab") as log_file:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(script),
                str(config),
                stage,
                "1",
                str(marker),
                str(produced.count),
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert proc.returncode is None, logs.read_text()[-3000:]
                assert time.monotonic() < deadline, "the child never reached " + stage
                await asyncio.sleep(0.1)
            killed.append(marker.read_text())
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            marker.unlink()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
    # The flush killed after publishing is in the output, but its messages were never
    # acknowledged: they come again and must be skipped.
    last_killed = next(e for e in CommitLog(control_dir(out)).read_new() if e.flush_id == killed[1])
    composed = ComposedConsumer(load_config(config).consumers[0])
    await composed.start()
    sink: Any = composed.sink
    try:
        log = CommitLog(control_dir(out))
        committed = 0
        deadline = time.monotonic() + 300
        while committed < produced.count:
            assert time.monotonic() < deadline, f"only {committed} rows committed"
            await asyncio.sleep(0.2)
            committed += sum(e.rows for e in log.read_new())
    finally:
        await composed.stop()
    assert sink.stats.rows_skipped >= last_killed.rows > 0

    entries = CommitLog(control_dir(out)).read_new()
    committed_ids = {e.flush_id for e in entries}
    assert set(killed) <= committed_ids
    assert sum(e.rows for e in entries) == produced.count
    assert not any((control_dir(out) / "staging").glob("*/*"))
    check_exactly_once(spark, out, produced.msg_ids)
