"""Helpers for end-to-end engine tests over the embedded broker (real TCP on loopback)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import pytest

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.model import MessageQueue
from rmqk.model.message import Message
from rmqk.pluginmanager import get_plugin_manager, registries
from rmqk.spi.transport import Transport, TransportConfig

# Short delay levels so retry tests run in seconds (level 3 = first retry).
FAST_DELAY_LEVELS = "100ms 200ms " + " ".join(["300ms"] * 16)
# The marks of a test module whose messages go round the retry topics: quick delay levels.
FAST_RETRY_MARKS = [
    pytest.mark.timeout(120),
    pytest.mark.broker_options(delay_levels=FAST_DELAY_LEVELS),
]


def push_consumer(broker: Any, group: str, **options: Any) -> AsyncPushConsumer:
    """A push consumer of ``broker`` that starts from the first offset unless told otherwise."""
    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return AsyncPushConsumer(group, namesrv_addr=broker.namesrv_addr, **options)


async def admin_transport(namesrv_addr: str) -> Transport:
    transport: Transport = registries().transports.create(
        "tcp",
        TransportConfig(
            namesrv_addrs=(namesrv_addr,),
            client_id="127.0.0.1@test-admin",
            hook=get_plugin_manager().hook,
        ),
    )
    await transport.start()
    return transport


async def create_topic(broker: Any, topic: str, queues: int) -> None:
    transport = await admin_transport(broker.namesrv_addr)
    try:
        await transport.create_topic(broker.broker_addr, topic, queues, queues)
        # The name server learns the topic through the broker's registration.
        for _ in range(100):
            route = await transport.get_route(topic)
            if route is not None and route.queue_datas[0].read_queue_nums == queues:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"topic {topic} never appeared in the name server")
    finally:
        await transport.close()


async def produce(
    namesrv_addr: str,
    topic: str,
    bodies: Iterable[bytes],
    *,
    tags: str | None = None,
    keys: Callable[[int], str] | None = None,
    batch: int = 64,
) -> int:
    sent = 0
    async with AsyncProducer("test-producer", namesrv_addr=namesrv_addr) as producer:
        pending: list[Message] = []
        for i, body in enumerate(bodies):
            pending.append(Message(topic, body, tags=tags, keys=keys(i) if keys else None))
            if len(pending) >= batch:
                await producer.send_batch(pending)
                sent += len(pending)
                pending = []
        if pending:
            await producer.send_batch(pending)
            sent += len(pending)
    return sent


async def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def wait_for_async(
    predicate: Callable[[], Awaitable[bool]], timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def held_queues(consumer: AsyncPushConsumer, topic: str) -> set[MessageQueue]:
    return {
        mq
        for mq, pq in consumer.rebalance.process_queue_table.items()
        if mq.topic == topic and not pq.dropped
    }


async def _broker_name(transport: Transport, topic: str) -> str:
    """The name of the (single) broker serving ``topic``."""
    route = await transport.get_route(topic)
    assert route is not None
    return route.broker_datas[0].broker_name


async def committed_offsets(
    namesrv_addr: str, broker_addr: str, group: str, topic: str, queues: int
) -> dict[int, int | None]:
    transport = await admin_transport(namesrv_addr)
    try:
        broker_name = await _broker_name(transport, topic)
        return {
            q: await transport.query_consumer_offset(
                broker_addr, group, MessageQueue(topic, broker_name, q)
            )
            for q in range(queues)
        }
    finally:
        await transport.close()


async def max_offsets(
    namesrv_addr: str, broker_addr: str, topic: str, queues: int
) -> dict[int, int]:
    transport = await admin_transport(namesrv_addr)
    try:
        broker_name = await _broker_name(transport, topic)
        return {
            q: await transport.get_max_offset(broker_addr, MessageQueue(topic, broker_name, q))
            for q in range(queues)
        }
    finally:
        await transport.close()
