"""Every send mode of the producer to a given queue or through a selector (Java's
``send``/``sendOneway``/``send(..., SendCallback)`` with ``mq`` or ``selector, arg``),
batches to a queue with a timeout, in both the sync facade and the async producer,
over real TCP against the embedded broker. Where a message lands is read back from
the broker's per-queue max offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from engine_support import create_topic, max_offsets

from rmqk.engine.producer import AsyncProducer, select_by_hash
from rmqk.engine.sync import Producer
from rmqk.model import MessageQueue, SendStatus
from rmqk.model.errors import ClientError
from rmqk.model.message import Message

pytestmark = pytest.mark.timeout(60)


def last_queue(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    assert arg == "the-arg"  # the selector gets the send's arg
    return queues[-1]


async def _wait_offsets(broker: Any, topic: str, expected: dict[int, int]) -> None:
    # Oneway sends are not answered: wait until the broker has stored them.
    for _ in range(200):
        if await max_offsets(broker.namesrv_addr, broker.broker_addr, topic, 4) == expected:
            return
        await asyncio.sleep(0.02)
    got = await max_offsets(broker.namesrv_addr, broker.broker_addr, topic, 4)
    assert got == expected


def test_sync_producer_sends_to_a_queue_and_through_a_selector_in_every_mode(
    broker_thread: Any,
) -> None:
    asyncio.run(create_topic(broker_thread, "Targets", 4))
    with Producer("p-targets-sync", namesrv_addr=broker_thread.namesrv_addr) as p:
        queues = p.queues_for("Targets")
        q1 = queues[1]
        assert p.send_async(Message("Targets", b"a"), queue=q1).result(10).queue == q1
        r = p.send_async(
            Message("Targets", b"b"), selector=last_queue, arg="the-arg", timeout_ms=5000
        ).result(10)
        assert r.queue.queue_id == 3
        p.send_oneway(Message("Targets", b"c"), queue=q1)
        p.send_oneway(Message("Targets", b"d"), selector=last_queue, arg="the-arg")
        batch = p.send_batch(
            [Message("Targets", b"e1"), Message("Targets", b"e2")], queue=queues[2], timeout_ms=5000
        )
        assert batch.status is SendStatus.SEND_OK and batch.queue == queues[2]
        batch = p.send_batch_async([Message("Targets", b"f1")], queue=queues[0]).result(10)
        assert batch.queue == queues[0]
        batch = p.send_batch_async([Message("Targets", b"g1")], timeout_ms=5000).result(10)
        assert batch.status is SendStatus.SEND_OK
        ordered = p.send_orderly(Message("Targets", b"h"), "key-1", timeout_ms=5000)
        assert ordered.queue == select_by_hash(queues, Message("Targets", b"x"), "key-1")
        # Refused at the call, not later in the future.
        with pytest.raises(ClientError, match="not both"):
            p.send_async(Message("Targets", b"x"), queue=q1, selector=last_queue)
        with pytest.raises(ClientError, match="needs selector"):
            p.send_oneway(Message("Targets", b"x"), arg="the-arg")
    got = asyncio.run(
        max_offsets(broker_thread.namesrv_addr, broker_thread.broker_addr, "Targets", 4)
    )
    # a, c on queue 1; b, d on queue 3; e1, e2 on queue 2; f1 on queue 0; g1 and h somewhere.
    assert got[1] >= 2 and got[3] >= 2 and got[2] >= 2 and got[0] >= 1
    assert sum(got.values()) == 9


async def test_async_producer_oneway_and_batch_targets(broker: Any) -> None:
    await create_topic(broker, "TargetsA", 4)
    async with AsyncProducer("p-targets-async", namesrv_addr=broker.namesrv_addr) as p:
        queues = await p.queues_for("TargetsA")
        await p.send_oneway(Message("TargetsA", b"a"), queue=queues[1])
        await p.send_oneway(Message("TargetsA", b"b"), selector=last_queue, arg="the-arg")
        await _wait_offsets(broker, "TargetsA", {0: 0, 1: 1, 2: 0, 3: 1})
        batch = [Message("TargetsA", b"c1"), Message("TargetsA", b"c2")]
        r = await p.send_batch_async(batch, queue=queues[2], timeout_ms=5000)
        assert r.queue == queues[2] and r.msg_id.count(",") == 1
        await _wait_offsets(broker, "TargetsA", {0: 0, 1: 1, 2: 2, 3: 1})
        with pytest.raises(ClientError, match="not both"):
            await p.send_oneway(Message("TargetsA", b"x"), queue=queues[0], selector=last_queue)
        with pytest.raises(ClientError, match="needs selector"):
            await p.send_async(Message("TargetsA", b"x"), arg=1)
