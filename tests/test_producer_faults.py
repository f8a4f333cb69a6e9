"""Producer fault tolerance over real TCP, as Apache RocketMQ 4.9.8's producer behaves.

Each broker sits behind a frame-reading :class:`FaultProxy`, which counts the
SEND_MESSAGE_V2 requests that reach it: the number of attempts is read off the wire.
Two brokers share one name server, so a retry can go to the other broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from faultproxy import FaultProxy
from test_faults_support import ProxiedBroker

from rmqk.engine.producer import AsyncProducer
from rmqk.model import SendResult, SendStatus
from rmqk.model.errors import (
    BrokerError,
    ConfigError,
    RemotingError,
    RemotingTooMuchRequestError,
    SendFailedError,
)
from rmqk.model.message import Message
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

SEND = RequestCode.SEND_MESSAGE_V2
TOPIC = "FaultTopic"
ILLEGAL_REMARK = "the message is illegal, maybe msg body or properties length not matched"


class Cluster:
    def __init__(self, brokers: list[ProxiedBroker]) -> None:
        self.brokers = brokers
        self.namesrv_addr = brokers[0].namesrv_addr

    def proxy(self, broker_name: str) -> FaultProxy:
        return next(b.proxy for b in self.brokers if b.broker_name == broker_name)

    def sends(self, broker_name: str) -> int:
        return self.proxy(broker_name).request_count(SEND)


async def start_cluster(tmp_path: Path, names: list[str]) -> Cluster:
    brokers: list[ProxiedBroker] = []
    for name in names:
        proxy = await FaultProxy(frames=True).start()
        broker = ProxiedBroker(
            tmp_path / name, proxy, namesrv_port=0, broker_port=0, broker_name=name
        )
        await broker.start()
        if brokers:
            # One name server for all: later brokers register their routes in the first's.
            broker.namesrv.routes = brokers[0].namesrv.routes
            broker._register_routes()
        await broker.create_topic(TOPIC, queues=2)
        brokers.append(broker)
    return Cluster(brokers)


@pytest.fixture
async def two_brokers(tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(tmp_path, ["broker-a", "broker-b"])
    try:
        yield cluster
    finally:
        for broker in cluster.brokers:
            await broker.stop()
            await broker.proxy.stop()


@pytest.fixture
async def one_broker(tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(tmp_path, ["broker-a"])
    try:
        yield cluster
    finally:
        await cluster.brokers[0].stop()
        await cluster.brokers[0].proxy.stop()


def producer(cluster: Cluster, group: str, **options: Any) -> AsyncProducer:
    return AsyncProducer(group, namesrv_addr=cluster.namesrv_addr, **options)


def msg(i: int = 0) -> Message:
    return Message(TOPIC, f"m{i}".encode())


# ----------------------------------------------------------------------------- response codes


@pytest.mark.parametrize(
    "code",
    [
        ResponseCode.MESSAGE_ILLEGAL,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.FLOW_CONTROL,
        ResponseCode.VERSION_NOT_SUPPORTED,
    ],
)
async def test_codes_java_does_not_retry_raise_at_once(one_broker: Cluster, code: int) -> None:
    one_broker.proxy("broker-a").answer(SEND, code, ILLEGAL_REMARK)
    async with producer(one_broker, "p-no-retry") as p:
        with pytest.raises(BrokerError) as failure:
            await p.send(msg())
    assert one_broker.sends("broker-a") == 1
    assert failure.value.code == code
    assert failure.value.remark == ILLEGAL_REMARK
    assert f"code {int(code)}" in str(failure.value) and ILLEGAL_REMARK in str(failure.value)


@pytest.mark.parametrize("code", [1, 14, 16, 17, 204, 205])
async def test_retry_response_codes_are_retried_then_fail(one_broker: Cluster, code: int) -> None:
    one_broker.proxy("broker-a").answer(SEND, code, f"remark-{code}")
    async with producer(one_broker, "p-retry") as p:
        with pytest.raises(SendFailedError) as failure:
            await p.send(msg())
    # One attempt and retry_times_when_send_failed (2) more, the only broker each time.
    assert one_broker.sends("broker-a") == 3
    assert failure.value.response_code == code
    assert failure.value.attempts == 3
    assert failure.value.brokers_sent == ("broker-a",) * 3
    assert f"remark-{code}" in str(failure.value)
    assert isinstance(failure.value.__cause__, BrokerError)


async def test_retry_counts_and_codes_are_options(one_broker: Cluster) -> None:
    proxy = one_broker.proxy("broker-a")
    proxy.answer(SEND, ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_REMARK)
    async with producer(
        one_broker,
        "p-options",
        retry_times_when_send_failed=4,
        retry_response_codes={int(ResponseCode.MESSAGE_ILLEGAL)},
    ) as p:
        with pytest.raises(SendFailedError):
            await p.send(msg())
        assert proxy.request_count(SEND) == 5
        proxy.answer(SEND, ResponseCode.SYSTEM_ERROR, "not in this producer's set")
        with pytest.raises(BrokerError):
            await p.send(msg())
        assert proxy.request_count(SEND) == 6


async def test_oneway_sends_once(one_broker: Cluster) -> None:
    proxy = one_broker.proxy("broker-a")
    proxy.answer(SEND, ResponseCode.SYSTEM_ERROR, "never seen: oneway has no answer")
    async with producer(one_broker, "p-oneway") as p:
        await p.send_oneway(msg())
        proxy.forward(SEND)
        await p.send_oneway(msg(1))
    assert proxy.request_count(SEND) == 2


async def test_async_mode_never_retries_a_broker_answer(one_broker: Cluster) -> None:
    proxy = one_broker.proxy("broker-a")
    proxy.answer(SEND, ResponseCode.SERVICE_NOT_AVAILABLE, "busy")
    async with producer(one_broker, "p-async-answer") as p:
        with pytest.raises(BrokerError) as failure:
            await p.send_async(msg())
    assert failure.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert proxy.request_count(SEND) == 1


# ----------------------------------------------------------------------------- a refusing broker


async def outcomes_of(
    send: Callable[[Message], Awaitable[SendResult]], count: int, error: type[Exception]
) -> list[Any]:
    """What ``count`` sends gave: each result, or the ``error`` it raised."""
    outcomes: list[Any] = []
    for i in range(count):
        try:
            outcomes.append(await send(msg(i)))
        except error as exc:
            outcomes.append(exc)
    return outcomes


async def test_a_refusing_broker_is_avoided_on_retry(two_brokers: Cluster) -> None:
    two_brokers.proxy("broker-a").refuse = True
    async with producer(two_brokers, "p-refused") as p:
        results = [await p.send(msg(i)) for i in range(6)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert all(r.status is SendStatus.SEND_OK for r in results)
    # Every send was stored once, on broker-b; broker-a never got a request.
    assert two_brokers.sends("broker-b") == 6
    assert two_brokers.sends("broker-a") == 0
    assert two_brokers.proxy("broker-a").stats.refused >= 3


async def test_without_retries_a_refusing_broker_fails_the_send(two_brokers: Cluster) -> None:
    two_brokers.proxy("broker-a").refuse = True
    async with producer(two_brokers, "p-refused-once", retry_times_when_send_failed=0) as p:
        outcomes = await outcomes_of(p.send, 4, SendFailedError)
    failures = [o for o in outcomes if isinstance(o, SendFailedError)]
    assert len(failures) == 2  # round robin: every other send picks broker-a
    for failure in failures:
        assert failure.attempts == 1 and failure.brokers_sent == ("broker-a",)
        assert failure.response_code == 10001  # CONNECT_BROKER_EXCEPTION
    assert two_brokers.sends("broker-b") == 2


async def test_async_mode_retries_a_refusing_broker_on_another(two_brokers: Cluster) -> None:
    two_brokers.proxy("broker-a").refuse = True
    async with producer(two_brokers, "p-async-refused") as p:
        results = [await p.send_async(msg(i)) for i in range(4)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert two_brokers.sends("broker-b") == 4


async def test_async_retry_count_is_an_option(two_brokers: Cluster) -> None:
    two_brokers.proxy("broker-a").refuse = True
    async with producer(two_brokers, "p-async-once", retry_times_when_send_async_failed=0) as p:
        outcomes = await outcomes_of(p.send_async, 4, RemotingError)
    assert sum(isinstance(o, RemotingError) for o in outcomes) == 2
    assert two_brokers.sends("broker-b") == 2


# ----------------------------------------------------------------------------- a slow broker


async def test_latency_fault_tolerance_keeps_sends_off_a_slow_broker(
    two_brokers: Cluster,
) -> None:
    slow = two_brokers.proxy("broker-a")
    async with producer(two_brokers, "p-latency", send_latency_fault_enable=True) as p:
        await p.queues_for(TOPIC)
        slow.latency = 0.35  # each way: a send takes at least 700 ms
        first = await p.send(msg())
        assert first.queue.broker_name == "broker-a"
        # 700 ms reaches the 550 ms step: not available for 30000 ms.
        item = p.fault_strategy.tolerance.item("broker-a")
        assert item is not None and item.current_latency >= 700
        left = item.start_timestamp - p.fault_strategy.tolerance.clock()
        assert 29000 < left <= 30000
        slow.latency = 0.0
        later = [await p.send(msg(i)) for i in range(8)]
        assert {r.queue.broker_name for r in later} == {"broker-b"}
        assert two_brokers.sends("broker-a") == 1
        # Once the duration has passed, broker-a takes its share again.
        real = p.fault_strategy.tolerance.clock
        p.fault_strategy.tolerance.clock = lambda: real() + 30_000
        again = [await p.send(msg(i)) for i in range(4)]
    assert "broker-a" in {r.queue.broker_name for r in again}
    assert two_brokers.sends("broker-a") > 1


async def test_without_latency_fault_tolerance_a_slow_broker_keeps_its_share(
    two_brokers: Cluster,
) -> None:
    two_brokers.proxy("broker-a").latency = 0.2
    async with producer(two_brokers, "p-no-latency") as p:
        results = [await p.send(msg(i)) for i in range(4)]
    assert [r.queue.broker_name for r in results].count("broker-a") == 2
    assert two_brokers.sends("broker-a") == 2


async def test_the_send_timeout_is_one_budget_for_all_attempts(one_broker: Cluster) -> None:
    one_broker.proxy("broker-a").latency = 0.6
    async with producer(one_broker, "p-budget", send_msg_timeout=1000) as p:
        await p.queues_for(TOPIC)
        with pytest.raises(RemotingTooMuchRequestError, match="sendDefaultImpl call timeout"):
            await p.send(msg())
    # The first attempt timed out after the whole budget: no second attempt was made.
    assert one_broker.sends("broker-a") == 1


# ----------------------------------------------------------------------------- store status


async def test_retry_another_broker_when_not_store_ok(two_brokers: Cluster) -> None:
    fields = {"msgId": "0" * 32, "queueId": 0, "queueOffset": 0}
    two_brokers.proxy("broker-a").answer(SEND, ResponseCode.FLUSH_DISK_TIMEOUT, None, fields)
    async with producer(two_brokers, "p-store-default") as p:
        plain = [await p.send(msg(i)) for i in range(2)]
    assert [r.status for r in plain].count(SendStatus.FLUSH_DISK_TIMEOUT) == 1
    async with producer(
        two_brokers, "p-store-retry", retry_another_broker_when_not_store_ok=True
    ) as p:
        retried = [await p.send(msg(i)) for i in range(2)]
    assert [r.status for r in retried] == [SendStatus.SEND_OK, SendStatus.SEND_OK]
    assert {r.queue.broker_name for r in retried} == {"broker-b"}


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"send_msg_timeout": 0}, "send_msg_timeout: must be at least 1"),
        ({"retry_times_when_send_failed": -1}, "retry_times_when_send_failed: must be at least 0"),
        ({"retry_times_when_send_async_failed": "2"}, "retry_times_when_send_async_failed"),
        ({"send_latency_fault_enable": "yes"}, "send_latency_fault_enable: must be true or false"),
        ({"retry_another_broker_when_not_store_ok": 1}, "retry_another_broker_when_not_store_ok"),
        ({"latency_max": (100, 50)}, "latency_max: must be in ascending order"),
        ({"not_available_duration": (0, 1)}, "not_available_duration: has 2 entries"),
        ({"latency_max": ()}, "latency_max: must be a non-empty list"),
        ({"retry_response_codes": "17"}, "retry_response_codes"),
        ({"max_message_size": 0}, "max_message_size"),
        ({"default_topic_queue_nums": 0}, "default_topic_queue_nums"),
    ],
)
def test_bad_options_are_named_at_construction(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        AsyncProducer("p-bad", namesrv_addr="127.0.0.1:1", **options)


def test_every_mistake_is_reported_together() -> None:
    with pytest.raises(ConfigError, match="2 problems") as failure:
        AsyncProducer(
            "p-bad",
            namesrv_addr="127.0.0.1:1",
            send_msg_timeout=-5,
            latency_max=[3, 2, 1, 0, 0, 0, 0],
        )
    assert "[producer] send_msg_timeout: must be at least 1, got -5" in str(failure.value)
    assert "[producer] latency_max: must be in ascending order" in str(failure.value)
