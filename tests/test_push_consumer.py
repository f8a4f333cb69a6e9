"""The push consumer end to end, over real TCP against the embedded broker.

Each test checks message counts: produced = consumed, with duplicates only where
at-least-once allows them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from engine_support import (
    FAST_RETRY_MARKS,
    committed_offsets,
    create_topic,
    held_queues,
    max_offsets,
    produce,
    push_consumer,
    wait_for,
)

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.rebalance import parse_consume_timestamp
from rmqk.model import ConsumeStatus, MessageQueue
from rmqk.model.errors import ClientError, ConfigError
from rmqk.model.message import Message, MessageExt

pytestmark = FAST_RETRY_MARKS


consumer = push_consumer


async def collecting(
    broker: Any, group: str, topic: str, into: list[bytes], **options: Any
) -> AsyncPushConsumer:
    """A started consumer of ``topic`` that appends every body it receives to ``into``."""
    c = consumer(broker, group, **options)
    c.subscribe(topic)
    c.register_listener(lambda msgs: into.extend(m.body for m in msgs))
    await c.start()
    return c


async def test_consumes_everything_once_and_commits_the_end(broker: Any) -> None:
    await create_topic(broker, "Orders", 4)
    total = 100_000
    await produce(
        broker.namesrv_addr, "Orders", (f"order-{i}".encode() for i in range(total)), batch=200
    )
    seen: Counter[bytes] = Counter()

    c = consumer(broker, "g-all", consume_message_batch_max_size=32)
    c.subscribe("Orders", "*")

    @c.register_listener
    def handle(messages: list[MessageExt]) -> None:
        for m in messages:
            seen[m.body] += 1

    await c.start()
    try:
        await wait_for(lambda: len(seen) >= total, 120, f"{total} messages")
        await asyncio.sleep(0.5)
    finally:
        await c.shutdown()
    assert len(seen) == total
    dups = {body: n for body, n in seen.items() if n > 1}
    assert dups == {}, f"{len(dups)} messages delivered twice in a steady state"
    # shutdown persisted the offsets: the group's committed offset is the end of each queue
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-all", "Orders", 4
    )
    assert committed == await max_offsets(broker.namesrv_addr, broker.broker_addr, "Orders", 4)


async def test_restart_resumes_from_committed_offsets(broker: Any) -> None:
    await create_topic(broker, "Resume", 4)
    await produce(broker.namesrv_addr, "Resume", (f"a{i}".encode() for i in range(400)))
    first: list[bytes] = []
    c1 = await collecting(broker, "g-resume", "Resume", first)
    await wait_for(lambda: len(set(first)) >= 400, 30, "first 400")
    await c1.shutdown()

    await produce(broker.namesrv_addr, "Resume", (f"b{i}".encode() for i in range(300)))
    second: list[bytes] = []
    c2 = await collecting(broker, "g-resume", "Resume", second)
    try:
        await wait_for(lambda: len(set(second)) >= 300, 30, "300 new messages")
        await asyncio.sleep(0.5)
    finally:
        await c2.shutdown()
    assert sorted(second) == sorted(f"b{i}".encode() for i in range(300))


async def test_consume_from_last_offset_on_a_young_queue_starts_at_zero_like_apache(
    broker: Any,
) -> None:
    # Apache's broker answers a new group's offset query with 0 (not QUERY_NOT_FOUND)
    # while the queue still starts at 0 and is in memory, so LAST_OFFSET only skips
    # history on queues whose head has been deleted. The client-side rule for the
    # not-found case is unit-tested in test_rebalance_offsets.py.
    await create_topic(broker, "Last", 2)
    await produce(broker.namesrv_addr, "Last", (f"old{i}".encode() for i in range(50)))
    got: list[bytes] = []
    c = await collecting(
        broker, "g-last", "Last", got, consume_from_where="CONSUME_FROM_LAST_OFFSET"
    )
    try:
        await wait_for(lambda: len(got) >= 50, 15, "the history")
        await produce(broker.namesrv_addr, "Last", (f"new{i}".encode() for i in range(20)))
        await wait_for(lambda: len(got) >= 70, 15, "new messages")
        await asyncio.sleep(0.3)
    finally:
        await c.shutdown()
    expected = [f"old{i}".encode() for i in range(50)] + [f"new{i}".encode() for i in range(20)]
    assert sorted(got) == sorted(expected)


async def test_timestamp_search_finds_the_first_message_stored_after_it(broker: Any) -> None:
    # CONSUME_FROM_TIMESTAMP starts a queue the broker has no offset for at the offset
    # this lookup returns (the rule itself is unit-tested in test_rebalance_offsets.py).
    await create_topic(broker, "Stamp", 1)
    await produce(broker.namesrv_addr, "Stamp", (b"before" for _ in range(30)))
    # Like Apache, the broker answers with the message nearest in time, so put the
    # (whole-second) timestamp 0.3 s before the second batch and over 1 s after the first.
    boundary = int(time.time()) + 2
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(boundary))
    await asyncio.sleep(boundary + 0.3 - time.time())
    await produce(broker.namesrv_addr, "Stamp", (f"after{i}".encode() for i in range(30)))
    c = consumer(
        broker, "g-stamp", consume_from_where="CONSUME_FROM_TIMESTAMP", consume_timestamp=stamp
    )
    c.subscribe("Stamp")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        offset = await c.search_offset(
            MessageQueue("Stamp", broker.broker_name, 0), parse_consume_timestamp(stamp)
        )
    finally:
        await c.shutdown()
    assert offset == 30


@pytest.mark.parametrize(
    ("strategy", "three", "two"),
    [
        ("AVG", [[0, 1, 2], [3, 4, 5], [6, 7]], [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("AVG_BY_CIRCLE", [[0, 3, 6], [1, 4, 7], [2, 5]], [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ],
)
async def test_group_members_split_queues_as_the_strategy_says_and_converge_on_leave(
    broker: Any, strategy: str, three: list[list[int]], two: list[list[int]]
) -> None:
    await create_topic(broker, "Split", 8)
    group = f"g-split-{strategy.lower()}"
    members = [consumer(broker, group, allocate_message_queue_strategy=strategy) for _ in range(3)]
    for m in members:
        m.subscribe("Split")
        m.register_listener(lambda msgs: None)
        await m.start()

    def assignment(group_members: list[AsyncPushConsumer]) -> list[list[int]]:
        # Strategies see client ids sorted, so compare in that order.
        ordered = sorted(group_members, key=lambda m: m.client_id)
        return [sorted(q.queue_id for q in held_queues(m, "Split")) for m in ordered]

    try:
        await wait_for(lambda: assignment(members) == three, 20, "3 members to split 8 queues")
        leaving = members.pop()
        await leaving.shutdown()
        # The periodic rebalance runs every 20 s: converging within 5 s takes the
        # broker's NOTIFY_CONSUMER_IDS_CHANGED.
        await wait_for(lambda: assignment(members) == two, 5, "2 members to take over")
    finally:
        for m in members:
            await m.shutdown()


async def test_failed_messages_retry_with_growing_reconsume_times_then_dlq(broker: Any) -> None:
    await create_topic(broker, "Retry", 1)
    await produce(broker.namesrv_addr, "Retry", [b"ok", b"raise", b"later"])
    deliveries: list[tuple[bytes, int, str]] = []

    c = consumer(broker, "g-retry", max_reconsume_times=2)
    c.subscribe("Retry")

    @c.register_listener
    def handle(messages: list[MessageExt]) -> ConsumeStatus:
        for m in messages:
            deliveries.append((m.body, m.reconsume_times, m.topic))
        body = messages[0].body
        if body == b"raise":
            raise RuntimeError("listener failure")
        if body == b"later":
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    await c.start()
    try:
        await wait_for(
            lambda: sum(1 for d in deliveries if d[0] != b"ok") >= 6,
            30,
            "3 deliveries of each failure",
        )
        await asyncio.sleep(1.0)  # nothing more may arrive: the next step is the DLQ
    finally:
        await c.shutdown()
    for body in (b"raise", b"later"):
        seen = [(times, topic) for b, times, topic in deliveries if b == body]
        assert seen == [(0, "Retry"), (1, "Retry"), (2, "Retry")], body
    assert [d for d in deliveries if d[0] == b"ok"] == [(b"ok", 0, "Retry")]
    dlq = await max_offsets(broker.namesrv_addr, broker.broker_addr, "%DLQ%g-retry", 1)
    assert dlq == {0: 2}


async def test_slow_listener_keeps_process_queue_within_thresholds(broker: Any) -> None:
    await create_topic(broker, "Slow", 1)
    await produce(broker.namesrv_addr, "Slow", (b"x" * 100 for _ in range(3000)), batch=250)
    threshold, batch = 100, 16
    consumed = 0

    c = consumer(
        broker,
        "g-slow",
        pull_threshold_for_queue=threshold,
        pull_batch_size=batch,
        consume_thread_min=2,
        consume_thread_max=2,
    )
    c.subscribe("Slow")

    @c.register_listener
    async def handle(messages: list[MessageExt]) -> None:
        nonlocal consumed
        await asyncio.sleep(0.002)
        consumed += len(messages)

    peak = 0
    await c.start()
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and consumed < 3000:
            for pq in c.rebalance.process_queue_table.values():
                peak = max(peak, pq.msg_count)
            await asyncio.sleep(0.01)
    finally:
        await c.shutdown()
    assert consumed > 0
    # The count is checked before each pull, so one pull batch may land on top of it.
    assert threshold < peak <= threshold + batch, peak


async def test_start_validation(broker: Any) -> None:
    with pytest.raises(ConfigError, match="pull_batch_size"):
        AsyncPushConsumer("g", namesrv_addr=broker.namesrv_addr, pull_batch_size=5000)
    with pytest.raises(ConfigError, match="group"):
        AsyncPushConsumer("bad group!", namesrv_addr=broker.namesrv_addr)
    c = consumer(broker, "g-nolistener")
    c.subscribe("T")
    with pytest.raises(ClientError, match="messageListener is null"):
        await c.start()
    with pytest.raises(ClientError, match="maybe started once"):
        await c.start()


async def test_pause_stops_delivery_and_resume_restarts_it(broker: Any) -> None:
    await create_topic(broker, "Pause", 2)
    got: list[bytes] = []
    c = await collecting(broker, "g-pause", "Pause", got)
    try:
        await wait_for(lambda: len(held_queues(c, "Pause")) == 2, 15, "queues assigned")
        await produce(broker.namesrv_addr, "Pause", (f"a{i}".encode() for i in range(20)))
        await wait_for(lambda: len(got) >= 20, 15, "first messages")
        c.suspend()
        # Each queue may have one long poll held by the broker; one message per queue
        # answers them, after which no pull may be sent while paused.
        async with AsyncProducer("flush", namesrv_addr=broker.namesrv_addr) as p:
            for q in range(2):
                mq = MessageQueue("Pause", broker.broker_name, q)
                await p.send(Message("Pause", f"flush{q}".encode()), queue=mq)
        await wait_for(lambda: len(got) >= 22, 15, "the held pulls to return")
        await asyncio.sleep(1.5)
        before = len(got)
        await produce(broker.namesrv_addr, "Pause", (f"b{i}".encode() for i in range(20)))
        await asyncio.sleep(2.5)
        assert len(got) == before, "a paused consumer pulled"
        c.resume()
        await wait_for(lambda: len(got) >= 42, 15, "messages after resume")
    finally:
        await c.shutdown()
    expected = [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(20)]
    assert sorted(got) == sorted([*expected, b"flush0", b"flush1"])


async def test_a_consumer_paused_before_start_registers_but_takes_no_queue_until_resumed(
    broker: Any,
) -> None:
    """What a worker of ``processes = N`` relies on: register first, rebalance on the go."""
    await create_topic(broker, "Held", 4)
    await produce(broker.namesrv_addr, "Held", (f"h{i}".encode() for i in range(40)))
    got: list[bytes] = []
    first = await collecting(broker, "g-held", "Held", got)
    late = consumer(broker, "g-held")
    late.subscribe("Held")
    late.register_listener(lambda msgs: got.extend(m.body for m in msgs))
    late.pause()
    await late.start()
    try:
        # Its start answered its heartbeat: the broker counts it in the group at once.
        ids = await late.client.find_consumer_id_list("Held", "g-held")
        assert ids is not None and late.client.client_id in ids
        # The member started first sees two members and keeps half the queues; the
        # paused one's rebalances (its first, the broker's notification) take none.
        first.client.rebalance_immediately()
        await wait_for(lambda: len(held_queues(first, "Held")) == 2, 15, "the first's half")
        await asyncio.sleep(1)
        assert held_queues(late, "Held") == set()
        late.resume()
        await wait_for(lambda: len(held_queues(late, "Held")) == 2, 15, "queues on resume")
        await wait_for(lambda: len(set(got)) == 40, 15, "every message")
    finally:
        await late.shutdown()
        await first.shutdown()
