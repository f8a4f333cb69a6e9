"""Each consumer option does what it says, over real TCP against the embedded broker.

The option audit (``tests/test_option_audit.py``) names these tests as the
proof of their options' effects. Most watch the requests the broker receives
(``BrokerRequests``): which listener they came through, their header fields,
how often they come.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from engine_support import create_topic, produce, push_consumer, wait_for

from rmqk.model.errors import RemotingTimeoutError
from rmqk.model.message import MessageExt
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)

consumer = push_consumer


@attrs.frozen
class Seen:
    """One request the broker received, and the listener it came through."""

    listener: str
    request: RemotingCommand
    at: float


class BrokerRequests:
    """Records every request the broker's processors get; ``answer`` may replace one."""

    def __init__(self, broker: Any) -> None:
        self.seen: list[Seen] = []
        self.answer: dict[int, Any] = {}
        processors = broker.processors
        original = processors.handle

        async def handle(conn: Any, request: RemotingCommand, st: int) -> Any:
            self.seen.append(Seen(conn.label, request, time.monotonic()))
            override = self.answer.get(request.code)
            if override is not None:
                return await override(request)
            return await original(conn, request, st)

        processors.handle = handle

    def of(self, code: int) -> list[Seen]:
        return [s for s in self.seen if s.request.code == code]

    def listeners(self, code: int) -> set[str]:
        return {s.listener for s in self.of(code)}


def _error(code: int) -> Any:
    async def answer(request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, code, "refused by the test")

    return answer


async def _consume_some(broker: Any, topic: str, count: int, **options: Any) -> Any:
    """Start a consumer of ``topic`` and wait until it consumed ``count`` messages."""
    got: list[MessageExt] = []
    c = consumer(broker, f"g-{topic}", **options)
    c.subscribe(topic)

    @c.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        got.extend(msgs)

    await c.start()
    await wait_for(lambda: len(got) >= count, 30, f"{count} messages of {topic}")
    return c


# -- the VIP channel ---------------------------------------------------------------


async def test_vip_channel_enabled_sends_offsets_and_send_backs_to_the_port_minus_two(
    broker: Any,
) -> None:
    assert broker.vip_server is not None
    port = broker.broker_addr.rpartition(":")[2]
    assert broker.vip_server.port == int(port) - 2
    await create_topic(broker, "Vip", 2)
    await produce(broker.namesrv_addr, "Vip", (b"v%d" % i for i in range(20)))
    seen = BrokerRequests(broker)
    c = await _consume_some(broker, "Vip", 20, vip_channel_enabled=True)
    try:
        await c.persist_consumer_offset()
    finally:
        await c.shutdown()
    assert broker.vip_server.accepted >= 1
    # MQClientAPIImpl sends these through brokerVIPChannel...
    assert seen.listeners(RequestCode.UPDATE_CONSUMER_OFFSET) == {"broker-vip"}
    assert seen.listeners(RequestCode.QUERY_CONSUMER_OFFSET) == {"broker-vip"}
    assert seen.listeners(RequestCode.GET_CONSUMER_LIST_BY_GROUP) == {"broker-vip"}
    # ...and these to the broker's own port.
    assert seen.listeners(RequestCode.PULL_MESSAGE) == {"broker"}
    assert seen.listeners(RequestCode.HEART_BEAT) == {"broker"}


async def test_without_vip_channel_nothing_reaches_the_vip_listener(broker: Any) -> None:
    await create_topic(broker, "NoVip", 1)
    await produce(broker.namesrv_addr, "NoVip", (b"n%d" % i for i in range(5)))
    seen = BrokerRequests(broker)
    c = await _consume_some(broker, "NoVip", 5)
    try:
        await c.persist_consumer_offset()
    finally:
        await c.shutdown()
    assert broker.vip_server.accepted == 0
    assert {s.listener for s in seen.seen} == {"broker"}


async def test_producer_with_the_vip_transport_option_sends_to_the_vip_listener(
    broker: Any,
) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    await create_topic(broker, "VipSend", 1)
    seen = BrokerRequests(broker)
    async with AsyncProducer(
        "p-vip",
        namesrv_addr=broker.namesrv_addr,
        transport_options={"vip_channel_enabled": True},
    ) as producer:
        await producer.send(Message("VipSend", b"x"))
    assert seen.listeners(RequestCode.SEND_MESSAGE_V2) == {"broker-vip"}


async def test_producer_vip_channel_enabled_sends_to_the_port_minus_two(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    await create_topic(broker, "VipOption", 1)
    seen = BrokerRequests(broker)
    async with AsyncProducer(
        "p-vip-option", namesrv_addr=broker.namesrv_addr, vip_channel_enabled=True
    ) as producer:
        await producer.send(Message("VipOption", b"x"))
    assert seen.listeners(RequestCode.SEND_MESSAGE_V2) == {"broker-vip"}
    async with AsyncProducer("p-no-vip", namesrv_addr=broker.namesrv_addr) as plain:
        await plain.send(Message("VipOption", b"y"))
    assert [s.listener for s in seen.of(RequestCode.SEND_MESSAGE_V2)] == ["broker-vip", "broker"]


async def test_the_vip_listener_refuses_pulls_as_apaches_fast_server_does(broker: Any) -> None:
    from engine_support import admin_transport

    from rmqk.model.errors import BrokerError
    from rmqk.plugins.remoting.rpc import vip_address
    from rmqk.spi.transport import PullMessageRequest

    await create_topic(broker, "VipPull", 1)
    transport = await admin_transport(broker.namesrv_addr)
    try:
        request = PullMessageRequest("g", "VipPull", 0, 0, 1, 0, 0, 0, None, 0)
        with pytest.raises(BrokerError) as info:
            await transport.pull_message(vip_address(broker.broker_addr), request, 3000)
        assert info.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await transport.close()


async def test_broker_without_vip_channel_listens_on_one_port(broker_factory: Any) -> None:
    broker = await broker_factory(vip_channel=False)
    assert broker.vip_server is None


# -- the client id, heartbeats, routes, offsets ------------------------------------


async def test_client_ip_and_unit_name_form_the_client_id_the_broker_sees(broker: Any) -> None:
    await create_topic(broker, "Ids", 1)
    c = consumer(broker, "g-ids", client_ip="10.9.8.7", unit_name="unitA", instance_name="inst")
    c.subscribe("Ids")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        group = broker.processors.clients.consumer_group("g-ids")
        assert group is not None and group.client_ids() == ["10.9.8.7@inst@unitA"]
    finally:
        await c.shutdown()


async def test_unit_mode_is_sent_in_heartbeats(broker: Any) -> None:
    await create_topic(broker, "Unit", 1)
    seen = BrokerRequests(broker)
    c = consumer(broker, "g-unit", unit_mode=True)
    c.subscribe("Unit")
    c.register_listener(lambda msgs: None)
    await c.start()
    await c.shutdown()
    beats = [json.loads(s.request.body) for s in seen.of(RequestCode.HEART_BEAT)]
    ours = [d for b in beats for d in b["consumerDataSet"] if d["groupName"] == "g-unit"]
    assert ours and all(d["unitMode"] is True for d in ours)


async def test_heartbeat_broker_interval_sets_how_often_heartbeats_come(broker: Any) -> None:
    await create_topic(broker, "Beat", 1)
    seen = BrokerRequests(broker)
    c = consumer(broker, "g-beat", heartbeat_broker_interval=200)
    c.subscribe("Beat")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await c.shutdown()
    # The default (30 s) gives the start's one or two; 200 ms about ten in two seconds.
    assert len(seen.of(RequestCode.HEART_BEAT)) >= 6


async def test_poll_name_server_interval_sets_how_often_routes_are_fetched(broker: Any) -> None:
    await create_topic(broker, "Poll", 1)
    routes: list[float] = []
    server = broker.namesrv.server
    original = server._handler

    async def handler(conn: Any, request: RemotingCommand, st: int) -> Any:
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            routes.append(time.monotonic())
        return await original(conn, request, st)

    server._handler = handler
    c = consumer(broker, "g-poll", poll_name_server_interval=200)
    c.subscribe("Poll")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await c.shutdown()
    assert len(routes) >= 6


async def test_persist_consumer_offset_interval_sets_how_often_offsets_are_committed(
    broker: Any,
) -> None:
    await create_topic(broker, "Persist", 1)
    await produce(broker.namesrv_addr, "Persist", (b"p" for _ in range(3)))
    seen = BrokerRequests(broker)
    c = await _consume_some(broker, "Persist", 3, persist_consumer_offset_interval=200)
    try:
        # The first persist comes 10 s after start, as Java's scheduled task.
        await asyncio.sleep(12.0)
        commits = seen.of(RequestCode.UPDATE_CONSUMER_OFFSET)
    finally:
        await c.shutdown()
    # The 5000 ms default would have committed once by now.
    assert len(commits) >= 5


async def test_mq_client_api_timeout_bounds_each_request(broker: Any) -> None:
    await create_topic(broker, "Slowly", 1)
    seen = BrokerRequests(broker)
    c = consumer(broker, "g-timeout", mq_client_api_timeout=300)
    c.subscribe("Slowly")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:

        async def never(request: RemotingCommand) -> RemotingCommand:
            await asyncio.sleep(5)
            raise AssertionError("the client should have given up")

        seen.answer[RequestCode.GET_CONSUMER_LIST_BY_GROUP] = never
        began = time.monotonic()
        with pytest.raises(RemotingTimeoutError):
            await c.client.transport.get_consumer_ids(broker.broker_addr, "g-timeout")
        assert time.monotonic() - began < 2.0
    finally:
        seen.answer.clear()
        await c.shutdown()


# -- pulling -------------------------------------------------------------------------


async def test_pull_batch_size_and_post_subscription_when_pull_shape_each_pull(
    broker: Any,
) -> None:
    await create_topic(broker, "Shape", 1)
    await produce(broker.namesrv_addr, "Shape", (b"s" for _ in range(20)))
    seen = BrokerRequests(broker)
    c = await _consume_some(
        broker, "Shape", 20, pull_batch_size=7, post_subscription_when_pull=True
    )
    await c.shutdown()
    pulls = [s.request.ext_fields for s in seen.of(RequestCode.PULL_MESSAGE)]
    pulls = [f for f in pulls if f["topic"] == "Shape"]
    assert pulls and {f["maxMsgNums"] for f in pulls} == {"7"}
    # PullSysFlag: bit 2 (4) is "subscription", set when the expression is sent.
    assert all(int(f["sysFlag"]) & 4 and f.get("subscription") == "*" for f in pulls)


async def test_without_post_subscription_when_pull_pulls_carry_no_expression(
    broker: Any,
) -> None:
    await create_topic(broker, "NoPost", 1)
    await produce(broker.namesrv_addr, "NoPost", (b"s" for _ in range(3)))
    seen = BrokerRequests(broker)
    c = await _consume_some(broker, "NoPost", 3)
    await c.shutdown()
    pulls = [s.request.ext_fields for s in seen.of(RequestCode.PULL_MESSAGE)]
    assert pulls and all(not int(f["sysFlag"]) & 4 for f in pulls if f["topic"] == "NoPost")


def _gaps(seen: BrokerRequests, topic: str) -> list[float]:
    times = [
        s.at for s in seen.of(RequestCode.PULL_MESSAGE) if s.request.ext_fields["topic"] == topic
    ]
    return [b - a for a, b in itertools.pairwise(times)]


async def test_pull_interval_spaces_the_pulls_of_a_queue(broker: Any) -> None:
    await create_topic(broker, "Spaced", 1)
    await produce(broker.namesrv_addr, "Spaced", (b"s" for _ in range(40)))
    seen = BrokerRequests(broker)
    c = await _consume_some(broker, "Spaced", 8, pull_interval=300, pull_batch_size=2)
    await c.shutdown()
    gaps = _gaps(seen, "Spaced")
    assert gaps and min(gaps) >= 0.25, gaps


async def test_pull_time_delay_mills_when_exception_spaces_failed_pulls(broker: Any) -> None:
    await create_topic(broker, "Failing", 1)
    seen = BrokerRequests(broker)
    seen.answer[RequestCode.PULL_MESSAGE] = _error(ResponseCode.SYSTEM_ERROR)
    c = consumer(broker, "g-failing", pull_time_delay_mills_when_exception=150)
    c.subscribe("Failing")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        await asyncio.sleep(2.0)
    finally:
        await c.shutdown()
    gaps = _gaps(seen, "Failing")
    # Java's 1000 ms default would allow two; 150 ms about a dozen, none closer.
    assert len(gaps) >= 6 and min(gaps) >= 0.12, gaps


class _Gate:
    """A listener that holds every call until released, counting what it holds."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.consumed = 0

    async def __call__(self, msgs: list[MessageExt]) -> None:
        await self.release.wait()
        self.consumed += len(msgs)


def _cached(c: Any, topic: str) -> Iterator[Any]:
    return (pq for mq, pq in c.rebalance.process_queue_table.items() if mq.topic == topic)


@pytest.mark.parametrize(
    ("options", "per_queue_messages", "per_queue_mib"),
    [
        pytest.param({"pull_threshold_for_topic": 40}, 10, None, id="for_topic"),
        pytest.param({"pull_threshold_size_for_queue": 1}, None, 1, id="size_for_queue"),
        pytest.param({"pull_threshold_size_for_topic": 4}, None, 1, id="size_for_topic"),
    ],
)
async def test_pull_thresholds_bound_what_a_queue_caches(
    broker: Any, options: dict[str, Any], per_queue_messages: int | None, per_queue_mib: int | None
) -> None:
    # Example values of each: pull_threshold_for_topic = 40, pull_threshold_size_for_queue = 1,
    # pull_threshold_size_for_topic = 4 (4 queues: 10 messages / 1 MiB each).
    topic = "Bound" + "".join(k.title() for k in options)[:20]
    await create_topic(broker, topic, 4)
    body = b"b" * (100 * 1024)
    await produce(broker.namesrv_addr, topic, (body for _ in range(200)), batch=8)
    gate = _Gate()
    batch = 4
    c = consumer(broker, f"g-{topic}", pull_batch_size=batch, consume_thread_min=1, **options)
    c.subscribe(topic)
    c.register_listener(gate)
    await c.start()
    try:
        await wait_for(lambda: len(list(_cached(c, topic))) == 4, 20, "four queues")
        await asyncio.sleep(1.5)
        for pq in _cached(c, topic):
            if per_queue_messages is not None:
                assert pq.msg_count <= per_queue_messages + batch
            if per_queue_mib is not None:
                # Java compares whole MiB (size / 1 MiB > limit): up to limit + 1 MiB.
                assert pq.msg_size <= (per_queue_mib + 1) * 1024 * 1024 + batch * len(body)
        # Without the limit each queue would hold its 50 (the 1000-message default).
        assert sum(pq.msg_count for pq in _cached(c, topic)) < 150
    finally:
        gate.release.set()
        await c.shutdown()


async def test_consume_concurrently_max_span_pauses_a_queue_whose_held_offsets_spread(
    broker: Any,
) -> None:
    await create_topic(broker, "Span", 1)
    await produce(broker.namesrv_addr, "Span", (b"%d" % i for i in range(300)))
    gate = _Gate()
    batch = 4
    c = consumer(
        broker,
        "g-span",
        consume_concurrently_max_span=20,
        pull_batch_size=batch,
        consume_thread_min=1,
    )
    c.subscribe("Span")
    c.register_listener(gate)
    await c.start()
    try:
        await wait_for(lambda: any(pq.msg_count for pq in _cached(c, "Span")), 20, "a pull")
        await asyncio.sleep(1.5)
        (pq,) = _cached(c, "Span")
        # Pulling stopped once the held offsets spanned more than 20; the default
        # 2000 would have let all 300 in (below pull_threshold_for_queue's 1000).
        assert pq.msg_count <= 20 + 1 + batch, pq.msg_count
    finally:
        gate.release.set()
        await c.shutdown()


# -- consuming -----------------------------------------------------------------------


async def test_consume_thread_min_is_how_many_listener_calls_run_at_once(broker: Any) -> None:
    await create_topic(broker, "Threads", 4)
    await produce(broker.namesrv_addr, "Threads", (b"t" for _ in range(200)))
    lock = threading.Lock()
    running = peak = 0
    calls = 0

    c = consumer(broker, "g-threads", consume_thread_min=3, consume_thread_max=16)
    c.subscribe("Threads")

    @c.register_listener
    def handle(msgs: list[MessageExt]) -> None:
        nonlocal running, peak, calls
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
            calls += 1

    await c.start()
    try:
        await wait_for(lambda: calls >= 60, 30, "sixty listener calls")
    finally:
        await c.shutdown()
    # Java's pool never grows past its core size: consume_thread_max is not reached.
    assert peak == 3


async def test_await_termination_millis_when_shutdown_lets_running_consumes_finish(
    broker: Any,
) -> None:
    await create_topic(broker, "Drain", 1)
    await produce(broker.namesrv_addr, "Drain", [b"d"])
    started = asyncio.Event()
    finished: list[int] = []
    c = consumer(broker, "g-drain", await_termination_millis_when_shutdown=3000)
    c.subscribe("Drain")

    @c.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(len(msgs))

    await c.start()
    await asyncio.wait_for(started.wait(), 20)
    await c.shutdown()
    # With the default 0 the call would be cancelled at once.
    assert finished == [1]


async def test_consume_timeout_is_when_a_running_consume_counts_as_expired(broker: Any) -> None:
    await create_topic(broker, "Expire", 1)
    await produce(broker.namesrv_addr, "Expire", [b"e"])
    release = asyncio.Event()
    deliveries: list[int] = []
    c = consumer(broker, "g-expire", consume_timeout=1)
    c.subscribe("Expire")

    @c.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        deliveries.append(msgs[0].reconsume_times)
        if len(deliveries) == 1:
            await release.wait()

    await c.start()
    try:
        await wait_for(lambda: len(deliveries) == 1, 20, "the first delivery")
        pq = next(_cached(c, "Expire"))
        # Started 70 s ago: past one minute, well within the 15-minute default.
        for offset in list(pq.consume_started):
            pq.consume_started[offset] = int(time.time() * 1000) - 70_000
        await c.consume_service.clean_expired_messages()
        await wait_for(lambda: len(deliveries) == 2, 30, "the expired message's retry")
        assert deliveries == [0, 1]
    finally:
        release.set()
        await c.shutdown()


# -- the lite pull consumer's own options -----------------------------------------------


def _lite(broker: Any, group: str, **options: Any) -> Any:
    from rmqk.engine.lite_pull import AsyncLitePullConsumer

    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return AsyncLitePullConsumer(group, namesrv_addr=broker.namesrv_addr, **options)


async def test_poll_timeout_ms_is_how_long_an_empty_poll_waits(broker: Any) -> None:
    await create_topic(broker, "LiteEmpty", 1)
    c = _lite(broker, "g-lite-empty", poll_timeout_ms=300)
    c.subscribe("LiteEmpty")
    async with c:
        began = time.monotonic()
        assert await c.poll() == []
        waited = time.monotonic() - began
    # The 5000 ms default would have waited five seconds.
    assert 0.25 <= waited < 2.0, waited


async def test_broker_suspend_max_time_millis_is_sent_with_each_pull(
    broker_factory: Any,
) -> None:
    # Held pulls are checked every 100 ms rather than Apache's 5 s.
    broker = await broker_factory(hold_check_interval=0.1)
    await create_topic(broker, "LiteSuspend", 1)
    seen = BrokerRequests(broker)
    c = _lite(broker, "g-lite-suspend", broker_suspend_max_time_millis=700)
    c.subscribe("LiteSuspend")
    async with c:
        await c.poll(3000)
    pulls = [s.request.ext_fields for s in seen.of(RequestCode.PULL_MESSAGE)]
    assert pulls and {f["suspendTimeoutMillis"] for f in pulls} == {"700"}
    # The broker held each pull about that long before answering "no new message".
    gaps = _gaps(seen, "LiteSuspend")
    assert gaps and min(gaps) >= 0.6, gaps


async def test_consumer_timeout_millis_when_suspend_gives_up_on_a_held_pull(
    broker: Any,
) -> None:
    await create_topic(broker, "LiteHeld", 1)
    seen = BrokerRequests(broker)

    async def never(request: RemotingCommand) -> None:
        return None  # no answer at all, and the connection stays free for the rest

    seen.answer[RequestCode.PULL_MESSAGE] = never
    c = _lite(
        broker,
        "g-lite-held",
        broker_suspend_max_time_millis=500,
        consumer_timeout_millis_when_suspend=1000,
        pull_time_delay_mills_when_exception=100,
    )
    c.subscribe("LiteHeld")
    async with c:
        await asyncio.sleep(5.0)
        seen.answer.clear()
    # A pull unanswered after one second (the sweep runs once a second) is given up
    # and another sent; with the 30 s default the first would still be waiting.
    gaps = _gaps(seen, "LiteHeld")
    assert len(gaps) >= 2 and all(0.9 <= g < 2.5 for g in gaps), gaps


async def test_lite_fetch_thresholds_bound_what_is_buffered_before_polls(broker: Any) -> None:
    await create_topic(broker, "LiteFlow", 2)
    await produce(broker.namesrv_addr, "LiteFlow", (b"f" for _ in range(600)), batch=50)
    # Nothing is polled: fetching stops at the limits, not at the 600 produced.
    spans = _lite(broker, "g-lite-span", consume_max_span=30, pull_batch_size=5)
    spans.subscribe("LiteFlow")
    async with spans:
        await wait_for(lambda: len(spans.queues.states) == 2, 10, "both queues")
        await asyncio.sleep(1.5)
        counts = [s.pq.msg_count for s in spans.queues.states.values()]
    assert all(0 < n <= 30 + 1 + 5 for n in counts), counts

    total = _lite(broker, "g-lite-all", pull_threshold_for_all=40, pull_batch_size=5)
    total.subscribe("LiteFlow")
    async with total:
        await wait_for(lambda: len(total.queues.states) == 2, 10, "both queues")
        await asyncio.sleep(1.5)
        buffered = sum(s.pq.msg_count for s in total.queues.states.values())
    # Fetching pauses once buffered batches x 5 exceed 40: a batch per queue over it.
    assert 0 < buffered <= 40 + 5 + 2 * 5, buffered


# -- producer options ------------------------------------------------------------------


async def test_compress_msg_body_over_howmuch_compresses_bodies_above_it(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    await create_topic(broker, "Zip", 1)
    seen = BrokerRequests(broker)
    body = b"compressible " * 40  # 520 bytes: below the 4096 default
    async with AsyncProducer(
        "p-zip", namesrv_addr=broker.namesrv_addr, compress_msg_body_over_howmuch=100
    ) as p:
        await p.send(Message("Zip", body))
    (send,) = seen.of(RequestCode.SEND_MESSAGE_V2)
    # MessageSysFlag.COMPRESSED_FLAG, and the body on the wire is the smaller zlib form.
    assert int(send.request.ext_fields["f"]) & 1
    assert len(send.request.body) < len(body)
    c = await _consume_some(broker, "Zip", 1)
    await c.shutdown()


async def test_max_message_size_refuses_a_larger_body_before_sending(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.errors import ClientError
    from rmqk.model.message import Message

    await create_topic(broker, "Big", 1)
    seen = BrokerRequests(broker)
    async with AsyncProducer("p-big", namesrv_addr=broker.namesrv_addr, max_message_size=100) as p:
        with pytest.raises(ClientError, match="MAX: 100"):
            await p.send(Message("Big", b"x" * 101))
        await p.send(Message("Big", b"x" * 100))
    assert len(seen.of(RequestCode.SEND_MESSAGE_V2)) == 1


async def test_default_topic_queue_nums_sizes_an_auto_created_topic(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    seen = BrokerRequests(broker)
    async with AsyncProducer(
        "p-auto", namesrv_addr=broker.namesrv_addr, default_topic_queue_nums=2
    ) as p:
        await p.send(Message("AutoTwo", b"a"))
    sends = seen.of(RequestCode.SEND_MESSAGE_V2)
    assert sends and {s.request.ext_fields["d"] for s in sends} == {"2"}
    route = broker.namesrv.routes.route("AutoTwo")
    assert route is not None and [q["writeQueueNums"] for q in route["queueDatas"]] == [2]


async def test_latency_tables_set_how_long_a_broker_is_avoided(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message

    await create_topic(broker, "Latency", 1)
    async with AsyncProducer(
        "p-tables",
        namesrv_addr=broker.namesrv_addr,
        send_latency_fault_enable=True,
        latency_max=[0],
        not_available_duration=[2000],
    ) as p:
        await p.send(Message("Latency", b"l"))
        # Any latency reaches the one 0 ms step: unavailable for 2000 ms. Java's
        # tables would leave a quick send's broker available at once.
        item = p.fault_strategy.tolerance.item(broker.broker_name)
        assert item is not None
        left = item.start_timestamp - p.fault_strategy.tolerance.clock()
        assert 1500 < left <= 2000


# -- the plugins a consumer is composed of ----------------------------------------------


async def test_transport_names_the_registered_transport_the_consumer_talks_through(
    broker: Any,
) -> None:
    from rmqk.pluginmanager import get_plugin_manager, reset_plugin_manager
    from rmqk.plugins.remoting import create_tcp_transport
    from rmqk.spi.hookspecs import hookimpl

    made: list[Any] = []

    class CountingTransport:
        @hookimpl
        def rmqk_register_transports(self, register: Any) -> None:
            def factory(config: Any, hook: Any = None) -> Any:
                made.append(config)
                return create_tcp_transport(config, hook)

            register("counted-tcp", factory)

    await create_topic(broker, "Via", 1)
    await produce(broker.namesrv_addr, "Via", [b"v"])
    reset_plugin_manager()
    get_plugin_manager().register(CountingTransport(), name="counted-tcp")
    try:
        c = await _consume_some(broker, "Via", 1, transport="counted-tcp")
        await c.shutdown()
    finally:
        reset_plugin_manager()
    assert len(made) == 1 and made[0].namesrv_addrs == (broker.namesrv_addr,)


async def test_offset_store_and_its_options_choose_where_offsets_are_kept(
    broker: Any, tmp_path: Any
) -> None:
    from engine_support import committed_offsets

    await create_topic(broker, "Local", 1)
    await produce(broker.namesrv_addr, "Local", (b"l" for _ in range(5)))
    c = await _consume_some(
        broker,
        "Local",
        5,
        offset_store="local-file",
        offset_store_options={"dir": str(tmp_path / "offsets")},
    )
    await c.shutdown()
    # A clustering consumer's offsets went to the file, not to the broker.
    (path,) = (tmp_path / "offsets").rglob("offsets.json")
    assert "Local" in path.read_text()
    on_broker = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-Local", "Local", 1
    )
    # The broker knows no commit (Apache answers 0 for a group with none on a new queue).
    assert on_broker[0] in (None, 0)


async def test_allocate_options_configure_the_allocation_strategy(broker: Any) -> None:
    await create_topic(broker, "Pick", 4)
    c = consumer(
        broker,
        "g-pick",
        allocate_message_queue_strategy="CONFIG",
        allocate_options={
            "queues": [{"topic": "Pick", "broker_name": broker.broker_name, "queue_id": 2}]
        },
    )
    c.subscribe("Pick")
    c.register_listener(lambda msgs: None)
    await c.start()
    try:
        await wait_for(lambda: len(list(_cached(c, "Pick"))) == 1, 20, "the configured queue")
        (mq,) = (mq for mq in c.rebalance.process_queue_table if mq.topic == "Pick")
        assert mq.queue_id == 2
    finally:
        await c.shutdown()


async def test_access_channel_cloud_sends_consume_traces_to_the_regions_topic(
    broker: Any,
) -> None:
    from rmqk.plugins.trace.lookup import find_trace_messages, trace_views

    await create_topic(broker, "Cloudy", 1)
    await produce(broker.namesrv_addr, "Cloudy", [b"c"])
    got: list[MessageExt] = []
    c = consumer(broker, "g-cloudy", enable_msg_trace=True, access_channel="CLOUD")
    c.subscribe("Cloudy")

    @c.register_listener
    async def handle(msgs: list[MessageExt]) -> None:
        got.extend(msgs)

    await c.start()
    try:
        await wait_for(lambda: len(got) == 1, 30, "the message")
    finally:
        await c.shutdown()  # flushes the traces
    msg_id = got[0].msg_id

    # Java's getTraceTopicName: a CLOUD client writes to its region's trace topic
    # (rmq_sys_TRACE_DATA_<region>), in the cloud record format; LOCAL, the default,
    # writes to RMQ_SYS_TRACE_TOPIC, which is never created here.
    topics = broker.namesrv.routes.topics()
    (cloud_topic,) = (t for t in topics if t.startswith("rmq_sys_TRACE_DATA_"))
    assert "RMQ_SYS_TRACE_TOPIC" not in topics
    found = await find_trace_messages([broker.namesrv_addr], cloud_topic, msg_id)
    cloud = [v.context for v in trace_views(msg_id, found)]
    before, after = cloud
    assert (before.trace_type.name, before.group_name) == ("SubBefore", "g-cloudy")
    # The cloud SubAfter record leaves out the time stamp and the group.
    assert after.trace_type.name == "SubAfter" and after.cloud


async def test_producer_customized_trace_topic_receives_its_send_traces(broker: Any) -> None:
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message
    from rmqk.plugins.trace.lookup import find_trace_messages, trace_views

    await create_topic(broker, "TracedSend", 1)
    async with AsyncProducer(
        "p-traced",
        namesrv_addr=broker.namesrv_addr,
        enable_msg_trace=True,
        customized_trace_topic="MyTraces",
    ) as p:
        sent = await p.send(Message("TracedSend", b"t"))
    topics = broker.namesrv.routes.topics()
    assert "MyTraces" in topics and "RMQ_SYS_TRACE_TOPIC" not in topics
    found = await find_trace_messages([broker.namesrv_addr], "MyTraces", sent.msg_id)
    (pub,) = [v.context for v in trace_views(sent.msg_id, found)]
    assert (pub.trace_type.name, pub.group_name) == ("Pub", "p-traced")
