"""Load the scenarios share: filling a topic, raw pulls, and a push consumer run to N.

Raw pulls (:func:`raw_pull`) are the ``ceiling``: one pull of 32 in flight per
queue, as the push consumer keeps, with the range reader's headers sent through
``Transport.invoke`` so the response body is never decoded; the count of a
response is ``nextBeginOffset`` minus the offset asked for.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from bench.cluster import queues_of
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.reader import RangeReader, ReaderSettings
from rmqk.model import MessageQueue
from rmqk.model.errors import RmqkError
from rmqk.model.message import Message, MessageExt
from rmqk.plugins.remoting.consumer_calls import pull_command
from rmqk.wire.protocol import ResponseCode

__all__ = [
    "ConsumeRun",
    "FillResult",
    "PullRun",
    "consume_all",
    "fill_topic",
    "raw_pull",
    "unique",
]

MAX_BATCH_BYTES = 1024 * 1024
# What Java's Message constructor always sets (waitStoreMsgOK = true).
_JAVA_WAIT = {"WAIT": "true"}


def unique(prefix: str) -> str:
    """A topic or group name nobody else uses (runs against a shared cluster stay apart)."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@attrs.frozen
class FillResult:
    count: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _body(size: int) -> bytes:
    return (os.urandom(max(size, 1)).hex().encode() * 2)[: max(size, 1)]


async def fill_topic(
    namesrv_addr: str,
    topic: str,
    count: int,
    size: int,
    *,
    batch: int = 64,
    in_flight: int = 8,
    tags: str | None = "bench",
    java_shaped: bool = False,
) -> FillResult:
    """Send ``count`` messages of ``size`` bytes, in batches round robin over the queues.

    ``java_shaped``: one message a send, each with the properties Java's 4.9.8
    producer writes for ``new Message(topic, "TagA", "KEY" + i, body)``: TAGS, KEYS,
    WAIT=true (Java's Message sets it; the broker drops it on store) and UNIQ_KEY
    (added by every producer); the broker adds CLUSTER, the consumer MIN_OFFSET and
    MAX_OFFSET on pull.
    """
    body = _body(size)
    per_batch = max(1, min(batch, MAX_BATCH_BYTES // max(size + 200, 1)))
    if java_shaped:
        per_batch, in_flight = 1, max(in_flight, 64)
    producer = AsyncProducer(unique("bench_fill"), namesrv_addr=namesrv_addr)
    await producer.start()
    try:
        queues = await producer.queues_for(topic)
        sent = 0
        errors: list[BaseException] = []
        slots = asyncio.Semaphore(in_flight)
        pending: set[asyncio.Task[None]] = set()
        qcycle = itertools.cycle(queues)

        async def send(msgs: list[Message], mq: MessageQueue) -> None:
            try:
                if java_shaped:
                    await producer.send(msgs[0], queue=mq, timeout_ms=30_000)
                else:
                    await producer.send_batch(msgs, queue=mq, timeout_ms=30_000)
            except BaseException as exc:
                errors.append(exc)
            finally:
                slots.release()

        started = time.perf_counter()
        while sent < count and not errors:
            n = min(per_batch, count - sent)
            if java_shaped:
                msgs = [Message(topic, body, tags="TagA", keys=f"KEY{sent}", properties=_JAVA_WAIT)]
            else:
                msgs = [Message(topic, body, tags=tags) for _ in range(n)]
            await slots.acquire()
            task = asyncio.create_task(send(msgs, next(qcycle)))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += n
        if pending:
            await asyncio.gather(*pending)
        if errors:
            raise RmqkError(f"filling {topic} failed: {errors[0]}") from errors[0]
        return FillResult(count, time.perf_counter() - started)
    finally:
        await producer.shutdown()


@attrs.frozen
class PullRun:
    count: int
    pulls: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0


async def raw_pull(
    namesrv_addr: str, topic: str, *, batch: int = 32, limit: int | None = None
) -> PullRun:
    """Pull every queue of ``topic`` from its first to its last offset, bodies undecoded.

    The headers are the engine's range reader's (``RangeReader.request``), encoded by
    the ``tcp`` transport (``pull_command``) and sent with ``invoke``, so the body is
    never decoded. ``limit`` stops after about that many messages in all.
    """
    settings = ReaderSettings(
        namesrv_addrs=(namesrv_addr,),
        group=f"bench_ceiling_{os.getpid()}",
        timeout_ms=30_000,
        instance_name="bench-ceiling",
    )
    async with RangeReader.open(settings) as reader:
        transport = reader.client.transport
        queues = await queues_of(transport, topic)
        spans: list[tuple[MessageQueue, str, int, int]] = []
        for mq, addr in queues:
            lo = await reader.min_offset(mq)
            hi = await reader.max_offset(mq)
            spans.append((mq, addr, lo, hi))
        total = sum(hi - lo for _, _, lo, hi in spans)
        share = None if limit is None or total <= limit else limit / total
        counts = [0, 0]

        async def drain(mq: MessageQueue, addr: str, lo: int, hi: int) -> None:
            end = hi if share is None else lo + max(1, int((hi - lo) * share))
            offset = lo
            while offset < end:
                request = pull_command(reader.request(mq, offset, batch))
                response = await transport.invoke(addr, request)
                if response.code != ResponseCode.SUCCESS:
                    raise RmqkError(
                        f"raw pull of {mq} at offset {offset} answered code {response.code} "
                        f"({response.remark})"
                    )
                nxt = int(response.ext_fields["nextBeginOffset"])
                counts[0] += nxt - offset
                counts[1] += 1
                offset = nxt

        started = time.perf_counter()
        await asyncio.gather(*(drain(*span) for span in spans))
        return PullRun(counts[0], counts[1], time.perf_counter() - started)


@attrs.frozen
class ConsumeRun:
    """A push consumer run until it had ``count`` messages."""

    count: int
    elapsed_s: float  # from start() to the last message
    first_s: float  # from start() to the first message

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def steady_rate(self) -> float:
        span = self.elapsed_s - self.first_s
        return (self.count - 1) / span if span > 0 else 0.0


class _Counter:
    """Counts listener deliveries from the loop or from listener threads."""

    def __init__(self, expected: int, loop: asyncio.AbstractEventLoop) -> None:
        self.expected = expected
        self.loop = loop
        self.count = 0
        self.first: float | None = None
        self.last = 0.0
        self.done = asyncio.Event()
        self._lock = threading.Lock()

    def add_threaded(self, n: int) -> None:
        with self._lock:
            self._add(n)

    def _add(self, n: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.count += n
        if self.count >= self.expected and not self.last:
            self.last = now
            if threading.current_thread() is threading.main_thread():
                self.done.set()
            else:
                self.loop.call_soon_threadsafe(self.done.set)

    def add(self, n: int) -> None:
        self._add(n)


def _touch(msgs: list[MessageExt], work: Callable[[MessageExt], Any] | None) -> None:
    for m in msgs:
        if work is None:
            len(m.body)
        else:
            work(m)


def make_listener(kind: str, counter: _Counter, work: Callable[[MessageExt], Any] | None) -> Any:
    """A listener that touches each body (or calls ``work``) and counts the batch."""
    if kind == "async":

        async def on_async(msgs: list[MessageExt]) -> None:
            _touch(msgs, work)
            counter.add(len(msgs))

        return on_async
    if kind == "sync":

        def on_sync(msgs: list[MessageExt]) -> None:
            _touch(msgs, work)
            counter.add_threaded(len(msgs))

        return on_sync
    raise RmqkError(f"listener kind must be sync or async, got {kind!r}")


async def consume_all(
    namesrv_addr: str,
    topic: str,
    expected: int,
    *,
    batch_size: int,
    listener: str,
    timeout: float,
    options: dict[str, Any] | None = None,
    group: str | None = None,
) -> ConsumeRun:
    """Consume ``topic`` from its first offset with a fresh group until ``expected`` arrived."""
    counter = _Counter(expected, asyncio.get_running_loop())
    consumer = AsyncPushConsumer(
        group or unique("bench_consume"),
        namesrv_addr=namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_message_batch_max_size=batch_size,
        **(options or {}),
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(make_listener(listener, counter, None))
    started = time.perf_counter()
    await consumer.start()
    try:
        try:
            await asyncio.wait_for(counter.done.wait(), timeout)
        except TimeoutError:
            raise RmqkError(
                f"consumer got {counter.count} of {expected} messages of {topic} "
                f"within {timeout:.0f} s"
            ) from None
    finally:
        await consumer.shutdown()
    assert counter.first is not None
    return ConsumeRun(counter.count, counter.last - started, counter.first - started)


def variants(batches: Sequence[int], listeners: Sequence[str]) -> list[tuple[int, str]]:
    return [(b, kind) for b in batches for kind in listeners]
