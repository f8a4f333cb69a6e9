"""The ``spark`` sink: options, the exactly-once commit log, and Parquet end to end.

Tests marked ``spark`` share one SparkSession per module (starting one takes
seconds). The crash test runs the consumer in subprocesses that it kills with
SIGKILL after an exactly-once flush is committed and after it is published
(both before the acknowledgement), finishes the job in this process and checks
that the output holds every message exactly once.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from rmqk.plugins.sinks.commitlog import (
    CommitEntry,
    CommitLog,
    StagingArea,
    control_dir,
    data_files,
)
from rmqk.plugins.sinks.offsetranges import OffsetIndex, OffsetRange, ranges_of
from rmqk.plugins.spark.options import parse_sink_options

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.timeout(600)

BODY_SCHEMA = (
    "order_id STRING, customer_id STRING, event STRING, amount DOUBLE, currency STRING, "
    "items INT, ts BIGINT"
)


# -- options (no Spark) ---------------------------------------------------------------------


def test_options_defaults_and_spark_settings() -> None:
    opts = parse_sink_options(
        {
            "path": "out/x",
            "spark": {"driver": {"memory": "1g"}, "sql": {"shuffle": {"partitions": 4}}},
            "spark.ui.enabled": True,
        }
    )
    assert opts.path == "out/x"
    assert opts.format == "parquet"
    assert opts.master == "local[2]"
    assert opts.body_format == "binary"
    assert not opts.exactly_once
    assert dict(opts.spark_conf) == {
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "true",
    }


def test_options_report_every_problem_with_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_sink_options(
            {
                "pth": "x",
                "flush_rows": "many",
                "flush_seconds": 0,
                "exactly_once": "yes",
                "body_format": "json",
                "partition_by": ["nope"],
                "format": "csv",
                "spark.executor.cores": [1],
            }
        )
    problems = {p.key: p.message for p in info.value.problems}
    assert "did you mean 'path'" in problems["pth"]
    assert "must be an integer" in problems["flush_rows"]
    assert "greater than 0" in problems["flush_seconds"]
    assert "true or false" in problems["exactly_once"]
    assert "required with body_format = 'json'" in problems["body_schema"]
    assert "no column 'nope'" in problems["partition_by"]
    assert "parquet, orc" in problems["format"]
    assert "string, number or boolean" in problems["spark.executor.cores"]
    assert "required" in problems["path"]
    text = str(info.value)
    assert "[spark] pth" in text


def test_options_json_fields_become_partition_columns_and_must_not_clash() -> None:
    opts = parse_sink_options(
        {
            "path": "o",
            "body_format": "json",
            "body_schema": "order_id STRING, amount DECIMAL(10, 2), tags_x MAP<STRING, INT>",
            "partition_by": ["order_id", "queue_id"],
        }
    )
    assert opts.partition_by == ("order_id", "queue_id")
    with pytest.raises(ConfigError, match="clashes with the message column"):
        parse_sink_options({"path": "o", "body_format": "json", "body_schema": "tags STRING"})
    with pytest.raises(ConfigError, match="needs path"):
        parse_sink_options({"table": "t", "exactly_once": True})


def test_demo_example_sink_options_are_valid() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    doc = tomllib.loads((root / "examples" / "demo.toml").read_text())
    opts = parse_sink_options(doc["consumers"]["orders"]["sink_options"])
    assert opts.exactly_once and opts.body_format == "json" and opts.partition_by == ("tags",)


# -- the commit log and staging (no Spark) ----------------------------------------------------


def test_offset_index_merges_and_answers_coverage() -> None:
    index = OffsetIndex()
    for first, last in [(10, 19), (30, 39), (20, 25), (50, 50), (26, 29)]:
        index.add(OffsetRange("T", "b", 0, first, last))
    assert index.intervals("T", "b", 0) == [(10, 39), (50, 50)]
    assert index.covers("T", "b", 0, 10) and index.covers("T", "b", 0, 39)
    assert not index.covers("T", "b", 0, 9) and not index.covers("T", "b", 0, 40)
    assert index.covers("T", "b", 0, 50) and not index.covers("T", "b", 1, 50)
    assert index.overlaps("T", "b", 0, 0, 10) and index.overlaps("T", "b", 0, 45, 60)
    assert not index.overlaps("T", "b", 0, 40, 49)


def test_ranges_of_merges_touching_batches_only() -> None:
    ranges = ranges_of([("T", "b", 1, 0, 31), ("T", "b", 1, 32, 63), ("T", "b", 1, 70, 80)])
    assert [(r.first, r.last) for r in ranges] == [(0, 63), (70, 80)]


def _entry(owner: str, seq: int, files: tuple[str, ...], first: int, last: int) -> CommitEntry:
    return CommitEntry(
        flush_id=f"{owner}-{seq}",
        owner=owner,
        seq=seq,
        rows=last - first + 1,
        files=files,
        ranges=(OffsetRange("T", "b", 0, first, last),),
    )


def test_commit_log_ignores_torn_and_damaged_lines(tmp_path: Path) -> None:
    log = CommitLog(tmp_path / "_rmqk")
    log.ensure()
    log.append(_entry("a", 1, ("f1",), 0, 9))
    with open(log.path, "ab") as f:
        f.write(b'\n1234abcd {"v":1,"flush":"torn"')  # a crash in the middle of a line
    log.append(_entry("a", 2, ("f2",), 10, 19))
    with open(log.path, "ab") as f:
        f.write(b"\n00000000 {}\n")  # checksum does not match
    entries = CommitLog(log.directory).read_new()
    assert [e.flush_id for e in entries] == ["a-1", "a-2"]
    assert entries[1].ranges == (OffsetRange("T", "b", 0, 10, 19),)
    # Incremental reads see only what was appended since.
    tail = CommitLog(log.directory)
    assert len(tail.read_new()) == 2
    log.append(_entry("a", 3, (), 20, 29))
    assert [e.flush_id for e in tail.read_new()] == ["a-3"]
    assert tail.read_new() == []


def _stage(area: StagingArea, seq: int, names: list[str]) -> tuple[str, ...]:
    target = area.flush_dir(seq)
    for name in names:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    (target / "_SUCCESS").write_text("")
    (target / ".part.crc").write_text("")
    return tuple(data_files(target))


def test_reconcile_publishes_committed_and_discards_uncommitted_flushes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dead = StagingArea(out, "dead")
    dead.acquire()
    # Crash after the commit-log line, before publishing: must be published.
    files1 = _stage(dead, 1, ["tags=a/part-1.parquet", "tags=b/part-1.parquet"])
    dead.log.append(_entry("dead", 1, files1, 0, 9))
    # Crash half-way through publishing: the rest must be published.
    files2 = _stage(dead, 2, ["part-2a.parquet", "part-2b.parquet"])
    dead.log.append(_entry("dead", 2, files2, 10, 19))
    (out / "part-2a.parquet").parent.mkdir(parents=True, exist_ok=True)
    os.replace(dead.flush_dir(2) / "part-2a.parquet", out / "part-2a.parquet")
    # Crash after staging, before the commit-log line: must be discarded.
    _stage(dead, 3, ["part-3.parquet"])
    # A live writer's staging must be left alone.
    live = StagingArea(out, "live")
    live.acquire()
    _stage(live, 1, ["part-live.parquet"])
    os.close(dead._lock_fd)  # type: ignore[arg-type]  # the process died: its lock is gone
    dead._lock_fd = None

    report = StagingArea(out, "new").reconcile()
    assert sorted(report.published) == ["dead-1", "dead-2"]
    assert report.discarded == ("dead-3",)
    assert data_files(out) == [
        "part-2a.parquet",
        "part-2b.parquet",
        "tags=a/part-1.parquet",
        "tags=b/part-1.parquet",
    ]
    assert not (control_dir(out) / "staging" / "dead").exists()
    assert (live.flush_dir(1) / "part-live.parquet").exists()
    # Publishing is idempotent.
    dead.publish(_entry("dead", 1, files1, 0, 9))
    live.release()


def test_publish_of_a_committed_flush_with_lost_files_is_an_error(tmp_path: Path) -> None:
    area = StagingArea(tmp_path / "out", "w")
    area.acquire()
    with pytest.raises(Exception, match="neither"):
        area.publish(_entry("w", 7, ("part-x.parquet",), 0, 0))
    area.release()


def test_json_fast_path_parses_flat_bodies_and_leaves_the_rest_to_spark() -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql.types import (
        DoubleType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from rmqk.plugins.spark.columns import messages_to_arrow
    from rmqk.plugins.spark.frames import _decode_json_bodies, _fast_json_schema

    flat = StructType([StructField("order_id", StringType()), StructField("amount", DoubleType())])
    assert _fast_json_schema(StructType([StructField("t", TimestampType())])) is None
    arrow_schema = _fast_json_schema(flat)

    def batch(*bodies: bytes) -> Any:
        return messages_to_arrow([(None, [_raw(i, b) for i, b in enumerate(bodies)])])

    table = _decode_json_bodies(batch(b'{"order_id": "a", "amount": 1}', b"{}"), arrow_schema)
    assert table is not None
    assert table.column_names[-2:] == ["order_id", "amount"] and "body" not in table.column_names
    assert table.column("amount").to_pylist() == [1.0, None]
    for bad in (b"not json", b'{"order_id":\n "x"}', b"[1, 2]", b'{"amount": "x"}', b""):
        assert _decode_json_bodies(batch(b'{"order_id": "a"}', bad), arrow_schema) is None, bad


# -- with Spark ------------------------------------------------------------------------------


@pytest.mark.spark
async def test_group_commit_flushes_by_rows_and_writes_columns(spark: Any, tmp_path: Path) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    out = tmp_path / "rows"
    sink = SparkSink(
        {
            "path": str(out),
            "flush_rows": 200,
            "flush_seconds": 60.0,  # only the row count can trigger these flushes
            "body_format": "json",
            "body_schema": "order_id STRING, amount DOUBLE",
        }
    )
    await sink.start()
    queues = [MessageQueue("Orders", "broker-a", q) for q in range(4)]

    def batch(i: int) -> Any:
        return sink.write(
            queues[i % 4],
            [
                message(i % 4, (i // 4) * 10 + k, {"order_id": f"O-{i}-{k}", "amount": k * 1.5})
                for k in range(10)
            ],
        )

    # 150 rows wait: below flush_rows, and the timer is far away.
    below = [asyncio.ensure_future(batch(i)) for i in range(15)]
    await asyncio.sleep(2.0)
    assert not any(w.done() for w in below)
    assert sink.stats.flushes == 0
    # Five more batches pass the threshold: one flush covers all twenty.
    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*below, *[batch(i) for i in range(15, 20)]), 300)
    assert time.monotonic() - started < 50, "the row threshold, not the timer, flushed"
    assert (sink.stats.flushes, sink.stats.rows_written, sink.stats.batches) == (1, 200, 20)
    # Concurrent writes beyond the threshold share the next flush.
    await asyncio.wait_for(asyncio.gather(*[batch(i) for i in range(20, 40)]), 300)
    assert (sink.stats.flushes, sink.stats.rows_written, sink.stats.batches) == (2, 400, 40)
    await sink.close()

    df = spark.read.parquet(str(out))
    assert df.columns == [
        "topic",
        "broker",
        "queue_id",
        "queue_offset",
        "msg_id",
        "keys",
        "tags",
        "properties",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "order_id",
        "amount",
        "_corrupt_record",  # null: every body parsed
    ]
    assert df.where("_corrupt_record IS NOT NULL").count() == 0
    row = df.where("msg_id = 'ID-1-12'").collect()[0]
    assert (row.topic, row.broker, row.queue_id, row.queue_offset) == ("Orders", "broker-a", 1, 12)
    assert (row.keys, row.tags, row.order_id, row.amount) == ("O-12", "paid", "O-5-2", 3.0)
    assert row.properties == {}
    assert row.store_timestamp.timestamp() == pytest.approx(1_700_000_000.512)
    assert df.select("msg_id").distinct().count() == 400


def _raw(offset: int, body: bytes) -> MessageExt:
    m = message(0, offset, {})
    m.body = body
    return m


@pytest.mark.spark
async def test_body_decoders(spark: Any, tmp_path: Path) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    q = MessageQueue("Orders", "broker-a", 0)
    schema = "order_id STRING, amount DOUBLE"
    cases = {
        # pyarrow parses these (the fast path)
        "fast": [b'{"order_id": "a", "amount": 1.5}', b'{"amount": 2, "extra": [1]}'],
        # a line break and a broken body send the flush to Spark's from_json
        "spark": [b'{"order_id": "b",\n "amount": 3.0}', b"not json", b'{"order_id": "c"}'],
    }
    for name, bodies in cases.items():
        out = tmp_path / name
        sink = SparkSink(
            {"path": str(out), "body_format": "json", "body_schema": schema, "flush_seconds": 0.1}
        )
        await sink.start()
        await sink.write(q, [_raw(i, b) for i, b in enumerate(bodies)])
        await sink.close()
        rows = {
            r.queue_offset: (r.order_id, r.amount)
            for r in spark.read.parquet(str(out))
            .select("queue_offset", "order_id", "amount")
            .collect()
        }
        if name == "fast":
            assert rows == {0: ("a", 1.5), 1: (None, 2.0)}
        else:
            assert rows == {0: ("b", 3.0), 1: (None, None), 2: ("c", None)}
    out = tmp_path / "text"
    sink = SparkSink({"path": str(out), "body_format": "text", "flush_seconds": 0.1})
    await sink.start()
    await sink.write(q, [_raw(0, "grüße".encode()), _raw(1, b"plain")])
    await sink.close()
    df = spark.read.parquet(str(out))
    assert dict(df.dtypes)["body"] == "string"
    assert sorted(r.body for r in df.collect()) == ["grüße", "plain"]


@pytest.mark.spark
async def test_a_failed_write_fails_every_batch_of_the_flush(spark: Any, tmp_path: Path) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the output directory should be")
    sink = SparkSink({"path": str(blocker), "flush_seconds": 0.2})
    await sink.start()
    q = MessageQueue("Orders", "broker-a", 0)
    submitted = sink.submit(q, [message(0, 2, {})])
    assert not submitted.done()
    results = await asyncio.gather(
        sink.write(q, [message(0, 0, {})]),
        sink.write(q, [message(0, 1, {})]),
        submitted,
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results), results
    assert sink.stats.failed_flushes == 1 and sink.stats.rows_written == 0
    await sink.close()


@pytest.mark.spark
async def test_submit_returns_the_future_of_the_flush_that_covers_it(
    spark: Any, tmp_path: Path
) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    out = tmp_path / "submitted"
    sink = SparkSink({"path": str(out), "flush_rows": 100, "flush_seconds": 60.0})
    assert sink.window_rows == 200  # one flush written while the next fills
    await sink.start()
    q = MessageQueue("Orders", "broker-a", 0)

    def batch(first: int, n: int) -> list[MessageExt]:
        return [message(0, first + k, {}) for k in range(n)]

    first = sink.submit(q, batch(0, 60))
    assert isinstance(first, asyncio.Future)
    await asyncio.sleep(1.0)
    assert not first.done() and sink.stats.flushes == 0  # below flush_rows, timer far off
    second = sink.submit(q, batch(60, 60))
    third = sink.submit(q, batch(120, 60))
    # The flush takes batches up to flush_rows: the first two; the third waits.
    await asyncio.wait_for(asyncio.gather(first, second), 300)
    assert (sink.stats.flushes, sink.stats.rows_written, sink.stats.batches) == (1, 120, 2)
    await asyncio.sleep(0.5)
    assert not third.done()
    # A cancelled batch that no flush has taken is not written.
    withdrawn = sink.submit(q, batch(1000, 5))
    withdrawn.cancel()
    await asyncio.sleep(0)
    fourth = sink.submit(q, batch(180, 40))
    await asyncio.wait_for(asyncio.gather(third, fourth), 300)
    assert (sink.stats.flushes, sink.stats.rows_written, sink.stats.batches) == (2, 220, 4)
    assert sink.submit(q, []).done()
    await sink.close()
    offsets = [r.queue_offset for r in spark.read.parquet(str(out)).collect()]
    assert sorted(offsets) == list(range(220))


@pytest.mark.spark
@pytest.mark.parametrize("exactly_once", [False, True])
async def test_table_output(spark: Any, tmp_path: Path, exactly_once: bool) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    table = f"orders_{'eo' if exactly_once else 'alo'}"
    options: dict[str, Any] = {
        "table": table,
        "partition_by": "queue_id",
        "flush_seconds": 0.2,
        "exactly_once": exactly_once,
    }
    if exactly_once:
        options["path"] = str(tmp_path / table)  # an external table over the path
    q0, q1 = (MessageQueue("Orders", "broker-a", q) for q in (0, 1))
    for round_ in range(2):
        sink = SparkSink(options)
        await sink.start()
        await asyncio.gather(
            sink.write(q0, [message(0, round_ * 10 + k, {}) for k in range(10)]),
            sink.write(q1, [message(1, round_ * 10 + k, {}) for k in range(5)]),
        )
        await sink.close()
    rows = spark.table(table).select("queue_id", "queue_offset").collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == sorted(
        [(0, o) for o in range(20)] + [(1, o) for r in range(2) for o in range(r * 10, r * 10 + 5)]
    )


@pytest.mark.spark
def test_table_flushes_after_the_first_insert_by_the_tables_column_order(spark: Any) -> None:
    from rmqk.plugins.spark.columns import messages_to_arrow
    from rmqk.plugins.spark.frames import FrameWriter

    table = "inserted_orders"
    options = parse_sink_options({"table": table, "partition_by": "queue_id"})
    queues = [MessageQueue("Orders", "broker-a", k) for k in range(3)]

    def flush(first: int, count: int) -> Any:
        offsets = range(first, first + count)
        return messages_to_arrow(
            [
                (q, [message(q.queue_id, o, {}) for o in offsets if o % 3 == q.queue_id])
                for q in queues
            ]
        )

    def rows() -> list[tuple[int, int, str]]:
        got = spark.table(table).select("queue_id", "queue_offset", "keys").collect()
        return sorted((r.queue_id, r.queue_offset, r["keys"]) for r in got)

    def expected(offsets: range) -> list[tuple[int, int, str]]:
        return sorted((o % 3, o, f"O-{o}") for o in offsets)

    writer = FrameWriter(options, spark)
    inserted: list[bool] = []
    insert = writer._insert

    def spy(df: Any) -> bool:
        inserted.append(insert(df))
        return inserted[-1]

    writer._insert = spy  # type: ignore[method-assign]
    writer.write(flush(0, 30))  # saveAsTable creates the table, partitioned by queue_id
    columns = writer._table_columns
    # The partition column comes last in the table: a frame written by position unchanged
    # would put its values in the wrong columns.
    assert columns is not None and columns[-1] == "queue_id"
    assert sorted(columns) == sorted(flush(0, 1).schema.names) != columns
    writer.write(flush(30, 30))
    writer.write(flush(60, 30))
    assert rows() == expected(range(90))
    assert inserted == [True, True]
    # Dropped meanwhile: the insert is refused before writing anything, saveAsTable makes
    # the table again with this flush.
    spark.sql(f"DROP TABLE {table}")
    writer.write(flush(90, 10))
    assert rows() == expected(range(90, 100))
    assert inserted == [True, True, False] and writer._table_columns == columns


@pytest.mark.spark
async def test_consumer_to_parquet_end_to_end(spark: Any, broker: Any, tmp_path: Path) -> None:
    produced = await orders_topic(broker, 6000)
    out = tmp_path / "orders"
    config = consumer_toml(
        tmp_path / "c.toml",
        broker.namesrv_addr,
        "g-spark-e2e",
        {
            "path": str(out),
            "partition_by": "tags",
            "body_format": "json",
            "body_schema": BODY_SCHEMA,
            "flush_rows": 2500,
            "flush_seconds": 0.5,
        },
        await_termination_millis_when_shutdown=5000,
    )
    composed = ComposedConsumer(load_config(config).consumers[0])
    await composed.start()
    sink: Any = composed.sink
    try:
        deadline = time.monotonic() + 300
        while sink.stats.rows_written < produced.count:
            assert time.monotonic() < deadline, f"only {sink.stats.rows_written} rows written"
            await asyncio.sleep(0.1)
    finally:
        await composed.stop()
    assert sink.stats.batches > sink.stats.flushes  # group commits
    check_exactly_once(spark, out, produced.msg_ids)
    df = spark.read.parquet(str(out))
    per_tag = {r.tags: r["count"] for r in df.groupBy("tags").count().collect()}
    assert per_tag == dict(produced.per_tag)
    assert df.where("event != tags").count() == 0  # JSON columns line up with their rows
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("tags=")) == [
        "tags=cancelled",
        "tags=created",
        "tags=paid",
        "tags=shipped",
    ]
