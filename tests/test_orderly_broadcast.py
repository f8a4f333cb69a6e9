"""Orderly and broadcasting consumption end to end over the embedded broker."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, held_queues, produce, wait_for

import rmqk.engine.rebalance as rebalance_module
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.model import ConsumeOrderlyStatus
from rmqk.model.message import Message, MessageExt

pytestmark = pytest.mark.timeout(180)


def orderly(broker: Any, group: str, **options: Any) -> AsyncPushConsumer:
    return AsyncPushConsumer(
        group,
        namesrv_addr=broker.namesrv_addr,
        consume_service="orderly",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **options,
    )


class ExclusivityMonitor:
    """Fails the test if two members are ever inside the listener for one queue at once."""

    def __init__(self) -> None:
        self.inside: dict[tuple[str, int], str] = {}
        self.violations: list[str] = []
        self.lock = threading.Lock()

    def enter(self, member: str, key: tuple[str, int]) -> None:
        with self.lock:
            other = self.inside.get(key)
            if other is not None and other != member:
                self.violations.append(f"{key} consumed by {member} while {other} was inside")
            self.inside[key] = member

    def leave(self, member: str, key: tuple[str, int]) -> None:
        with self.lock:
            if self.inside.get(key) == member:
                del self.inside[key]


async def test_orderly_group_keeps_per_key_order_while_members_join_and_leave(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Java's 20 s periodic rebalance and 20 s delayed unlock, shortened so the run is short.
    monkeypatch.setattr(rebalance_module, "REBALANCE_WAIT_INTERVAL_MS", 1000)
    monkeypatch.setattr(rebalance_module, "UNLOCK_DELAY_MS", 1000)
    await create_topic(broker, "Ordered", 6)
    keys = [f"key-{k}" for k in range(12)]
    per_key = 60
    monitor = ExclusivityMonitor()
    delivered: dict[str, list[int]] = defaultdict(list)
    order_errors: list[str] = []

    def member(name: str) -> AsyncPushConsumer:
        c = orderly(broker, "g-ordered", consume_message_batch_max_size=4)
        c.subscribe("Ordered")

        @c.register_listener
        async def handle(messages: list[MessageExt]) -> None:
            key = (messages[0].topic, messages[0].queue_id)
            monitor.enter(name, key)
            try:
                await asyncio.sleep(0.002)
                for m in messages:
                    k, seq = m.keys or "", int(m.body)
                    seen = delivered[k]
                    # Strict order: seq may repeat after a rebalance (at-least-once) but
                    # is never delivered before seq - 1.
                    if seq > 0 and (seq - 1) not in seen:
                        order_errors.append(f"{k}: {seq} before {seq - 1}")
                    seen.append(seq)
            finally:
                monitor.leave(name, key)

        return c

    async def send_all() -> None:
        async with AsyncProducer("orderly-producer", namesrv_addr=broker.namesrv_addr) as p:
            for seq in range(per_key):
                for k in keys:
                    await p.send_orderly(Message("Ordered", str(seq).encode(), keys=k), k)
                await asyncio.sleep(0.01)

    a, b, c = member("a"), member("b"), member("c")
    await a.start()
    sender = asyncio.get_running_loop().create_task(send_all())
    try:
        await asyncio.sleep(0.5)
        await b.start()
        await asyncio.sleep(1.0)
        await c.start()
        await asyncio.sleep(1.0)
        await a.shutdown()  # leaves mid-run
        await sender
        await wait_for(
            lambda: all(set(delivered[k]) == set(range(per_key)) for k in keys),
            60,
            "every key's messages",
        )
    finally:
        for m in (a, b, c):
            await m.shutdown()
    assert monitor.violations == []
    assert order_errors == []
    for k in keys:
        first_seen = list(dict.fromkeys(delivered[k]))
        assert first_seen == list(range(per_key)), k


async def test_failing_orderly_listener_suspends_and_retries_the_same_message_first(
    broker: Any,
) -> None:
    await create_topic(broker, "OrderedRetry", 1)
    await produce(broker.namesrv_addr, "OrderedRetry", (str(i).encode() for i in range(10)))
    seen: list[tuple[int, int]] = []
    failures = {5: 2}

    c = orderly(broker, "g-ordered-retry", suspend_current_queue_time_millis=50)
    c.subscribe("OrderedRetry")

    @c.register_listener
    def handle(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        n = int(messages[0].body)
        seen.append((n, messages[0].reconsume_times))
        if failures.get(n, 0) > 0:
            failures[n] -= 1
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    await c.start()
    try:
        await wait_for(lambda: len(seen) >= 12, 20, "10 messages and 2 retries")
        await asyncio.sleep(0.3)
    finally:
        await c.shutdown()
    assert seen == [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 0),
        (5, 0),
        (5, 1),
        (5, 2),
        (6, 0),
        (7, 0),
        (8, 0),
        (9, 0),
    ]


async def test_orderly_consumer_locks_queues_on_the_broker(broker: Any) -> None:
    await create_topic(broker, "Locked", 2)
    c = orderly(broker, "g-locked")
    c.subscribe("Locked")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        await wait_for(lambda: len(held_queues(c, "Locked")) == 2, 15, "queues taken")
        assert all(pq.locked for pq in c.rebalance.process_queue_table.values())
        # Another client cannot lock what this one holds.
        other = orderly(broker, "g-locked")
        other.subscribe("Locked")
        other.register_listener(lambda msgs: None)
        await other.start()
        try:
            mq = next(iter(held_queues(c, "Locked")))
            assert await other.rebalance.lock(mq) is False
        finally:
            await other.shutdown()
    finally:
        await c.shutdown()


async def test_broadcasting_every_member_gets_everything_and_resumes_locally(
    broker: Any, tmp_path: Path
) -> None:
    await create_topic(broker, "Fanout", 4)
    await produce(broker.namesrv_addr, "Fanout", (f"a{i}".encode() for i in range(300)))
    got: dict[str, list[bytes]] = defaultdict(list)

    def member(name: str) -> AsyncPushConsumer:
        c = AsyncPushConsumer(
            "g-fanout",
            namesrv_addr=broker.namesrv_addr,
            message_model="BROADCASTING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            instance_name=name,
            offset_store_options={"dir": str(tmp_path / "offsets")},
        )
        c.subscribe("Fanout")

        @c.register_listener
        def handle(messages: list[MessageExt]) -> None:
            got[name].extend(m.body for m in messages)
            if any(m.body == b"a7" for m in messages):
                raise RuntimeError("broadcast failures are logged and dropped, not retried")

        return c

    names = ["m1", "m2", "m3"]

    async def run_members(names: list[str], each: int, what: str) -> None:
        """Fresh members under ``names`` run until each got ``each`` messages."""
        members = [member(n) for n in names]
        for m in members:
            await m.start()
        try:
            await wait_for(lambda: all(len(got[n]) >= each for n in names), 30, what)
            await asyncio.sleep(0.5)
        finally:
            for m in members:
                await m.shutdown()

    await run_members(names, 300, "300 each")
    for n in names:
        assert sorted(got[n]) == sorted(f"a{i}".encode() for i in range(300)), n
        assert (tmp_path / "offsets").exists()

    await produce(broker.namesrv_addr, "Fanout", (f"b{i}".encode() for i in range(100)))
    got.clear()
    await run_members(names, 100, "100 new each")
    for n in names:
        assert sorted(got[n]) == sorted(f"b{i}".encode() for i in range(100)), n
