"""What a batch in flight on a group-commit sink costs the cyclic garbage collector.

A sink keeps its whole window (thousands of batches) in flight, and each full
collection walks every object those batches hold up. No broker and no Spark: a
concurrent consume service with a stub host over the kernel's ListenerInvoker, whose
deliver defers chunks on the futures the listener returns (a sink's).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from rmqk.engine.listener import ListenerInvoker
from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.plugins.consume.backlog import Chunk
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.spi.consume import ConsumeConcurrentlyContext

pytestmark = pytest.mark.timeout(60)

MQ = MessageQueue("T", "broker-a", 0)
BATCHES = 2_000
# Today two objects per batch (the sink's Pending, which is the batch's future, and the
# kernel's entry for it) beyond the chunk, its context and its message list; before, a
# closure, its cells, partials and context copies made 13.
MAX_TRACKED_PER_BATCH = 4


class CountingSink(GroupCommitSink):
    sink_name: ClassVar[str] = "test-counting"

    def __init__(self) -> None:
        super().__init__(FlushTriggers(rows=10**9, seconds=3600.0), target="memory")
        self.rows = 0

    def write_batch(self, flush: Flush) -> int:
        self.rows += flush.rows
        return flush.rows


class QueueStub:
    """The one attribute of a process queue an acknowledgement here reads."""

    dropped = False


class Stats:
    def consume_rt(self, topic: str, ms: float) -> None:
        pass

    def add_consume_rt(self, topic: str, total_ms: float, calls: int) -> None:
        pass

    def consume_ok(self, topic: str, n: int) -> None:
        pass

    def consume_failed(self, topic: str, n: int) -> None:
        pass


def stub_host(acknowledged: list[MessageExt], invoker: ListenerInvoker) -> Any:
    def acknowledge(mq: MessageQueue, pq: Any, msgs: Sequence[MessageExt]) -> int:
        acknowledged.extend(msgs)
        return 0

    return SimpleNamespace(
        options=ConsumerOptions(),
        retry_topic="%RETRY%g",
        group="g",
        stats=Stats(),
        acknowledge=acknowledge,
        listener=invoker,
        deliver=invoker.deliver,
    )


async def defer(service: ConcurrentConsumeService, r: Chunk, ctx: Any) -> None:
    """What the service's async worker does with a chunk whose listener defers it."""
    r.ctx = ctx
    assert await service.host.deliver(r.mq, r.msgs, ctx, service._on_settled, r) is None
    service._deferred += 1


async def test_a_batch_deferred_on_a_sink_adds_few_objects_for_the_gc() -> None:
    acknowledged: list[MessageExt] = []
    sink = CountingSink()

    async def listener(msgs: list[MessageExt], ctx: Any) -> asyncio.Future[Any]:
        return sink.submit(ctx.queue, msgs)

    invoker = ListenerInvoker(listener, "g", 1)
    service = ConcurrentConsumeService(stub_host(acknowledged, invoker), {})
    await sink.start()
    pq = QueueStub()
    chunks = [
        Chunk(
            [MessageExt(topic="T", body=b"x", queue_offset=i * 32 + j) for j in range(32)],
            pq,  # type: ignore[arg-type]
            MQ,
        )
        for i in range(BATCHES)
    ]
    contexts = [ConsumeConcurrentlyContext(MQ) for _ in chunks]
    gc.collect()
    before = len(gc.get_objects())
    for r, ctx in zip(chunks, contexts, strict=True):
        await defer(service, r, ctx)
    per_batch = (len(gc.get_objects()) - before) / BATCHES
    assert per_batch <= MAX_TRACKED_PER_BATCH, per_batch
    assert not acknowledged  # nothing is acknowledged before its flush is written
    await sink.close()  # the last flush writes everything buffered
    for _ in range(3):
        await asyncio.sleep(0)
    assert sink.rows == BATCHES * 32
    assert len(acknowledged) == BATCHES * 32
    assert service._deferred == 0 and not invoker._pending


async def test_one_future_returned_for_several_chunks_settles_each() -> None:
    acknowledged: list[MessageExt] = []
    shared: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def listener(msgs: list[MessageExt]) -> asyncio.Future[None]:
        return shared

    invoker = ListenerInvoker(listener, "g", 1)
    service = ConcurrentConsumeService(stub_host(acknowledged, invoker), {})
    pq = QueueStub()
    chunks = [
        Chunk([MessageExt(topic="T", body=b"x", queue_offset=i)], pq, MQ)  # type: ignore[arg-type]
        for i in range(3)
    ]
    for r in chunks:
        await defer(service, r, None)
    assert service._deferred == 3
    await asyncio.sleep(0)
    assert not acknowledged
    shared.set_result(None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert sorted(m.queue_offset for m in acknowledged) == [0, 1, 2]
    assert service._deferred == 0 and not invoker._pending


async def test_cancelling_a_pending_batch_withdraws_it_at_once() -> None:
    sink = CountingSink()
    await sink.start()
    kept = sink.submit(MQ, [MessageExt(topic="T", body=b"ab", queue_offset=0)])
    dropped = sink.submit(MQ, [MessageExt(topic="T", body=b"abc", queue_offset=1)])
    assert dropped.cancel()
    # Out of the buffer before any callback has had a loop turn.
    assert (sink._rows, sink._bytes) == (1, 2)
    assert not dropped.cancel()  # a second cancel changes nothing
    await sink.close()
    assert kept.done() and not kept.cancelled()
    assert sink.rows == 1
