"""Routes with absurd queue counts (issue 19, item 11): refused, with one error.

A frame-reading :class:`FaultProxy` stands in front of the embedded broker's
name server and answers every route request itself: the real route plus a
broker claiming three million read queues (which used to block a consumer for
46 s at 690 MB). The consumer must start at once on the real queues, consume,
and say once, not at every refresh, what it refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from engine_support import admin_transport, create_topic, held_queues, produce, wait_for
from faultproxy import FaultProxy

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model import BrokerData, QueueData, TopicRouteData
from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.remoting.namesrv import encode_topic_route
from rmqk.plugins.remoting.route_bounds import MAX_ROUTE_QUEUES, bound_route
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

TOPIC = "Wide"
REFUSED = "refused the queues of"


def hostile(route: TopicRouteData, read_queues: int) -> TopicRouteData:
    return attrs.evolve(
        route,
        queue_datas=(*route.queue_datas, QueueData("broker-huge", read_queues, 8)),
        broker_datas=(*route.broker_datas, BrokerData("c", "broker-huge", {0: "127.0.0.1:9"})),
    )


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        await create_topic(b, TOPIC, 2)
        yield b


async def test_a_route_with_millions_of_queues_is_refused_once(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    transport = await admin_transport(broker.namesrv_addr)
    try:
        real = await transport.get_route(TOPIC)
    finally:
        await transport.close()
    assert real is not None
    await produce(broker.namesrv_addr, TOPIC, (f"w{i}".encode() for i in range(20)))

    async with FaultProxy(broker.namesrv_addr, frames=True) as namesrv:
        namesrv.answer(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            ResponseCode.SUCCESS,
            body=encode_topic_route(hostile(real, 3_000_000)),
        )
        got: list[bytes] = []
        consumer = AsyncPushConsumer(
            "g-wide",
            namesrv_addr=namesrv.addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            poll_name_server_interval=100,
        )
        consumer.subscribe(TOPIC)

        @consumer.register_listener
        def handle(messages: list[MessageExt]) -> None:
            got.extend(m.body for m in messages)

        caplog.set_level(logging.ERROR)
        begin = time.monotonic()
        await consumer.start()
        try:
            await wait_for(lambda: len(got) >= 20, 20, "every message of the real queues")
            elapsed = time.monotonic() - begin
            refreshes = namesrv.request_count(RequestCode.GET_ROUTEINFO_BY_TOPIC)
            await asyncio.sleep(1.0)  # about ten more refreshes of the same route
            assert namesrv.request_count(RequestCode.GET_ROUTEINFO_BY_TOPIC) > refreshes + 3
            held = held_queues(consumer, TOPIC)
        finally:
            await consumer.shutdown()

    assert elapsed < 10, elapsed
    assert sorted(got) == sorted(f"w{i}".encode() for i in range(20))
    assert {mq.broker_name for mq in held} == {broker.broker_name}
    errors = [r.getMessage() for r in caplog.records if REFUSED in r.getMessage()]
    # The proxy answers the group's retry topic with the same route: one error each.
    assert len([e for e in errors if e.startswith(f"route of topic {TOPIC}:")]) == 1, errors
    assert len(errors) == 2, errors
    assert "broker-huge (3000000 read, 8 write)" in errors[0]
    assert f"at most {MAX_ROUTE_QUEUES} queues" in errors[0]


def test_the_bound_keeps_brokers_in_name_order_and_refuses_the_rest() -> None:
    datas = (
        QueueData("b", 40_000, 40_000),
        QueueData("a", 20_000, 16),
        QueueData("c", 10_000, 10_000),
        QueueData("d", 5_535, 1),
        QueueData("huge", 3_000_000, 8),
    )
    route = TopicRouteData(queue_datas=datas, broker_datas=())
    bounded = bound_route(route)
    # a (20,000) + b (40,000) + d (5,535) = 65,535; c would go past it.
    assert [q.broker_name for q in bounded.route.queue_datas] == ["b", "a", "d"]
    assert [q.broker_name for q in bounded.refused] == ["c", "huge"]
    small = TopicRouteData(queue_datas=datas[:2], broker_datas=())
    assert bound_route(small).route is small and bound_route(small).refused == ()
