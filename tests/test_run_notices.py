"""What `rmqk run` says while things are not well: an unreachable name server, said once
with its address and error (and its return), and flow control rate-limited as Java does
and shown in the summary line instead (issue 15 #12, #15)."""

from __future__ import annotations

import asyncio
import io
import logging
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from engine_support import wait_for

from rmqk.app.summary_line import SummaryLine
from rmqk.console.progress import snapshot
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.pull import FlowControl
from rmqk.model import MessageQueue

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _summary(consumer: Any) -> SummaryLine:
    composed = SimpleNamespace(spec=SimpleNamespace(name="orders"), consumer=consumer)
    return SummaryLine([composed], io.StringIO())


async def test_unreachable_name_server_is_said_once_then_its_return(
    broker_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rmqk")
    addr = f"127.0.0.1:{_free_port()}"
    consumer = AsyncPushConsumer("g-unreachable", namesrv_addr=addr)
    consumer.subscribe("Unreachable", "*")

    async def listener(messages: Any, context: Any) -> None:
        return None

    consumer.register_listener(listener)
    await consumer.start()
    try:
        # Routes are asked for again and again (the retry timer, every rebalance).
        for _ in range(5):
            await consumer.client.update_all_routes()
            await consumer.client.do_rebalance()
        said = _warnings(caplog)
        assert len(said) == 1, said
        assert said[0].startswith(f"name server {addr} unreachable: cannot connect to {addr}")
        assert not any("not exist" in r.getMessage() for r in caplog.records)
        assert snapshot(consumer).namesrv_error is not None
        line = _summary(consumer).render()
        # "retrying" comes before the reason, so a narrow terminal does not cut it off.
        assert line.startswith(f"orders: name server {addr} unreachable, retrying ("), line
        assert line.endswith("connection refused)"), line

        port = int(addr.rsplit(":", 1)[1])
        await broker_factory(namesrv_port=port)
        await wait_for(lambda: consumer.client.namesrv_error is None, 15, "the name server")
        back = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
        assert back == [f"name server {addr} reachable again"]
        assert "unreachable" not in _summary(consumer).render()
    finally:
        await consumer.shutdown()


async def test_a_topic_without_a_route_is_named_in_the_summary_line(broker: Any) -> None:
    """A misspelt (or not yet created) topic: not just "0 queues ... lag ?" forever."""
    from engine_support import create_topic

    await create_topic(broker, "Orders", 2)
    consumer = AsyncPushConsumer("g-unrouted", namesrv_addr=broker.namesrv_addr)
    consumer.subscribe("Orders", "*")
    consumer.subscribe("Ordrs", "*")
    consumer.register_listener(lambda msgs: None)
    await consumer.start()
    try:
        # The broker creates the group's %RETRY% topic at the first heartbeat, and its
        # route reaches the name server a moment later: wait for it, so the queues held
        # are the same every run (Orders' 2 and the retry queue).
        for _ in range(100):
            await consumer.client.update_all_routes()
            await consumer.client.do_rebalance()
            if len(snapshot(consumer).queues) == 3:
                break
            await asyncio.sleep(0.05)
        assert snapshot(consumer).unrouted_topics == ("Ordrs",)
        line = _summary(consumer).render()
        assert line.startswith("orders: 3 queues, "), line
        assert line.endswith(", no route for topic Ordrs (does it exist?)"), line
        # Created meanwhile: the next route update takes the notice away.
        await create_topic(broker, "Ordrs", 1)
        await consumer.client.update_all_routes()
        await consumer.client.do_rebalance()
        assert snapshot(consumer).unrouted_topics == ()
        assert "no route" not in _summary(consumer).render()
    finally:
        await consumer.shutdown()


def _queue(count: int) -> Any:
    return SimpleNamespace(
        msg_count=count,
        msg_size=0,
        max_span=lambda: 0,
        flow_control_times=0,
        span_control_times=0,
    )


def test_flow_control_is_logged_once_in_a_thousand_times_per_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rmqk.test")
    flow = FlowControl(logging.getLogger("rmqk.test"), count=1000, size_mib=100, span=2000)
    queues = [(MessageQueue("T", "b", i), _queue(1001)) for i in range(16)]
    # A catch-up: every queue of the consumer is held back 100 times.
    for _ in range(100):
        for mq, pq in queues:
            assert flow.blocks(pq, mq)
    # DefaultMQPushConsumerImpl counts for the whole consumer: the 1st and the 1001st.
    # At INFO, not WARNING: a backlog held back by its thresholds is healthy (issue 28 #3).
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]
    assert flow.events == 1600


def test_summary_line_shows_the_flow_control_rate() -> None:
    flow = FlowControl(logging.getLogger("rmqk.test"), count=1000, size_mib=100, span=2000)
    consumer = SimpleNamespace(
        rebalance=SimpleNamespace(process_queue_table={}),
        stats=SimpleNamespace(topics={}),
        state="RUNNING",
        group="g",
        client_id="c",
        flow=flow,
        client=SimpleNamespace(namesrv_text="127.0.0.1:9876", namesrv_error=None),
    )
    summary = _summary(consumer)
    assert "flow control" not in summary.render(now=100.0)
    flow.times += 120
    line = summary.render(now=110.0)
    assert ", flow control 12/s, lag ?" in line, line
    assert "flow control" not in summary.render(now=120.0)
