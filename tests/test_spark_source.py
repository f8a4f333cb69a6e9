"""The ``rocketmq`` Spark source: offsets, planning and reading against the embedded broker,
then Structured Streaming into Parquet across restarts and a kill -9 mid-batch.

Tests marked ``spark`` share one SparkSession per module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rmqk.model.errors import ConfigError
from rmqk.plugins.spark.offsets import (
    QueueKey,
    cap_offsets,
    offset_key,
    parse_offset_key,
    parse_offset_spec,
)

if TYPE_CHECKING:
    from rmqk.plugins.spark.source import SourceOptions

pytestmark = pytest.mark.timeout(600)

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: F401
except ImportError:  # PySpark 4.0 / 4.1
    _ADMISSION_CONTROL = False
else:
    _ADMISSION_CONTROL = True


# -- offsets (pure) -----------------------------------------------------------------------


def test_offset_keys_round_trip() -> None:
    key = offset_key("Orders", "broker-a", 3)
    assert key == "Orders@broker-a@3"
    assert parse_offset_key(key) == QueueKey("Orders", "broker-a", 3)
    assert parse_offset_key("T@broker@with@at@12") == QueueKey("T", "broker@with@at", 12)
    for bad in ("Orders", "Orders@b", "Orders@b@x", "@b@1"):
        with pytest.raises(ValueError):
            parse_offset_key(bad)


def test_offset_specs() -> None:
    assert parse_offset_spec(None, "startingOffsets", "latest").kind == "latest"
    assert parse_offset_spec("EARLIEST", "startingOffsets", "latest").kind == "earliest"
    spec = parse_offset_spec("1700000000000", "startingOffsets", "latest")
    assert (spec.kind, spec.timestamp_ms) == ("timestamp", 1_700_000_000_000)
    iso = parse_offset_spec("2023-11-14T22:13:20Z", "startingOffsets", "latest")
    assert iso.timestamp_ms == 1_700_000_000_000
    flat = parse_offset_spec('{"Orders@broker-a@0": 5, "Orders@broker-a@1": -2}', "s", "latest")
    nested = parse_offset_spec('{"Orders": {"broker-a": {"0": 5, "1": -2}}}', "s", "latest")
    assert (
        dict(flat.specific)
        == dict(nested.specific)
        == {
            QueueKey("Orders", "broker-a", 0): 5,
            QueueKey("Orders", "broker-a", 1): -2,
        }
    )
    for bad in ("yesterday", '{"Orders@b@0": "x"}', '{"Orders@b@0": -3}', "[1]", "{bad json"):
        with pytest.raises(ConfigError) as info:
            parse_offset_spec(bad, "startingOffsets", "latest")
        assert info.value.problems[0].key == "startingOffsets"


def test_cap_offsets_shares_the_budget_fairly() -> None:
    start = {"a": 0, "b": 0, "c": 0}
    end = {"a": 100, "b": 5, "c": 100, "new": 7}
    capped = cap_offsets(start, end, 30)
    assert capped == {"a": 13, "b": 5, "c": 12, "new": 7}
    assert cap_offsets(start, end, 1000) == end
    # Never behind the start, even if a queue's end went backwards.
    assert cap_offsets({"a": 50}, {"a": 10}, 5) == {"a": 50}
    # Every queue with a backlog moves when the budget allows it.
    many = {f"q{i}": 0 for i in range(10)}
    assert all(v == 1 for v in cap_offsets(many, {k: 9 for k in many}, 10).values())


def test_source_options_are_validated() -> None:
    from rmqk.plugins.spark.source import SourceOptions

    opts = SourceOptions.parse(
        {"nameserver": "h:1;h:2", "topic": "A, B", "maxmessagespertrigger": "10"}, streaming=True
    )
    assert opts.namesrv == ("h:1", "h:2") and opts.topics == ("A", "B")
    assert opts.starting.kind == "latest" and opts.max_messages_per_trigger == 10
    assert SourceOptions.parse({"namesrv": "h:1", "topics": "A"}, False).starting.kind == "earliest"
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse(
            {
                "topics": "bad topic",
                "maxMessagesPerTrigger": "0",
                "endingOffsets": "latest",
                "failOnDataLoss": "maybe",
                "colour": "blue",
            },
            streaming=True,
        )
    keys = {p.key for p in info.value.problems}
    assert keys == {
        "namesrv",
        "topics",
        "maxMessagesPerTrigger",
        "endingOffsets",
        "failOnDataLoss",
        "colour",
    }


# -- the reader against the embedded broker (no Spark session) -----------------------------


def _produce(handle: Any, count: int, topic: str = "Orders") -> Any:
    from rmqk.plugins.spark.demo import produce_orders

    return asyncio.run(produce_orders(handle.namesrv_addr, count, topic=topic))


def _orders_options(handle: Any, *, streaming: bool, **options: str) -> SourceOptions:
    """Source options reading topic Orders from ``handle``'s name server, plus ``options``."""
    from rmqk.plugins.spark.source import SourceOptions

    return SourceOptions.parse(
        {"namesrv": handle.namesrv_addr, "topics": "Orders", **options}, streaming=streaming
    )


def test_stream_reader_plans_limits_and_reads_without_spark(broker_thread: Any) -> None:
    from rmqk.plugins.spark.source import RocketMQStreamReader

    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=4))
    produced = _produce(broker_thread, 1000)
    opts = _orders_options(
        broker_thread, streaming=True, startingOffsets="earliest", maxMessagesPerTrigger="100"
    )
    reader = RocketMQStreamReader(opts)
    try:
        start = reader.initialOffset()
        assert start == {f"Orders@broker-a@{q}": 0 for q in range(4)}
        # PySpark 4.0/4.1: no arguments; the limit counts from the previous end.
        end = reader.latestOffset()
        assert end == {f"Orders@broker-a@{q}": 25 for q in range(4)}
        legacy = reader.latestOffset()
        assert sum(legacy.values()) == 200
        latest = reader.reportLatestOffset()
        assert latest is not None and sum(latest.values()) == 1000
        parts = reader.partitions(end, legacy)
        assert [(p.queue_id, p.start, p.end) for p in parts] == [(q, 25, 50) for q in range(4)]
        batches = [b for p in parts for b in reader.read(p)]
        rows = [r for b in batches for r in b.to_pylist()]
        assert len(rows) == 100
        assert {(r["queue_id"], r["queue_offset"]) for r in rows} == {
            (q, o) for q in range(4) for o in range(25, 50)
        }
        assert set(r["msg_id"] for r in rows) <= set(produced.msg_ids)
        assert all(r["tags"] == json.loads(r["body"])["event"] for r in rows)
        assert reader.partitions(legacy, legacy) == []
        # The reader pickles (Spark ships it to other processes) without its connections.
        import pickle

        clone = pickle.loads(pickle.dumps(reader))
        assert clone.driver._runner is None
        assert sum(clone.latestOffset().values()) == 300
        clone.stop()
    finally:
        reader.stop()


def test_admission_control_on_pyspark_4_2(broker_thread: Any) -> None:
    limits = pytest.importorskip("pyspark.sql.streaming.datasource")
    from rmqk.plugins.spark.source import RocketMQStreamReader

    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=4))
    _produce(broker_thread, 1000)
    reader = RocketMQStreamReader(
        _orders_options(
            broker_thread, streaming=True, startingOffsets="earliest", maxMessagesPerTrigger="100"
        )
    )
    try:
        start = reader.initialOffset()
        assert isinstance(reader.getDefaultReadLimit(), limits.ReadMaxRows)
        end = reader.latestOffset(start, limits.ReadMaxRows(60))
        assert end == {f"Orders@broker-a@{q}": 15 for q in range(4)}
        everything = reader.latestOffset(start, limits.ReadAllAvailable())
        assert sum(everything.values()) == 1000 and everything == reader.reportLatestOffset()
        # Trigger.AvailableNow: the target is fixed when the query asks for it.
        reader.prepareForTriggerAvailableNow()
        _produce(broker_thread, 100)
        assert reader.latestOffset(end, limits.ReadAllAvailable()) == everything
    finally:
        reader.stop()


def test_tag_filter_and_timestamp_start(broker_thread: Any) -> None:
    from rmqk.plugins.spark.source import RocketMQBatchReader

    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=2))
    produced = _produce(broker_thread, 600)
    opts = _orders_options(broker_thread, streaming=False, subExpression="paid || cancelled")
    reader = RocketMQBatchReader(opts)
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    expected = dict(produced.per_tag)
    assert len(rows) == expected["paid"] + expected["cancelled"]
    assert {r["tags"] for r in rows} == {"paid", "cancelled"}
    future = str(int(time.time() * 1000) + 3_600_000)
    late = RocketMQBatchReader(
        _orders_options(broker_thread, streaming=False, startingOffsets=future)
    )
    assert late.partitions() == []


# -- with Spark -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from rmqk.plugins.spark.session import get_session, stop_session

    session = get_session(conf={"spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    stop_session()


@pytest.mark.spark
def test_batch_read_returns_the_requested_offset_range(spark: Any, broker_thread: Any) -> None:
    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=4))
    _produce(broker_thread, 800)
    df = (
        spark.read.format("rocketmq")
        .option("namesrv", broker_thread.namesrv_addr)
        .option("topics", "Orders")
        .option("startingOffsets", json.dumps({"Orders": {"broker-a": {"0": 10, "1": 0}}}))
        .option("endingOffsets", json.dumps({"Orders@broker-a@0": 50, "Orders@broker-a@2": 7}))
        .load()
    )
    rows = df.select("queue_id", "queue_offset").collect()
    # Queue 0: 10..49; queue 1: 0 to its end; queue 2: earliest..6; queue 3: all of it.
    by_queue: dict[int, list[int]] = {}
    for r in rows:
        by_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    assert sorted(by_queue[0]) == list(range(10, 50))
    assert sorted(by_queue[2]) == list(range(7))
    sizes = {q: len(v) for q, v in by_queue.items()}
    assert sum(sizes.values()) == 40 + 7 + sizes[1] + sizes[3]
    assert sorted(by_queue[1]) == list(range(sizes[1])) and sizes[1] > 100
    assert df.schema.simpleString().startswith("struct<topic:string,broker:string,queue_id:int")


async def _send_numbered(namesrv: str, first: int, count: int) -> None:
    """Orders ``first`` .. ``first + count - 1``, each with a property ``n``, over two queues."""
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    async with AsyncProducer("numbered-producer", namesrv_addr=namesrv) as producer:
        queues = await producer.queues_for("Orders")
        for n in range(first, first + count):
            msg = Message("Orders", f"{n}".encode(), tags="t", properties={"n": str(n)})
            await producer.send(msg, queue=queues[n % 2])


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


@pytest.mark.spark
def test_batch_read_by_sql92_min_partitions_and_store_time(
    spark: Any, broker_thread_factory: Any
) -> None:
    """Issue 27 item 7 through Spark, and docs/spark.md's store-time example as written."""
    import re

    handle = broker_thread_factory(enable_property_filter=True)
    handle.call(handle.broker.create_topic("Orders", queues=2))
    stamps = []
    for first in (0, 30, 60):
        stamps.append(int(time.time() * 1000))
        time.sleep(0.05)
        asyncio.run(_send_numbered(handle.namesrv_addr, first, 30))
        time.sleep(0.05)
    base = spark.read.format("rocketmq").option("namesrv", handle.namesrv_addr)
    sql = (
        base.option("topics", "Orders")
        .option("expressionType", "SQL92")
        .option("subExpression", "n BETWEEN 10 AND 49")
        .option("minPartitions", "5")
        .load()
    )
    assert sql.rdd.getNumPartitions() == 5
    assert sorted(int(r.body) for r in sql.select("body").collect()) == list(range(10, 50))
    # The page's example, its two dates replaced by the times around the second send.
    page = (Path(__file__).resolve().parent.parent / "docs" / "spark.md").read_text()
    (code,) = [
        b for b in re.findall(r"^```python\n(.*?)^```", page, re.M | re.S) if "yesterday" in b
    ]
    code = code.replace("127.0.0.1:9876", handle.namesrv_addr)
    code = code.replace("2024-05-01T00:00:00Z", _iso(stamps[1])).replace(
        "2024-05-02T00:00:00Z", _iso(stamps[2])
    )
    scope: dict[str, Any] = {"spark": spark}
    exec(code, scope)
    got = sorted(int(r.body) for r in scope["yesterday"].select("body").collect())
    assert got == list(range(30, 60))


def _stream(spark: Any, namesrv: str, out: Path, checkpoint: Path, per_trigger: int) -> Any:
    """An availableNow query; before PySpark 4.2 a limit would make it one batch, so none."""
    reader = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topics", "Orders")
        .option("startingOffsets", "earliest")
    )
    if _ADMISSION_CONTROL:
        reader = reader.option("maxMessagesPerTrigger", per_trigger)
    return (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )


def _assert_exactly_once(spark: Any, out: Path, msg_ids: set[str]) -> None:
    rows = spark.read.parquet(str(out)).select("msg_id", "queue_id", "queue_offset").collect()
    ids = [r.msg_id for r in rows]
    assert len(ids) == len(msg_ids), f"{len(ids)} rows for {len(msg_ids)} messages"
    assert set(ids) == msg_ids
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(msg_ids)


@pytest.mark.spark
def test_stream_to_parquet_across_restarts(spark: Any, broker_thread: Any, tmp_path: Path) -> None:
    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=4))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sent: set[str] = set()
    for run, count in enumerate((700, 500, 300)):
        sent |= set(_produce(broker_thread, count).msg_ids)
        query = _stream(spark, broker_thread.namesrv_addr, out, checkpoint, 300)
        query = query.trigger(availableNow=True).start()
        assert query.awaitTermination(240), "the availableNow query did not finish"
        assert query.exception() is None
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        if _ADMISSION_CONTROL:  # PySpark 4.2+; before, availableNow reads all in one batch
            assert batches and max(batches) <= 300, batches  # maxMessagesPerTrigger holds
        assert sum(batches) == count, (run, batches)
        _assert_exactly_once(spark, out, sent)


_STREAM_CHILD = r"""
import sys, time
from pathlib import Path

namesrv, out, checkpoint, marker = sys.argv[1:5]

from rmqk.plugins.spark.session import get_session
from rmqk.plugins.spark.source import RocketMQDataSource, RocketMQStreamReader


class PausingReader(RocketMQStreamReader):
    def read(self, partition):
        # The second micro-batch stops half-way through its first queue's rows.
        if partition.start >= 100:
            rows = 0
            for batch in super().read(partition):
                rows += batch.num_rows
                yield batch
                if rows >= 50:
                    Path(marker).write_text(repr(partition))
                    time.sleep(3600)  # the test kills this process (SIGKILL) here
        else:
            yield from super().read(partition)


class PausingSource(RocketMQDataSource):
    def streamReader(self, schema):
        base = super().streamReader(schema)
        return PausingReader(base.options)


spark = get_session(conf={"spark.driver.memory": "512m"})
spark.dataSource.register(PausingSource)
query = (
    spark.readStream.format("rocketmq")
    .option("namesrv", namesrv)
    .option("topics", "Orders")
    .option("startingOffsets", "earliest")
    .option("maxMessagesPerTrigger", 400)
    .load()
    .writeStream.format("parquet")
    .option("path", out)
    .option("checkpointLocation", checkpoint)
    .trigger(processingTime="0 seconds")
    .start()
)
query.awaitTermination()
"""


@pytest.mark.spark
def test_stream_survives_kill_9_mid_batch(spark: Any, broker_thread: Any, tmp_path: Path) -> None:
    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=4))
    sent = set(_produce(broker_thread, 2000).msg_ids)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    script, marker, logs = tmp_path / "child.py", tmp_path / "paused", tmp_path / "child.log"
    script.write_text(_STREAM_CHILD)
    import subprocess

    with open(logs, "wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                broker_thread.namesrv_addr,
                str(out),
                str(checkpoint),
                str(marker),
            ],
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while not (checkpoint / "commits" / "0").exists():
            assert proc.poll() is None, logs.read_text()[-3000:]
            assert time.monotonic() < deadline, "the child never committed its first batch"
            time.sleep(0.1)
        # PySpark 4.0/4.1 do not limit a query's first batch: make sure a second one comes.
        sent |= set(_produce(broker_thread, 1000).msg_ids)
        while not marker.exists():
            assert proc.poll() is None, logs.read_text()[-3000:]
            assert time.monotonic() < deadline, "the child never reached the second batch"
            time.sleep(0.1)
        # Batch 1 is planned (in the offsets log) and half read, not committed.
        assert (checkpoint / "offsets" / "1").exists()
        assert not (checkpoint / "commits" / "1").exists()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
    # Before PySpark 4.2 availableNow falls back to once: the interrupted batch only.
    for _run in range(1 if _ADMISSION_CONTROL else 2):
        query = _stream(spark, broker_thread.namesrv_addr, out, checkpoint, 400)
        query = query.trigger(availableNow=True).start()
        assert query.awaitTermination(240), "the restarted query did not finish"
        assert query.exception() is None
    _assert_exactly_once(spark, out, sent)
