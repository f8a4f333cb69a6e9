"""Fault scenarios: short runs in tests/test_faults_*.py, long ones in bench/soak_*.py.

Every scenario produces messages whose body starts with an 8-digit id, consumes
them through real TCP on 127.0.0.1 while something goes wrong, and counts: each
id must be consumed at least once (nothing lost); deliveries beyond the first
are duplicates, which at-least-once allows and the result reports.

The module is also the consumer child of the kill -9 and memory scenarios::

    python tests/test_faults_support.py consumer '<json spec>'

It has no tests of its own (the name follows tests/test_broker_support.py).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a program, or imported from bench/
    sys.path.insert(0, str(HERE))

from engine_support import (  # noqa: E402
    FAST_DELAY_LEVELS,
    create_topic,
    max_offsets,
    produce,
    push_consumer,
)
from faultproxy import FaultProxy  # noqa: E402

from rmqk.engine.consumer import AsyncPushConsumer  # noqa: E402
from rmqk.engine.producer import AsyncProducer  # noqa: E402
from rmqk.model import (  # noqa: E402
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    ConsumeOrderlyStatus,
    ConsumeStatus,
)
from rmqk.model.message import Message, MessageExt  # noqa: E402
from rmqk.plugins.broker import EmbeddedBroker  # noqa: E402

log = logging.getLogger("rmqk.tests.faults")

ID_WIDTH = 8


# ----------------------------------------------------------------------------- messages


def body_of(i: int, size: int = ID_WIDTH) -> bytes:
    head = b"%08d" % i
    return head + b"." * max(0, size - len(head))


def id_of(body: bytes | memoryview) -> int:
    return int(bytes(body[:ID_WIDTH]))


async def produce_ids(
    namesrv_addr: str, topic: str, ids: Iterable[int], size: int = ID_WIDTH, batch: int = 128
) -> int:
    return await produce(namesrv_addr, topic, (body_of(i, size) for i in ids), batch=batch)


class Tally:
    """Deliveries per id, with the time of each consumption (for stall and resume figures)."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.times: list[float] = []  # monotonic, one per delivered batch, ascending
        self.delivered = 0
        self._watch: dict[int, int] | None = None
        self._watch_since = 0.0
        self.resumed_at: float | None = None

    def record(self, msgs: Sequence[MessageExt]) -> None:
        now = time.monotonic()
        for m in msgs:
            self.counts[id_of(m.body)] += 1
            if self._watch is not None and self.resumed_at is None:
                seen = self._watch.get(m.queue_id, -1)
                if m.queue_offset > seen and now >= self._watch_since:
                    self.resumed_at = now
        self.delivered += len(msgs)
        self.times.append(now)

    @property
    def distinct(self) -> int:
        return len(self.counts)

    @property
    def duplicates(self) -> int:
        return self.delivered - len(self.counts)

    def lost(self, expected: Iterable[int]) -> list[int]:
        return [i for i in expected if i not in self.counts]

    def figures(self, expected: Iterable[int]) -> dict[str, int]:
        """The delivery figures every result reports; ``lost`` counts ``expected`` ids unseen."""
        return {
            "delivered": self.delivered,
            "distinct": self.distinct,
            "duplicates": self.duplicates,
            "lost": len(self.lost(expected)),
        }

    def watch_new_pulls(self, highest_pulled: dict[int, int], since: float) -> None:
        """Note the first consumption of a message pulled after ``since``."""
        self._watch = dict(highest_pulled)
        self._watch_since = since
        self.resumed_at = None

    def longest_stall(self, start: float, end: float) -> float:
        lo, hi = bisect.bisect_left(self.times, start), bisect.bisect_right(self.times, end)
        points = [start, *self.times[lo:hi], end]
        return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def tallying_consumer(
    broker: Any, group: str, topic: str, tally: Tally, pace: Callable[[], float], **options: Any
) -> AsyncPushConsumer:
    """A push consumer of ``topic`` from the first offset, recording into ``tally``.

    The listener sleeps ``pace()`` seconds a message first (read at every batch, so
    a scenario can stop pacing midway). The caller starts the consumer.
    """
    consumer = push_consumer(broker, group, **options)
    consumer.subscribe(topic)

    @consumer.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        delay = pace()
        if delay:
            await asyncio.sleep(delay * len(msgs))
        tally.record(msgs)

    return consumer


def highest_pulled(consumer: AsyncPushConsumer, topic: str) -> dict[int, int]:
    """Per queue id: the highest offset already pulled into the consumer's cache."""
    out: dict[int, int] = {}
    for mq, pq in consumer.rebalance.process_queue_table.items():
        if mq.topic == topic:
            out[mq.queue_id] = max(out.get(mq.queue_id, -1), pq.queue_offset_max)
    return out


async def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Wait for ``predicate``; returns the seconds it took, raises AssertionError on timeout."""
    begin = time.monotonic()
    while not predicate():
        if time.monotonic() - begin > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - begin


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of ``pid`` from /proc (VmRSS now, VmHWM the peak), in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(f"/proc/{pid}/status has no {field}")


# ----------------------------------------------------------------------------- brokers


class ProxiedBroker(EmbeddedBroker):
    """An embedded broker whose routes send clients through a :class:`FaultProxy`.

    The name server is reached directly; the broker address it hands out is the
    proxy's, which forwards to the broker's real port.
    """

    def __init__(self, data_dir: str | os.PathLike[str], proxy: FaultProxy, **options: Any):
        super().__init__(data_dir, **options)
        self.proxy = proxy

    def _advertise(self, port: int) -> str:
        addr = super()._advertise(port)
        if self._namesrv_addr is None:
            return addr  # the name server's own address
        self.proxy.upstream = addr
        return self.proxy.addr


class BrokerProcess:
    """``rmqk broker`` in a subprocess on fixed ports, so it can be killed and restarted."""

    def __init__(self, data_dir: Path, *, log_path: Path, extra_args: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[str] | None = None

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    async def start(self, timeout: float = 60.0) -> float:
        """Start and wait until both ports listen; returns the seconds it took."""
        begin = time.monotonic()
        log_file = open(self.log_path, "a")  # noqa: SIM115 - the child owns it while it runs
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "rmqk.cli", "broker",
                    "--namesrv-port", str(self.namesrv_port),
                    "--broker-port", str(self.broker_port),
                    "--data", str(self.data_dir),
                    *self.extra_args,
                ],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip
        finally:
            log_file.close()
        stdout = self.proc.stdout
        assert stdout is not None
        listening = 0
        while listening < 2:
            line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout)
            if not line:
                raise AssertionError(
                    f"rmqk broker exited with code {self.proc.wait()}; see {self.log_path}"
                )
            if "listening on" in line:
                listening += 1
        return time.monotonic() - begin

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL
        self._close_pipes()

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._close_pipes()
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


# ----------------------------------------------------------------------------- consumer child


@attrs.frozen
class ChildStats:
    delivered: int
    distinct: int

    @property
    def duplicates(self) -> int:
        return self.delivered - self.distinct


class ConsumerProcess:
    """The consumer child (this file run as a program) and what it reports.

    It consumes ``topic`` in ``group`` from the first offset. With ``record`` it
    appends each consumed id to ``<name>.ids`` before acknowledging, so the file
    survives a kill -9; it keeps a bitmap of ids and writes ``<name>.stats``
    (delivered, distinct) five times a second. While ``slow_flag`` exists the
    listener sleeps ``slow_sleep`` seconds per batch; otherwise ``msg_sleep`` per
    message.
    """

    def __init__(
        self,
        workdir: Path,
        name: str,
        *,
        namesrv_addr: str,
        group: str,
        topic: str,
        total: int,
        record: bool = True,
        options: dict[str, Any] | None = None,
        slow_flag: Path | None = None,
        slow_sleep: float = 0.05,
        msg_sleep: float = 0.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.record_path = workdir / "consumed.ids" if record else None
        self.stats_path = workdir / f"{name}.stats"
        self.log_path = workdir / f"{name}.log"
        self.spec = {
            "namesrv_addr": namesrv_addr,
            "group": group,
            "topic": topic,
            "total": total,
            "record": str(self.record_path) if self.record_path else None,
            "stats": str(self.stats_path),
            "options": options or {},
            "slow_flag": str(slow_flag) if slow_flag else None,
            "slow_sleep": slow_sleep,
            "msg_sleep": msg_sleep,
        }
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 60.0) -> float:
        """Spawn and wait for READY (consumer started); returns the seconds it took."""
        self.started_at = time.monotonic()
        log_file = open(self.log_path, "a")  # noqa: SIM115 - the child owns it while it runs
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__)), "consumer", json.dumps(self.spec)],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env),
            )
        finally:
            log_file.close()
        stdout = self.proc.stdout
        assert stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout)
        if line.strip() != "READY":
            raise AssertionError(f"consumer child said {line!r}; see {self.log_path}")
        return time.monotonic() - self.started_at

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    async def stop(self, timeout: float = 60.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout)
            except TimeoutError:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def stats(self) -> ChildStats:
        try:
            data = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return ChildStats(0, 0)
        return ChildStats(int(data["delivered"]), int(data["distinct"]))


class RecordTail:
    """Reads the ids appended to a record file since the last call (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[int] = Counter()
        self.delivered = 0
        self._pos = 0
        self._partial = b""

    def poll(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return 0
        self._pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line:
                self.counts[int(line)] += 1
        self.delivered += len(lines)
        return len(lines)

    @property
    def distinct(self) -> int:
        return len(self.counts)


def _write_stats(path: str, delivered: int, distinct: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"delivered": delivered, "distinct": distinct}, f)
    os.replace(tmp, path)


async def _consumer_child(spec: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    total = int(spec["total"])
    bitmap = bytearray((total + 7) // 8)
    delivered = 0
    distinct = 0
    record = spec["record"]
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if record else None
    slow_flag = Path(spec["slow_flag"]) if spec["slow_flag"] else None
    slow_sleep = float(spec["slow_sleep"])
    msg_sleep = float(spec["msg_sleep"])
    consumer = AsyncPushConsumer(
        spec["group"],
        namesrv_addr=spec["namesrv_addr"],
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **spec["options"],
    )
    consumer.subscribe(spec["topic"])

    @consumer.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        nonlocal delivered, distinct
        if slow_flag is not None and slow_flag.exists():
            await asyncio.sleep(slow_sleep)
        elif msg_sleep:
            await asyncio.sleep(msg_sleep * len(msgs))
        ids = [id_of(m.body) for m in msgs]
        if fd is not None:
            # One write per batch: a kill -9 cannot tear it, and it happens before the ack.
            os.write(fd, "".join(f"{i}\n" for i in ids).encode())
        for i in ids:
            byte, bit = divmod(i, 8)
            if 0 <= byte < len(bitmap) and not bitmap[byte] & (1 << bit):
                bitmap[byte] |= 1 << bit
                distinct += 1
        delivered += len(ids)

    await consumer.start()
    print("READY", flush=True)

    async def report() -> None:
        while True:
            _write_stats(spec["stats"], delivered, distinct)
            await asyncio.sleep(0.2)

    reporter = asyncio.get_running_loop().create_task(report())
    await stop.wait()
    await consumer.shutdown()
    reporter.cancel()
    _write_stats(spec["stats"], delivered, distinct)
    print("STOPPED", flush=True)


# ----------------------------------------------------------------------------- results


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


class Result:
    """Common reporting for the scenario results below."""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)  # type: ignore[arg-type]

    def summary(self) -> str:
        return f"{type(self).__name__}: " + ", ".join(
            f"{k}={_fmt(v)}" for k, v in self.as_dict().items()
        )


# ----------------------------------------------------------------------------- kill -9 consumer


@attrs.frozen
class ConsumerKillResult(Result):
    total: int
    kills: int
    delivered: int
    distinct: int
    duplicates: int
    lost: int
    duplicate_bound: int
    duplicates_per_kill: list[int]
    restart_to_first_s: list[float]
    duration_s: float


async def consumer_kill_scenario(
    workdir: Path,
    *,
    total: int = 6000,
    kills: int = 2,
    queues: int = 4,
    msg_sleep: float = 0.002,
    pull_threshold: int = 64,
    pull_batch: int = 16,
    timeout: float = 120.0,
) -> ConsumerKillResult:
    """kill -9 a consumer process mid-consumption ``kills`` times, restarting it each time.

    Duplicates come from what a killed consumer had consumed but not yet committed.
    The committed offset rides on every pull, and a pull is only sent while the
    cached offsets span at most ``consume_concurrently_max_span`` (set to
    ``pull_threshold`` here), so per queue and kill the duplicates are at most
    that span + 1 offsets plus the last pull's batch.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    options = {
        "pull_threshold_for_queue": pull_threshold,
        "consume_concurrently_max_span": pull_threshold,
        "pull_batch_size": pull_batch,
        "consume_thread_max": 8,
        "consume_thread_min": 8,
    }
    async with EmbeddedBroker(workdir / "broker", namesrv_port=0, broker_port=0) as broker:
        topic, group = "KillConsumer", "g-kill-consumer"
        await create_topic(broker, topic, queues)
        await produce_ids(broker.namesrv_addr, topic, range(total), batch=256)
        tail = RecordTail(workdir / "consumed.ids")
        per_kill: list[int] = []
        restarts: list[float] = []
        for k in range(kills + 1):
            child = ConsumerProcess(
                workdir,
                f"consumer-{k}",
                namesrv_addr=broker.namesrv_addr,
                group=group,
                topic=topic,
                total=total,
                options=options,
                msg_sleep=msg_sleep,
            )
            tail.poll()
            before = tail.delivered
            await child.start()
            if k > 0:
                await wait_until(
                    lambda b=before: (tail.poll(), tail.delivered)[1] > b, 60, "the restart"
                )
                restarts.append(time.monotonic() - child.started_at)
            if k < kills:
                target = total * (k + 1) // (kills + 1)
                await wait_until(
                    lambda t=target: (tail.poll(), tail.distinct)[1] >= t, timeout, f"{target} ids"
                )
                dups_before = tail.delivered - tail.distinct
                child.kill9()
                per_kill.append(dups_before)
            else:
                await wait_until(
                    lambda: (tail.poll(), tail.distinct)[1] >= total, timeout, "every id"
                )
                await asyncio.sleep(0.3)
                await child.stop()
                tail.poll()
    # Duplicates caused by kill k show up between restart k and kill k + 1 (or the end).
    duplicates = tail.delivered - tail.distinct
    marks = [*per_kill, duplicates]
    per_kill_dups = [marks[j + 1] - marks[j] for j in range(kills)]
    return ConsumerKillResult(
        total=total,
        kills=kills,
        delivered=tail.delivered,
        distinct=tail.distinct,
        duplicates=duplicates,
        lost=total - len([i for i in tail.counts if 0 <= i < total]),
        duplicate_bound=kills * queues * (pull_threshold + 1 + pull_batch),
        duplicates_per_kill=per_kill_dups,
        restart_to_first_s=restarts,
        duration_s=time.monotonic() - begin,
    )


# ----------------------------------------------------------------------------- kill -9 broker


@attrs.frozen
class BrokerKillResult(Result):
    produced: int
    kills: int
    delivered: int
    distinct: int
    duplicates: int
    lost: int
    acked_missing_after_restart: int
    broker_restart_s: list[float]
    consume_resumed_s: list[float]
    duration_s: float


async def broker_kill_scenario(
    workdir: Path,
    *,
    before: int = 4000,
    after: int = 1000,
    kills: int = 1,
    queues: int = 4,
    heartbeat_ms: int = 1000,
    msg_sleep: float = 0.001,
    down_s: float = 0.5,
    flush: str = "async",
    timeout: float = 120.0,
) -> BrokerKillResult:
    """kill -9 the broker process (name server included) mid-consumption and restart it.

    The consumer runs in this process. After each restart the scenario checks that
    every acknowledged message is in the recovered store, measures how long the
    consumer took to consume again (the broker forgot its subscription with the
    process, so that waits for the next heartbeat: ``heartbeat_ms``), then sends
    ``after`` more messages through the restarted broker.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    broker = BrokerProcess(
        workdir / "broker", log_path=workdir / "broker.log", extra_args=["--flush", flush]
    )
    topic, group = "KillBroker", "g-kill-broker"
    tally = Tally()
    produced = 0
    restarts: list[float] = []
    resumed: list[float] = []
    missing_after_restart = 0
    await broker.start()
    consumer: AsyncPushConsumer | None = None
    try:
        await create_topic(broker, topic, queues)
        produced += await produce_ids(broker.namesrv_addr, topic, range(before), batch=128)
        consumer = tallying_consumer(
            broker,
            group,
            topic,
            tally,
            lambda: msg_sleep,
            heartbeat_broker_interval=heartbeat_ms,
            pull_threshold_for_queue=64,
            pull_batch_size=16,
        )
        await consumer.start()
        for k in range(kills):
            target = produced * (k + 1) // (kills + 1)
            await wait_until(lambda t=target: tally.distinct >= t, timeout, f"{target} consumed")
            broker.kill9()
            await asyncio.sleep(down_s)
            restarts.append(await broker.start())
            restarted_at = time.monotonic()
            # The store recovered: every acknowledged message is there.
            stored = await max_offsets(broker.namesrv_addr, broker.broker_addr, topic, queues)
            missing_after_restart += max(0, produced - sum(stored.values()))
            tally.watch_new_pulls(highest_pulled(consumer, topic), restarted_at)
            await wait_until(lambda: tally.resumed_at is not None, timeout, "consumption to resume")
            assert tally.resumed_at is not None
            resumed.append(tally.resumed_at - restarted_at)
            ids = range(produced, produced + after)
            produced += await produce_ids(broker.namesrv_addr, topic, ids, batch=128)
        await wait_until(lambda: tally.distinct >= produced, timeout, "every message")
        await asyncio.sleep(0.3)
    finally:
        if consumer is not None:
            await consumer.shutdown()
        broker.stop()
    return BrokerKillResult(
        produced=produced,
        kills=kills,
        **tally.figures(range(produced)),
        acked_missing_after_restart=missing_after_restart,
        broker_restart_s=restarts,
        consume_resumed_s=resumed,
        duration_s=time.monotonic() - begin,
    )


# ----------------------------------------------------------------------------- network faults


@attrs.frozen
class NetworkResult(Result):
    kind: str
    faults: int
    total: int
    delivered: int
    distinct: int
    duplicates: int
    lost: int
    resume_s: list[float]
    max_resume_s: float
    longest_stall_s: float
    proxy: str
    duration_s: float


NETWORK_FAULTS = ("reset", "half_open", "blackhole", "slow")


async def network_scenario(
    workdir: Path,
    kind: str,
    *,
    total: int = 3000,
    rounds: int = 2,
    fault_s: float = 2.0,
    gap_s: float = 1.0,
    queues: int = 4,
    heartbeat_ms: int = 1000,
    msg_sleep: float = 0.02,
    latency_s: float = 0.05,
    bandwidth: int = 256 * 1024,
    resume_timeout: float = 45.0,
    timeout: float = 120.0,
) -> NetworkResult:
    """Consume through a :class:`FaultProxy` while it injects ``kind`` faults.

    ``reset``: RST every connection; ``half_open``: the broker sees the connection
    end, the consumer hears nothing; ``blackhole``: nothing flows for ``fault_s``;
    ``slow``: ``latency_s`` each way and a ``bandwidth`` cap for the whole run.
    The listener is paced (``msg_sleep`` per message, small caches) and the backlog
    is topped up between faults, so there is always something to pull; each
    fault's resume time runs from its end to the first consumption of a message
    pulled after it. Then everything is drained; the longest stall covers the faults
    and the drain.
    """
    if kind not in NETWORK_FAULTS:
        raise ValueError(f"kind must be one of {NETWORK_FAULTS}, got {kind!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    topic, group = "Faults", f"g-net-{kind.replace('_', '-')}"
    tally = Tally()
    paced = True
    resumes: list[float] = []
    async with FaultProxy() as proxy:
        broker = ProxiedBroker(workdir / "broker", proxy, namesrv_port=0, broker_port=0)
        async with broker:
            await create_topic(broker, topic, queues)
            produced = await produce_ids(broker.namesrv_addr, topic, range(total), batch=256)
            refill_below = max(total // 4, 200)
            consumer = tallying_consumer(
                broker,
                group,
                topic,
                tally,
                lambda: msg_sleep if paced else 0.0,
                heartbeat_broker_interval=heartbeat_ms,
                pull_threshold_for_queue=16,
                consume_concurrently_max_span=16,
                pull_batch_size=8,
            )
            await consumer.start()
            try:
                await wait_until(lambda: tally.distinct >= 50, 30, "the first messages")
                start_faults = time.monotonic()
                if kind == "slow":
                    proxy.latency = latency_s
                    proxy.bandwidth = bandwidth
                for _ in range(rounds):
                    if kind == "reset":
                        proxy.reset_all()
                    elif kind == "half_open":
                        proxy.half_open()
                    elif kind == "blackhole":
                        proxy.blackhole()
                        await asyncio.sleep(fault_s)
                        proxy.heal()
                    else:
                        await asyncio.sleep(fault_s)
                    ended = time.monotonic()
                    # What was already on its way in when the fault hit is not a new pull.
                    await asyncio.sleep(0.3)
                    tally.watch_new_pulls(highest_pulled(consumer, topic), ended)
                    await wait_until(
                        lambda: tally.resumed_at is not None, resume_timeout, f"{kind}: resume"
                    )
                    assert tally.resumed_at is not None
                    resumes.append(tally.resumed_at - ended)
                    await asyncio.sleep(gap_s)
                    if produced - tally.distinct < refill_below:
                        # Keep a backlog for the next fault (sent while the link is healthy).
                        ids = range(produced, produced + refill_below * 2)
                        produced += await produce_ids(broker.namesrv_addr, topic, ids, batch=256)
                paced = False
                await wait_until(lambda: tally.distinct >= produced, timeout, "every message")
                stall = tally.longest_stall(start_faults, time.monotonic())
                await asyncio.sleep(0.3)
            finally:
                proxy.heal()
                await consumer.shutdown()
    return NetworkResult(
        kind=kind,
        faults=rounds,
        total=produced,
        **tally.figures(range(produced)),
        resume_s=resumes,
        max_resume_s=max(resumes, default=0.0),
        longest_stall_s=stall,
        proxy=repr(proxy.stats),
        duration_s=time.monotonic() - begin,
    )


# ----------------------------------------------------------------------------- group churn


class ExclusivityMonitor:
    """Counts moments when two members are inside the listener for one queue at once."""

    def __init__(self) -> None:
        self.inside: dict[tuple[str, int], str] = {}
        self.violations: list[str] = []

    def enter(self, member: str, key: tuple[str, int]) -> None:
        other = self.inside.get(key)
        if other is not None and other != member:
            self.violations.append(f"{key} consumed by {member} while {other} was inside")
        self.inside[key] = member

    def leave(self, member: str, key: tuple[str, int]) -> None:
        if self.inside.get(key) == member:
            del self.inside[key]


@attrs.frozen
class GroupChurnResult(Result):
    orderly: bool
    cycles: int
    joins: int
    leaves: int
    produced: int
    delivered: int
    distinct: int
    duplicates: int
    lost: int
    exclusivity_violations: int
    order_violations: int
    duration_s: float


async def group_churn_scenario(
    workdir: Path,
    *,
    orderly: bool = False,
    cycles: int = 8,
    cycle_s: float = 1.0,
    queues: int = 8,
    min_members: int = 1,
    max_members: int = 4,
    send_rate: float = 400.0,
    keys: int = 16,
    seed: int = 7,
    timeout: float = 120.0,
) -> GroupChurnResult:
    """Members join and leave a loaded group every ``cycle_s`` for ``cycles`` cycles.

    A producer sends ``send_rate`` messages a second throughout (orderly: by key,
    ``keys`` keys, each key's sequence numbers in order). At the end one member
    drains the rest. Orderly runs also check that no queue is ever inside two
    members' listeners at once and that each key's first deliveries are in order.
    Java's 20 s rebalance period and unlock delay are shortened to 1 s for the run.
    """
    import rmqk.engine.rebalance as rebalance_module

    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    rng = random.Random(seed)
    saved = (rebalance_module.REBALANCE_WAIT_INTERVAL_MS, rebalance_module.UNLOCK_DELAY_MS)
    rebalance_module.REBALANCE_WAIT_INTERVAL_MS = 1000
    rebalance_module.UNLOCK_DELAY_MS = 1000
    topic = "Churn" + ("Orderly" if orderly else "")
    group = "g-churn" + ("-orderly" if orderly else "")
    tally = Tally()
    monitor = ExclusivityMonitor()
    order_errors: list[str] = []
    first_seen: dict[int, list[int]] = defaultdict(list)  # key -> seqs in first-delivery order
    seen_ids: set[int] = set()
    acked: list[int] = []
    members: list[tuple[str, AsyncPushConsumer]] = []
    joins = leaves = 0
    stop_sending = asyncio.Event()

    def member(name: str, broker: EmbeddedBroker) -> AsyncPushConsumer:
        options: dict[str, Any] = {
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
            "pull_batch_size": 16,
            "consume_message_batch_max_size": 4,
        }
        if orderly:
            options["consume_service"] = "orderly"
        c = AsyncPushConsumer(group, namesrv_addr=broker.namesrv_addr, **options)
        c.subscribe(topic)

        @c.register_listener
        async def handle(msgs: list[MessageExt]) -> Any:
            key = (msgs[0].topic, msgs[0].queue_id)
            monitor.enter(name, key)
            try:
                await asyncio.sleep(0.001 * len(msgs))
                for m in msgs:
                    i = id_of(m.body)
                    if orderly and i not in seen_ids:
                        k, seq = i % keys, i // keys
                        seqs = first_seen[k]
                        if seqs and seqs[-1] != seq - 1:
                            order_errors.append(f"key {k}: {seq} first seen after {seqs[-1]}")
                        seqs.append(seq)
                    seen_ids.add(i)
                tally.record(msgs)
            finally:
                monitor.leave(name, key)
            return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        return c

    async def send(broker: EmbeddedBroker) -> None:
        interval = 1.0 / send_rate
        i = 0
        async with AsyncProducer("churn-producer", namesrv_addr=broker.namesrv_addr) as p:
            next_at = time.monotonic()
            while not stop_sending.is_set():
                msg = Message(topic, body_of(i))
                if orderly:
                    await p.send_orderly(msg, f"key-{i % keys}")
                else:
                    await p.send(msg)
                acked.append(i)
                i += 1
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    try:
        async with EmbeddedBroker(workdir / "broker", namesrv_port=0, broker_port=0) as broker:
            await create_topic(broker, topic, queues)
            counter = 0

            async def join() -> None:
                nonlocal counter, joins
                name = f"m{counter}"
                counter += 1
                c = member(name, broker)
                await c.start()
                members.append((name, c))
                joins += 1

            async def leave() -> None:
                nonlocal leaves
                _, c = members.pop(rng.randrange(len(members)))
                await c.shutdown()
                leaves += 1

            await join()
            sender = asyncio.get_running_loop().create_task(send(broker))
            try:
                for _ in range(cycles):
                    await asyncio.sleep(cycle_s)
                    if len(members) <= min_members:
                        await join()
                    elif len(members) >= max_members or rng.random() < 0.5:
                        await leave()
                    else:
                        await join()
            finally:
                stop_sending.set()
                await sender
            while len(members) > 1:
                await leave()
            await wait_until(lambda: all(i in tally.counts for i in acked), timeout, "every id")
            await asyncio.sleep(0.5)
            for _, c in members:
                await c.shutdown()
            members.clear()
    finally:
        for _, c in members:
            with contextlib.suppress(Exception):
                await c.shutdown()
        rebalance_module.REBALANCE_WAIT_INTERVAL_MS, rebalance_module.UNLOCK_DELAY_MS = saved
    return GroupChurnResult(
        orderly=orderly,
        cycles=cycles,
        joins=joins,
        leaves=leaves,
        produced=len(acked),
        **tally.figures(acked),
        exclusivity_violations=len(monitor.violations),
        order_violations=len(order_errors),
        duration_s=time.monotonic() - begin,
    )


# ----------------------------------------------------------------------------- listener failures


def retry_dlq_counts(broker: EmbeddedBroker, group: str) -> tuple[int, int]:
    """Messages stored in the group's %RETRY% and %DLQ% topics (one queue each)."""
    store = broker.store
    return (
        store.max_offset(RETRY_GROUP_TOPIC_PREFIX + group, 0),
        store.max_offset(DLQ_GROUP_TOPIC_PREFIX + group, 0),
    )


@attrs.frozen
class ListenerFailureResult(Result):
    total: int
    max_reconsume_times: int
    deliveries_by_kind: dict[str, int]
    expected_deliveries_by_kind: dict[str, int]
    retry_topic_messages: int
    expected_retry_topic_messages: int
    dlq_messages: int
    expected_dlq_messages: int
    reconsume_times_ok: bool
    duration_s: float


# Blocked calls hold listener slots until the cleaner has run: keep them few.
MAX_TIMEOUTS = 16


def failure_kind(i: int) -> str:
    """What the listener does with id ``i`` (see :func:`listener_failure_scenario`)."""
    if i % 50 == 25 and i < 50 * MAX_TIMEOUTS:
        return "timeout-once"
    return {
        1: "raise-always",
        2: "later-always",
        3: "raise-once",
        4: "later-once",
        5: "none-is-success",
    }.get(i % 10, "ok")


async def listener_failure_scenario(
    workdir: Path, *, total: int = 300, max_reconsume_times: int = 2, timeout: float = 90.0
) -> ListenerFailureResult:
    """Listener exceptions, returned failures and consume timeouts; exact retry and DLQ counts.

    Each message is consumed alone. By id: ``raise-always`` and ``later-always``
    fail every delivery, so each is delivered ``max_reconsume_times + 1`` times,
    sent back ``max_reconsume_times`` times and ends in the DLQ once;
    ``raise-once`` / ``later-once`` fail their first delivery only (2 deliveries,
    1 send-back); ``timeout-once`` blocks on its first delivery until the consume
    timeout cleaner (Java's cleanExpiredMsg) has sent it back, then is consumed
    again (2 deliveries, 1 send-back). The consume start of the blocked messages is
    backdated past ``consume_timeout`` rather than waiting the 15 minutes.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    topic, group = "ListenerFaults", "g-listener-faults"
    deliveries: dict[int, list[int]] = defaultdict(list)  # id -> reconsume_times seen
    release = asyncio.Event()
    blocked: set[int] = set()
    kinds = {i: failure_kind(i) for i in range(total)}
    per_failure = max_reconsume_times + 1
    expected_deliveries = {
        "ok": 1,
        "none-is-success": 1,
        "raise-always": per_failure,
        "later-always": per_failure,
        "raise-once": 2,
        "later-once": 2,
        "timeout-once": 2,
    }
    expected_backs = {
        "raise-always": max_reconsume_times,
        "later-always": max_reconsume_times,
        "raise-once": 1,
        "later-once": 1,
        "timeout-once": 1,
    }
    async with EmbeddedBroker(
        workdir / "broker", namesrv_port=0, broker_port=0, delay_levels=FAST_DELAY_LEVELS
    ) as broker:
        await create_topic(broker, topic, 4)
        await produce_ids(broker.namesrv_addr, topic, range(total))
        consumer = AsyncPushConsumer(
            group,
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            max_reconsume_times=max_reconsume_times,
            consume_message_batch_max_size=1,
            # The blocked calls each hold a listener slot until the cleaner has run: leave
            # plenty for everything else.
            pull_batch_size=8,
            consume_thread_min=64,
            consume_thread_max=64,
        )
        consumer.subscribe(topic)

        @consumer.register_listener
        async def handle(msgs: list[MessageExt]) -> ConsumeStatus | None:
            (m,) = msgs
            i = id_of(m.body)
            deliveries[i].append(m.reconsume_times)
            kind, first = kinds[i], len(deliveries[i]) == 1
            if kind == "raise-always" or (kind == "raise-once" and first):
                raise RuntimeError(f"listener failure for {i}")
            if kind == "later-always" or (kind == "later-once" and first):
                return ConsumeStatus.RECONSUME_LATER
            if kind == "timeout-once" and first:
                blocked.add(i)
                await release.wait()
            if kind == "none-is-success":
                return None
            return ConsumeStatus.CONSUME_SUCCESS

        timeouts = [i for i, k in kinds.items() if k == "timeout-once"]
        expected_retry = sum(expected_backs.get(k, 0) for k in kinds.values())
        expected_dlq = sum(1 for k in kinds.values() if k.endswith("-always"))

        def settled() -> bool:
            return all(
                len(deliveries[i]) >= expected_deliveries[k] or k == "timeout-once"
                for i, k in kinds.items()
            )

        await consumer.start()
        try:
            await wait_until(lambda: settled() and len(blocked) == len(timeouts), timeout, "fails")
            # Backdate the blocked consumes past consume_timeout, then run the cleaner.
            expired = int(time.time() * 1000) - (consumer.options.consume_timeout * 60_000 + 1000)
            for mq, pq in consumer.rebalance.process_queue_table.items():
                if mq.topic == topic:
                    for offset in list(pq.consume_started):
                        pq.consume_started[offset] = expired
            await consumer.consume_service.clean_expired_messages()  # type: ignore[attr-defined]
            await wait_until(
                lambda: all(len(deliveries[i]) >= 2 for i in timeouts), timeout, "timed-out retries"
            )
            release.set()
            want = (expected_retry, expected_dlq)
            await wait_until(
                lambda: retry_dlq_counts(broker, group) == want, timeout, "retry and DLQ counts"
            )
            await asyncio.sleep(1.0)  # nothing more may arrive
        finally:
            release.set()
            await consumer.shutdown()
        retry_count, dlq_count = retry_dlq_counts(broker, group)
    by_kind: Counter[str] = Counter()
    expected_by_kind: Counter[str] = Counter()
    times_ok = True
    for i, kind in kinds.items():
        by_kind[kind] += len(deliveries[i])
        expected_by_kind[kind] += expected_deliveries[kind]
        times_ok = times_ok and deliveries[i] == list(range(len(deliveries[i])))
    return ListenerFailureResult(
        total=total,
        max_reconsume_times=max_reconsume_times,
        deliveries_by_kind=dict(sorted(by_kind.items())),
        expected_deliveries_by_kind=dict(sorted(expected_by_kind.items())),
        retry_topic_messages=retry_count,
        expected_retry_topic_messages=expected_retry,
        dlq_messages=dlq_count,
        expected_dlq_messages=expected_dlq,
        reconsume_times_ok=times_ok,
        duration_s=time.monotonic() - begin,
    )


# ----------------------------------------------------------------------------- memory


@attrs.frozen
class MemoryResult(Result):
    backlog: int
    message_size: int
    slow_s: float
    consumed_while_slow: int
    rss_at_start_mb: float
    rss_peak_while_slow_mb: float
    rss_peak_mb: float
    ceiling_mb: float
    drain_s: float
    delivered: int
    distinct: int
    duplicates: int
    lost: int
    duration_s: float


async def memory_scenario(
    workdir: Path,
    *,
    backlog: int = 50_000,
    size: int = 1024,
    slow_s: float = 5.0,
    queues: int = 4,
    ceiling_mb: float = 160.0,
    timeout: float = 300.0,
) -> MemoryResult:
    """A slow listener facing a large backlog: the consumer's memory stays bounded.

    The consumer runs in a child process with the default flow control (1000
    messages and 100 MiB cached per queue). It is slow for ``slow_s`` seconds while
    its resident memory is sampled, then drains the whole backlog at full speed;
    the peak (VmHWM) covers both phases.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    topic, group = "Backlog", "g-backlog"
    flag = workdir / "slow"
    async with EmbeddedBroker(workdir / "broker", namesrv_port=0, broker_port=0) as broker:
        await create_topic(broker, topic, queues)
        await produce_ids(broker.namesrv_addr, topic, range(backlog), size=size, batch=256)
        flag.touch()
        child = ConsumerProcess(
            workdir,
            "memory-consumer",
            namesrv_addr=broker.namesrv_addr,
            group=group,
            topic=topic,
            total=backlog,
            record=False,
            slow_flag=flag,
            slow_sleep=0.05,
        )
        await child.start()
        try:
            start_rss = rss_kb(child.pid)
            peak_slow = start_rss
            slow_until = time.monotonic() + slow_s
            while time.monotonic() < slow_until:
                peak_slow = max(peak_slow, rss_kb(child.pid))
                await asyncio.sleep(0.1)
            consumed_slow = child.stats().distinct
            flag.unlink()
            drain = await wait_until(
                lambda: child.stats().distinct >= backlog, timeout, "the backlog to drain", 0.2
            )
            peak = rss_kb(child.pid, "VmHWM")
        finally:
            await child.stop()
        stats = child.stats()
    return MemoryResult(
        backlog=backlog,
        message_size=size,
        slow_s=slow_s,
        consumed_while_slow=consumed_slow,
        rss_at_start_mb=start_rss / 1024,
        rss_peak_while_slow_mb=peak_slow / 1024,
        rss_peak_mb=peak / 1024,
        ceiling_mb=ceiling_mb,
        drain_s=drain,
        delivered=stats.delivered,
        distinct=stats.distinct,
        duplicates=stats.duplicates,
        lost=backlog - stats.distinct,
        duration_s=time.monotonic() - begin,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "consumer":
        sys.exit("usage: test_faults_support.py consumer '<json spec>'")
    asyncio.run(_consumer_child(json.loads(sys.argv[2])))
