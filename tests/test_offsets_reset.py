"""Issue 25 part 1: a queue whose offsets went backwards is never skipped silently.

The issue's scenario, over real TCP: an embedded broker on free loopback ports,
a consumer that consumed the old messages into an exactly-once sink, then the
broker replaced by one with an empty store under the same name and ports (a
broker that lost its disk), and new messages produced there. Before the fix the
new messages were taken for the old ones: the sinks wrote none of them.

Now, by default (``on_offsets_reset = "fail"``) the consumer stops with one
error naming topic, broker, queue, both offsets and the option; with
``on_offsets_reset = "resume"`` every queue starts afresh (a WARNING, the
``offsets_reset`` counter in the metrics and on the stop line) and every new
message is written exactly once.

The new messages are produced once the consumer has seen the empty broker: a
rebuilt queue that already holds as many messages as were recorded when the
consumer first reaches it cannot be told from the old one by offsets, and a
Java 4.9.8 broker has no store identity to tell it by (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import sqlite3
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import start_rmqk
from engine_support import committed_offsets, create_topic, produce, wait_for

from rmqk.console.progress import snapshot
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsWentBackwardsError
from rmqk.plugins.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(240)

TOPIC = "Reborn"
QUEUES = 4
N = 300
GROUP = "g-reborn"
# What the error and the WARNING say of each queue (the recorded offset, the new max).
BACKWARDS = re.compile(
    rf"the offsets of topic {TOPIC}, broker broker-a, queue (\d+) went backwards: the "
    r"consumer group recorded offset (\d+), the queue's max offset on the broker is now (\d+)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One embedded broker on fixed ports, which :meth:`rebuild` replaces by an empty one."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.ports = (_free_port(), _free_port())
        self.broker: EmbeddedBroker | None = None
        self.generation = 0

    async def start(self) -> EmbeddedBroker:
        self.generation += 1
        namesrv_port, broker_port = self.ports
        self.broker = await EmbeddedBroker(
            self.tmp_path / f"store-{self.generation}",
            namesrv_port=namesrv_port,
            broker_port=broker_port,
        ).start()
        await create_topic(self.broker, TOPIC, QUEUES)
        return self.broker

    async def rebuild(self) -> EmbeddedBroker:
        """The same name and ports, an empty store: the broker that lost its disk."""
        assert self.broker is not None
        await self.broker.stop()
        self.broker = None
        return await self.start()

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ports[0]}"

    async def close(self) -> None:
        if self.broker is not None:
            await self.broker.stop()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.close()


def _bodies(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(N)]


# -- rmqk run with each exactly-once sink --------------------------------------------------


def _sink_table(sink: str, tmp_path: Path) -> str:
    if sink == "sqlite":
        return f'sink = "sqlite"\n[consumers.rows.sink_options]\npath = "{tmp_path / "out.db"}"\n'
    return (
        'sink = "spark"\n[consumers.rows.sink_options]\n'
        f'path = "{tmp_path / "out"}"\nexactly_once = true\nwriter = "arrow"\n'
    )


def _written(sink: str, tmp_path: Path) -> list[bytes]:
    """The bodies in the sink's output (committed rows only)."""
    if sink == "sqlite":
        db = tmp_path / "out.db"
        if not db.exists():
            return []
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            try:
                return [bytes(r[0]) for r in conn.execute('SELECT body FROM "messages"')]
            except sqlite3.OperationalError:  # not created yet
                return []
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    # Only the files a reader of the dataset sees: the writer stages files under names
    # starting with "." or "_", which pyarrow's discovery skips (polling the folder while
    # only such a file existed read as an empty schema).
    files = [
        p
        for p in out.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in p.relative_to(out).parts)
    ]
    return [
        bytes(b)
        for f in sorted(files)
        for b in pq.read_table(f, columns=["body"]).column("body").to_pylist()
    ]


def _config(
    tmp_path: Path, namesrv: str, sink: str, policy: str | None, processes: int = 1
) -> Path:
    path = tmp_path / "reborn.toml"
    lines = [
        "[prometheus]",
        "port = 0",
        "",
        "[consumers.rows]",
        f"processes = {processes}",
        f'group = "{GROUP}"',
        f'namesrv_addr = "{namesrv}"',
        f'subscription = {{ {TOPIC} = "*" }}',
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"',
        "persist_consumer_offset_interval = 1000",
    ]
    if policy is not None:
        lines.append(f'on_offsets_reset = "{policy}"')
    path.write_text("\n".join(lines) + "\n" + _sink_table(sink, tmp_path))
    return path


def _sinks(*extra: Any) -> list[Any]:
    """``sqlite`` and the ``spark`` sink's Arrow writer (skipped without the spark extra),
    each with the ``extra`` parameters."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        marks = [pytest.mark.skip(reason="the spark extra is needed")]
    else:
        marks = []
    if not extra:
        return ["sqlite", pytest.param("arrow", marks=marks)]
    return [pytest.param("sqlite", *extra), pytest.param("arrow", *extra, marks=marks)]


async def _run_until_old_ones_written(
    cluster: Cluster, tmp_path: Path, sink: str, policy: str | None, processes: int = 1
) -> tuple[subprocess.Popen[str], Path]:
    assert await produce(cluster.namesrv, TOPIC, _bodies("old")) == N
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:
        proc = start_rmqk(
            "run",
            str(_config(tmp_path, cluster.namesrv, sink, policy, processes)),
            "--log-level",
            "INFO",
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        await wait_for(lambda: len(_written(sink, tmp_path)) == N, 90, "the old messages written")
    except BaseException:
        proc.kill()  # the caller's cleanup never sees a run that failed here
        proc.wait()
        raise
    return proc, err


async def _exit_code(proc: subprocess.Popen[str], timeout: float = 90) -> int:
    return await asyncio.to_thread(proc.wait, timeout)


@pytest.mark.parametrize(
    ("sink", "processes"), [*_sinks(1), pytest.param("sqlite", 2, id="sqlite-processes-2")]
)
async def test_rmqk_run_stops_with_one_clear_error_by_default(
    cluster: Cluster, tmp_path: Path, sink: Any, processes: int
) -> None:
    """With ``processes = 2`` the supervisor ends with the worker's error, not restarting it."""
    proc, err = await _run_until_old_ones_written(cluster, tmp_path, sink, None, processes)
    try:
        await cluster.rebuild()
        assert await _exit_code(proc) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    errors = [line for line in text.splitlines() if line.startswith("rmqk: error:")]
    assert len(errors) == 1, text[-3000:]
    found = BACKWARDS.search(errors[0])
    assert found is not None, errors[0]
    queue, recorded, current = (int(g) for g in found.groups())
    assert 0 <= queue < QUEUES and recorded > 0 and current == 0
    assert 'Set on_offsets_reset = "resume"' in errors[0]
    # Nothing was written meanwhile, and the new messages are no one's to skip now.
    assert await produce(cluster.namesrv, TOPIC, _bodies("new")) == N
    assert sorted(_written(sink, tmp_path)) == sorted(_bodies("old"))


@pytest.mark.parametrize("sink", _sinks())
async def test_rmqk_run_resumes_and_writes_every_new_message_once(
    cluster: Cluster, tmp_path: Path, sink: str
) -> None:
    import urllib.request

    proc, err = await _run_until_old_ones_written(cluster, tmp_path, sink, "resume")
    try:
        url = re.search(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)", err.read_text())
        assert url is not None
        await cluster.rebuild()
        # Every queue is seen gone backwards (a WARNING each) before new messages arrive.
        await wait_for(
            lambda: len({m[0] for m in BACKWARDS.findall(err.read_text())}) == QUEUES,
            90,
            "a WARNING for each queue",
        )
        assert await produce(cluster.namesrv, TOPIC, _bodies("new")) == N
        await wait_for(
            lambda: len(_written(sink, tmp_path)) >= 2 * N, 90, "the new messages written"
        )

        def scrape() -> str:
            with urllib.request.urlopen(url[1], timeout=10) as response:
                return str(response.read().decode())

        metrics = await asyncio.to_thread(scrape)
        assert f'rmqk_offsets_reset_total{{group="{GROUP}",topic="{TOPIC}"}} 4.0' in metrics
        proc.send_signal(signal.SIGINT)
        assert await _exit_code(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    warnings = [line for line in text.splitlines() if BACKWARDS.search(line)]
    assert len(warnings) == QUEUES and all("WARNING" in line for line in warnings), warnings
    assert all('on_offsets_reset = "resume"' in line for line in warnings)
    assert "4 queue(s) started afresh (offsets went backwards)" in text
    written = Counter(_written(sink, tmp_path))
    assert written == Counter(_bodies("old") + _bodies("new"))


# -- the consumers at the Python API level ---------------------------------------------


async def _push_consumed(
    cluster: Cluster, received: list[bytes], **options: Any
) -> AsyncPushConsumer:
    consumer = AsyncPushConsumer(
        GROUP,
        namesrv_addr=cluster.namesrv,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **options,
    )
    consumer.subscribe(TOPIC, "*")

    async def listener(msgs: list[MessageExt], _context: Any) -> None:
        received.extend(bytes(m.body) for m in msgs)

    consumer.register_listener(listener)
    assert await produce(cluster.namesrv, TOPIC, _bodies("old")) == N
    await consumer.start()
    await wait_for(lambda: len(received) == N, 60, "the old messages consumed")
    return consumer


async def test_push_consumer_stops_with_the_error_and_tells_its_listeners(
    cluster: Cluster,
) -> None:
    received: list[bytes] = []
    failures: list[Exception] = []
    consumer = await _push_consumed(cluster, received)
    try:
        consumer.add_failure_listener(failures.append)
        await cluster.rebuild()
        await wait_for(lambda: consumer.failure is not None, 60, "the consumer to stop")
        assert failures == [consumer.failure]
        error = consumer.failure
        assert isinstance(error, OffsetsWentBackwardsError)
        assert (error.reset.topic, error.reset.broker) == (TOPIC, "broker-a")
        assert error.reset.recorded > 0 and error.reset.current == 0
        assert BACKWARDS.search(str(error)) is not None
        assert await produce(cluster.namesrv, TOPIC, _bodies("new")) == N
        # Stopped: nothing new is delivered, nothing is started afresh.
        await asyncio.sleep(1)
        assert sorted(received) == sorted(_bodies("old"))
        assert consumer.offsets_resets == {}
    finally:
        await consumer.shutdown()
    # No offset moved back; the pulls carried the old ones to the new broker, as Java's do
    # (docs/reliability.md: restart with resume before the queue grows past them).
    assert cluster.broker is not None
    committed = await committed_offsets(
        cluster.namesrv, cluster.broker.broker_addr, GROUP, TOPIC, QUEUES
    )
    assert committed[error.reset.queue_id] == error.reset.recorded


async def test_push_consumer_resumes_every_queue_with_a_count(cluster: Cluster) -> None:
    received: list[bytes] = []
    consumer = await _push_consumed(cluster, received, on_offsets_reset="resume")
    # Java waits 10 s before the queue restarts; the test need not.
    consumer.offset_illegal_fix_delay_ms = 100
    try:
        await cluster.rebuild()
        await wait_for(
            lambda: consumer.offsets_resets.get(TOPIC) == QUEUES, 60, "every queue reset"
        )
        assert consumer.failure is None
        assert await produce(cluster.namesrv, TOPIC, _bodies("new")) == N
        await wait_for(lambda: len(received) >= 2 * N, 60, "the new messages consumed")
        assert Counter(received) == Counter(_bodies("old") + _bodies("new"))
        progress = snapshot(consumer)
        assert progress.offsets_resets == ((TOPIC, QUEUES),)
    finally:
        await consumer.shutdown()


async def _lite_polled(
    cluster: Cluster, received: list[bytes], **options: Any
) -> AsyncLitePullConsumer:
    consumer = AsyncLitePullConsumer(
        GROUP,
        namesrv_addr=cluster.namesrv,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **options,
    )
    consumer.subscribe(TOPIC, "*")
    assert await produce(cluster.namesrv, TOPIC, _bodies("old")) == N
    await consumer.start()
    await _poll_until(consumer, received, N)
    return consumer


async def _poll_until(consumer: AsyncLitePullConsumer, received: list[bytes], n: int) -> None:
    async def loop() -> None:
        while len(received) < n:
            received.extend(bytes(m.body) for m in await consumer.poll(200))

    await asyncio.wait_for(loop(), 60)


async def test_lite_pull_poll_raises_the_error(cluster: Cluster) -> None:
    received: list[bytes] = []
    consumer = await _lite_polled(cluster, received)
    try:
        await cluster.rebuild()
        with pytest.raises(OffsetsWentBackwardsError) as info:
            await _poll_until(consumer, received, 2 * N)
        assert BACKWARDS.search(str(info.value)) is not None
        assert info.value.reset.current == 0
        assert 'on_offsets_reset = "resume"' in str(info.value)
        # Every later poll says the same.
        with pytest.raises(OffsetsWentBackwardsError):
            await consumer.poll(10)
    finally:
        await consumer.close()


async def test_lite_pull_resumes_every_queue_with_a_count(cluster: Cluster) -> None:
    received: list[bytes] = []
    consumer = await _lite_polled(cluster, received, on_offsets_reset="resume")
    try:
        await cluster.rebuild()

        async def until_reset() -> None:
            while consumer.offsets_resets.get(TOPIC) != QUEUES:
                received.extend(bytes(m.body) for m in await consumer.poll(100))

        await asyncio.wait_for(until_reset(), 60)
        assert await produce(cluster.namesrv, TOPIC, _bodies("new")) == N
        await _poll_until(consumer, received, 2 * N)
        assert Counter(received) == Counter(_bodies("old") + _bodies("new"))
    finally:
        await consumer.close()


def test_the_option_is_validated_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"on_offsets_reset: must be one of fail, resume"):
        AsyncPushConsumer(GROUP, namesrv_addr="127.0.0.1:9876", on_offsets_reset="skip")
    with pytest.raises(ConfigError, match=r"on_offsets_reset: must be one of fail, resume"):
        AsyncLitePullConsumer(GROUP, namesrv_addr="127.0.0.1:9876", on_offsets_reset=True)


# -- the exactly-once sinks on their own -------------------------------------------------


def _open_sink(kind: str, tmp_path: Path) -> Any:
    if kind == "sqlite":
        from rmqk.plugins.sinks.sqlite import SqliteSink

        return SqliteSink({"path": str(tmp_path / "out.db")})
    from rmqk.plugins.spark.sink import SparkSink

    return SparkSink({"path": str(tmp_path / "out"), "exactly_once": True, "writer": "arrow"})


def _stamped(prefix: str, offsets: range, max_offset: int) -> list[MessageExt]:
    """Messages of queue 0 as a pull at the queue's ``max_offset`` hands them over."""
    out = []
    for o in offsets:
        m = MessageExt(
            topic=TOPIC,
            body=f"{prefix}-{o}".encode(),
            queue_id=0,
            queue_offset=o,
            born_timestamp=1_700_000_000_000 + o,
            store_timestamp=1_700_000_000_500 + o,
            store_host="127.0.0.1:10911",
            properties={"UNIQ_KEY": f"{prefix}-{o}"},
        )
        m.set_queue_bounds((0, max_offset))
        out.append(m)
    return out


def _queue0() -> Any:
    from rmqk.model import MessageQueue

    return MessageQueue(TOPIC, "broker-a", 0)


@pytest.mark.parametrize("kind", _sinks())
async def test_a_sink_refuses_a_batch_below_its_records_by_default(
    tmp_path: Path, kind: str
) -> None:
    """Without a consumer telling it (a new run after the rebuild), the sink sees it itself."""
    sink = _open_sink(kind, tmp_path)
    await sink.start()
    try:
        await sink.write(_queue0(), _stamped("old", range(10), 10))
        with pytest.raises(OffsetsWentBackwardsError) as info:
            await sink.write(_queue0(), _stamped("new", range(5), 5))
    finally:
        await sink.close()
    text = str(info.value)
    assert f"the offsets of topic {TOPIC}, broker broker-a, queue 0 went backwards" in text
    assert "commit records in" in text and "recorded offset 10" in text
    assert "max offset on the broker is now 5" in text
    assert sorted(_written(kind, tmp_path)) == sorted(
        m.body for m in _stamped("old", range(10), 10)
    )


@pytest.mark.parametrize("kind", _sinks())
async def test_a_sink_resumes_and_its_reset_survives_a_restart(tmp_path: Path, kind: str) -> None:
    reports: list[Any] = []
    sink = _open_sink(kind, tmp_path)
    sink.watch_offsets("resume", reports.append)
    await sink.start()
    try:
        await sink.write(_queue0(), _stamped("old", range(10), 10))
        await sink.write(_queue0(), _stamped("new", range(5), 5))
        await asyncio.sleep(0)
    finally:
        await sink.close()
    assert [(r.queue_id, r.recorded, r.current) for r in reports] == [(0, 10, 5)]
    # A new writer reads the records back: the old queue's are void, the new ones hold.
    again = _open_sink(kind, tmp_path)
    again.watch_offsets("resume", reports.append)
    await again.start()
    try:
        await again.write(_queue0(), _stamped("new", range(3, 10), 10))
    finally:
        await again.close()
    assert len(reports) == 1
    expected = [m.body for m in _stamped("old", range(10), 10) + _stamped("new", range(10), 10)]
    assert Counter(_written(kind, tmp_path)) == Counter(expected)


@pytest.mark.parametrize("kind", _sinks())
async def test_a_reset_the_consumer_asks_for_is_durable(tmp_path: Path, kind: str) -> None:
    """What the consumer awaits before a queue restarts: the new queue may already be as
    long as the old one (nothing a sink could see), its messages are still written."""
    sink = _open_sink(kind, tmp_path)
    await sink.start()
    try:
        await sink.write(_queue0(), _stamped("old", range(10), 10))
        await sink.offsets_reset(_queue0())
    finally:
        await sink.close()
    again = _open_sink(kind, tmp_path)
    await again.start()
    try:
        await again.write(_queue0(), _stamped("new", range(10), 10))
        await again.write(_queue0(), _stamped("new", range(4), 10))  # a replay: skipped
    finally:
        await again.close()
    expected = [m.body for m in _stamped("old", range(10), 10) + _stamped("new", range(10), 10)]
    assert Counter(_written(kind, tmp_path)) == Counter(expected)


# -- the Spark source's checkpointed offsets ---------------------------------------------


def test_spark_source_fails_or_reads_a_queue_afresh_when_its_offsets_went_backwards(
    broker_thread_factory: Any, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from rmqk.plugins.spark.demo import produce_orders
    from rmqk.plugins.spark.pull import DataLossError
    from rmqk.plugins.spark.source import RocketMQStreamReader, SourceOptions

    ports = {"namesrv_port": _free_port(), "broker_port": _free_port()}

    def broker(name: str, count: int) -> Any:
        handle = broker_thread_factory(data_dir=tmp_path / name, **ports)
        handle.call(handle.broker.create_topic("Orders", queues=4))
        asyncio.run(produce_orders(handle.namesrv_addr, count, topic="Orders"))
        return handle

    def reader(handle: Any, **options: str) -> RocketMQStreamReader:
        opts = SourceOptions.parse(
            {"namesrv": handle.namesrv_addr, "topics": "Orders", **options}, streaming=True
        )
        return RocketMQStreamReader(opts)

    first = broker("first", 400)
    old = reader(first, startingOffsets="earliest")
    try:
        checkpoint = old.latestOffset(old.initialOffset())
    finally:
        old.stop()
    assert sum(checkpoint.values()) == 400
    first.stop()
    rebuilt = broker("rebuilt", 40)

    # The query restarts from its checkpoint: by default it fails, naming the queue.
    strict = reader(rebuilt)
    try:
        with pytest.raises(DataLossError) as info:
            strict.latestOffset(checkpoint)
    finally:
        strict.stop()
    text = str(info.value)
    assert re.search(
        r"the offsets of topic Orders, broker broker-a, queue \d went backwards: the checkpoint "
        r"recorded offset \d+, the queue's max offset on the broker is now \d+",
        text,
    ), text
    assert "failOnDataLoss=false" in text

    lenient = reader(rebuilt, failOnDataLoss="false")
    try:
        end = lenient.latestOffset(checkpoint)
        assert lenient.offsets_resets == 4
        assert all(end[k] < checkpoint[k] for k in checkpoint)
        parts = lenient.partitions(checkpoint, end)
        assert [(p.start, p.end) for p in parts] == [(0, end[k]) for k in sorted(end)]
        rows = [r for p in parts for b in lenient.read(p) for r in b.to_pylist()]
        # Every new message, once; and the next batch goes on from the new offsets.
        assert len(rows) == 40
        assert len({(r["queue_id"], r["queue_offset"]) for r in rows}) == 40
        assert lenient.partitions(end, lenient.latestOffset(end)) == []
    finally:
        lenient.stop()
