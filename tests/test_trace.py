"""Message trace (the ``trace`` plugin): Java's record format, and traces written over real TCP.

The encoded records are compared with strings written by hand from Java
4.9.8's TraceDataEncoder; the end-to-end tests run a traced producer and
consumers against the embedded broker, read the trace topic back and compare
each record field by field.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from engine_support import FAST_DELAY_LEVELS, create_topic, wait_for

from rmqk.app.cli import main
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.model import ConsumeStatus, SendStatus
from rmqk.model.message import Message, MessageExt
from rmqk.pluginmanager import get_plugin_manager
from rmqk.plugins import trace
from rmqk.plugins.trace.dispatcher import AsyncTraceDispatcher
from rmqk.plugins.trace.lookup import find_trace_messages, trace_views
from rmqk.plugins.trace.records import (
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    decode,
    encode,
)
from rmqk.spi.contexts import ClientContext, ClientRole, SendMessageContext
from rmqk.spi.hookspecs import hookimpl
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)

# A consumer that traces what it consumes, from the first offset so no message is missed.
TRACED_FROM_FIRST: dict[str, Any] = {
    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    "enable_msg_trace": True,
}

A, B = "\x01", "\x02"

# -- the format, byte for byte ----------------------------------------------------------------


def pub() -> TraceContext:
    bean = TraceBean(
        topic="Orders",
        msg_id="7F00000100002A9F0000000000000001",
        tags="TagA",
        keys="k1 k2",
        store_host="127.0.0.1:10911",
        body_length=11,
        msg_type=MessageType.Normal_Msg,
        offset_msg_id="7F00000100002A9F0000000000000000",
    )
    return TraceContext(
        TraceType.Pub,
        1700000000123,
        (bean,),
        region_id="DefaultRegion",
        group_name="pg",
        cost_time=7,
        success=True,
    )


def test_pub_record_is_javas_bytes() -> None:
    out = encode(pub())
    expected = (
        "Pub" + A + "1700000000123" + A + "DefaultRegion" + A + "pg" + A + "Orders" + A
        + "7F00000100002A9F0000000000000001" + A + "TagA" + A + "k1 k2" + A
        + "127.0.0.1:10911" + A + "11" + A + "7" + A + "0" + A
        + "7F00000100002A9F0000000000000000" + A + "true" + B
    )  # fmt: skip
    assert out.data == expected
    assert out.keys == ("7F00000100002A9F0000000000000001", "k1", "k2")


def test_sub_records_are_javas_bytes_with_null_for_missing_fields() -> None:
    beans = (
        TraceBean(msg_id="ID1", keys=None, retry_times=0),
        TraceBean(msg_id="ID2", keys="k9", retry_times=2),
    )
    before = TraceContext(
        TraceType.SubBefore, 1700000000200, beans, region_id=None, group_name="cg",
        request_id="REQ",
    )  # fmt: skip
    assert encode(before).data == (
        "SubBefore" + A + "1700000000200" + A + "null" + A + "cg" + A + "REQ" + A + "ID1" + A
        + "0" + A + "null" + B
        + "SubBefore" + A + "1700000000200" + A + "null" + A + "cg" + A + "REQ" + A + "ID2" + A
        + "2" + A + "k9" + B
    )  # fmt: skip
    assert encode(before).keys == ("ID1", "ID2", "k9")
    after = TraceContext(
        TraceType.SubAfter, 1700000000300, beans[:1], group_name="cg", cost_time=5,
        success=False, request_id="REQ", context_code=4,
    )  # fmt: skip
    assert encode(after).data == (
        "SubAfter" + A + "REQ" + A + "ID1" + A + "5" + A + "false" + A + "null" + A + "4" + A
        + "1700000000300" + A + "cg" + B
    )  # fmt: skip
    # Java 4.9.8 ends a CLOUD SubAfter record with CONTENT_SPLITOR and leaves time and group out.
    cloud = TraceContext(
        TraceType.SubAfter, 1, beans[:1], cost_time=5, success=True, request_id="REQ",
        cloud=True,
    )  # fmt: skip
    assert encode(cloud).data == "SubAfter" + A + "REQ" + A + "ID1" + A + "5" + A + "true" + A + (
        "null" + A + "0" + A
    )


def test_records_decode_field_by_field() -> None:
    data = encode(pub()).data + encode(
        TraceContext(
            TraceType.SubAfter, 9, (TraceBean(msg_id="X", keys="k"),), group_name="cg",
            cost_time=3, request_id="R", context_code=2, success=False,
        )
    ).data  # fmt: skip
    got = decode(data)
    assert got[0] == pub()
    assert got[1] == TraceContext(
        TraceType.SubAfter, 9, (TraceBean(msg_id="X", keys="k"),), group_name="cg",
        cost_time=3, request_id="R", context_code=2, success=False,
    )  # fmt: skip


def test_a_record_that_does_not_parse_is_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = encode(pub()).data
    bad = "Pub" + A + "not-a-time" + A + "r" + B + "SubBefore" + A + "1" + B
    with caplog.at_level(logging.WARNING, "rmqk.plugins.trace"):
        got = decode(bad + good, "trace message M1")
    assert got == [pub()]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "trace record 0 of trace message M1 does not parse" in lines[0]
    assert "not-a-time" in lines[0]
    assert "trace record 1 of trace message M1 does not parse (too few fields" in lines[1]


def test_a_full_queue_drops_and_counts_without_waiting(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> AsyncTraceDispatcher:
        d = AsyncTraceDispatcher("g", "CONSUME", None, ["127.0.0.1:1"], queue_size=3)
        with caplog.at_level(logging.DEBUG, "rmqk.plugins.trace"):
            results = [d.append(pub()) for _ in range(10)]
        assert results == [True] * 3 + [False] * 7
        return d

    d = asyncio.run(run())
    assert d.discarded == 7
    assert d.producer_group.startswith("_INNER_TRACE_PRODUCER-g-CONSUME-")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "trace queue is full" in warnings[0].getMessage()


# -- over real TCP ------------------------------------------------------------------------------


async def read_traces(broker: Any, topic: str, msg_id: str) -> list[TraceContext]:
    messages = await find_trace_messages([broker.namesrv_addr], topic, msg_id)
    return [v.context for v in trace_views(msg_id, messages)]


async def test_traces_of_sends_successes_failures_and_retries(
    broker_factory: Callable[..., Awaitable[Any]],
) -> None:
    broker = await broker_factory(delay_levels=FAST_DELAY_LEVELS)
    await create_topic(broker, "Traced", 2)
    producer = AsyncProducer("trace-pg", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True)
    await producer.start()
    try:
        ok = await producer.send(Message("Traced", b"fine", tags="TagA", keys=["k1", "k2"]))
        retried = await producer.send(Message("Traced", b"fail-once", tags="TagB"))
    finally:
        await producer.shutdown()
    assert trace.dispatcher_of("trace-pg", producer=True) is None  # flushed and gone

    attempts: dict[str, int] = {}
    consumer = AsyncPushConsumer("trace-cg", namesrv_addr=broker.namesrv_addr, **TRACED_FROM_FIRST)
    consumer.subscribe("Traced", "*")

    @consumer.register_listener
    def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            attempts[m.msg_id] = attempts.get(m.msg_id, 0) + 1
            if m.body == b"fail-once" and m.reconsume_times == 0:
                return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    await consumer.start()
    try:
        await wait_for(lambda: attempts.get(retried.msg_id) == 2, 30, "the retry")
        assert trace.dispatcher_of("trace-cg") is not None
    finally:
        await consumer.shutdown()
    assert get_plugin_manager().get_plugin(trace.RUNTIME_PLUGIN_NAME) is None

    ok_traces = await read_traces(broker, "RMQ_SYS_TRACE_TOPIC", ok.msg_id)
    kinds = [c.trace_type for c in ok_traces]
    assert kinds == [TraceType.Pub, TraceType.SubBefore, TraceType.SubAfter]
    pub_ctx, before, after = ok_traces
    assert pub_ctx.group_name == "trace-pg"
    assert pub_ctx.region_id == "DefaultRegion"
    assert pub_ctx.success is True
    assert pub_ctx.cost_time >= 0
    assert pub_ctx.beans == (
        TraceBean(
            topic="Traced",
            msg_id=ok.msg_id,
            offset_msg_id=ok.offset_msg_id,
            tags="TagA",
            keys="k1 k2",
            store_host=broker.broker_addr,
            body_length=4,
            msg_type=MessageType.Normal_Msg,
        ),
    )
    assert before.group_name == "trace-cg"
    assert before.beans == (TraceBean(msg_id=ok.msg_id, keys="k1 k2", retry_times=0),)
    assert after.request_id == before.request_id
    assert (after.group_name, after.success, after.context_code) == ("trace-cg", True, 0)
    assert after.beans == (TraceBean(msg_id=ok.msg_id, keys="k1 k2"),)

    retry_traces = await read_traces(broker, "RMQ_SYS_TRACE_TOPIC", retried.msg_id)
    subs = [c for c in retry_traces if c.trace_type is not TraceType.Pub]
    befores = [c for c in subs if c.trace_type is TraceType.SubBefore]
    afters = {c.request_id: c for c in subs if c.trace_type is TraceType.SubAfter}
    assert [b.beans[0].retry_times for b in befores] == [0, 1]
    first, second = (afters[b.request_id] for b in befores)
    assert (first.success, first.context_code) == (False, 4)  # RECONSUME_LATER: FAILED
    assert (second.success, second.context_code) == (True, 0)
    assert all(c.beans[0].keys is None for c in subs)  # Java writes "null" for no keys


async def test_an_unwritable_trace_topic_neither_slows_nor_stops_consumption(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await create_topic(broker, "Busy", 2)
    producer = AsyncProducer("busy-pg", namesrv_addr=broker.namesrv_addr)
    await producer.start()
    try:
        for i in range(200):
            await producer.send(Message("Busy", f"m{i}".encode()))
    finally:
        await producer.shutdown()
    seen: set[bytes] = set()
    # The broker refuses every send to this topic (NO_PERMISSION), as it would a trace topic
    # an ACL or a read-only broker forbids.
    consumer = AsyncPushConsumer(
        "busy-cg",
        namesrv_addr=broker.namesrv_addr,
        **TRACED_FROM_FIRST,
        customized_trace_topic="SCHEDULE_TOPIC_XXXX",
        consume_message_batch_max_size=1,
    )
    consumer.subscribe("Busy", "*")
    consumer.register_listener(lambda msgs: seen.update(m.body for m in msgs))
    begin = time.monotonic()
    with caplog.at_level(logging.DEBUG, "rmqk.plugins.trace"):
        await consumer.start()
        try:
            await wait_for(lambda: len(seen) == 200, 30, "all 200 messages")
            took = time.monotonic() - begin
            dispatcher = trace.dispatcher_of("busy-cg")
            assert dispatcher is not None
            await wait_for(lambda: dispatcher.discarded > 0, 10, "dropped trace records")
        finally:
            await consumer.shutdown()
    assert took < 20
    assert dispatcher.sent_records == 0
    assert dispatcher.discarded >= 200  # SubBefore and SubAfter of every batch, at least
    warnings = [
        r for r in caplog.records if r.name == "rmqk.plugins.trace" and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "SCHEDULE_TOPIC_XXXX" in warnings[0].getMessage()


async def test_lite_pull_traces_each_found_pull_as_java(broker: Any) -> None:
    await create_topic(broker, "LiteTraced", 1)
    producer = AsyncProducer("lite-pg", namesrv_addr=broker.namesrv_addr)
    await producer.start()
    try:
        sent = await producer.send(Message("LiteTraced", b"x", keys="lk"))
    finally:
        await producer.shutdown()
    consumer = AsyncLitePullConsumer(
        "lite-cg",
        namesrv_addr=broker.namesrv_addr,
        **TRACED_FROM_FIRST,
        customized_trace_topic="LiteTrace",
    )
    consumer.subscribe("LiteTraced", "*")
    await consumer.start()
    try:
        got: list[MessageExt] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = await consumer.poll(1000)
    finally:
        await consumer.shutdown()
    assert [m.msg_id for m in got] == [sent.msg_id]
    traces = await read_traces(broker, "LiteTrace", sent.msg_id)
    assert [c.trace_type for c in traces] == [TraceType.SubBefore, TraceType.SubAfter]
    assert traces[1].success and traces[1].group_name == "lite-cg"


def _watch_requests(broker: Any, refuse: int | None = None) -> list[RemotingCommand]:
    """Record the requests ``broker`` gets; answer ``refuse`` as a broker without it does."""
    seen: list[RemotingCommand] = []
    original = broker.processors.handle

    async def handle(conn: Any, request: RemotingCommand, st: int) -> Any:
        seen.append(request)
        if request.code == refuse:
            return RemotingCommand.response_to(
                request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not supported here"
            )
        return await original(conn, request, st)

    broker.processors.handle = handle
    return seen


async def test_trace_lookup_asks_the_index_and_scans_only_a_broker_that_cannot_query(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await create_topic(broker, "Looked", 1)
    async with AsyncProducer(
        "look-pg", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True
    ) as producer:
        sent = await producer.send(Message("Looked", b"x"))
        await producer.send(Message("Looked", b"y"))

    # As mqadmin queryMsgTraceById: one QUERY_MESSAGE by key, nothing pulled.
    seen = _watch_requests(broker)
    caplog.clear()
    with caplog.at_level(logging.INFO, "rmqk.plugins.trace"):
        (pub_ctx,) = await read_traces(broker, "RMQ_SYS_TRACE_TOPIC", sent.msg_id)
    assert pub_ctx.trace_type is TraceType.Pub and pub_ctx.beans[0].msg_id == sent.msg_id
    queries = [r for r in seen if r.code == RequestCode.QUERY_MESSAGE]
    assert [(r.ext_fields["topic"], r.ext_fields["key"]) for r in queries] == [
        ("RMQ_SYS_TRACE_TOPIC", sent.msg_id)
    ]
    assert not [r for r in seen if r.code == RequestCode.PULL_MESSAGE]
    assert not [r for r in caplog.records if r.name == "rmqk.plugins.trace"]

    # A broker without the index: the trace topic is read there, and the log says so.
    seen = _watch_requests(broker, refuse=RequestCode.QUERY_MESSAGE)
    caplog.clear()
    with caplog.at_level(logging.INFO, "rmqk.plugins.trace"):
        (again,) = await read_traces(broker, "RMQ_SYS_TRACE_TOPIC", sent.msg_id)
    assert again == pub_ctx
    assert [r for r in seen if r.code == RequestCode.PULL_MESSAGE]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "rmqk.plugins.trace"]
    assert broker.broker_addr in line and "cannot query messages by key" in line
    assert "reading trace topic RMQ_SYS_TRACE_TOPIC there from its first offset" in line


def test_admin_trace_prints_sender_store_time_and_consumers(
    broker_thread: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmqk.engine.sync import LitePullConsumer, Producer

    with Producer("admin-pg", namesrv_addr=broker_thread.namesrv_addr, enable_msg_trace=True) as p:
        sent = p.send(Message("AdminTraced", b"hello", tags="T1"))
    addr = broker_thread.namesrv_addr
    consumer = LitePullConsumer("admin-cg", namesrv_addr=addr, **TRACED_FROM_FIRST)
    consumer.subscribe("AdminTraced", "*")
    consumer.start()
    try:
        deadline = time.monotonic() + 20
        got: list[MessageExt] = []
        while not got and time.monotonic() < deadline:
            got = consumer.poll(1000)
    finally:
        consumer.shutdown()
    assert got
    code = main(["admin", "trace", sent.msg_id, "-n", broker_thread.namesrv_addr])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"trace of message {sent.msg_id} (RMQ_SYS_TRACE_TOPIC)"
    assert lines[1].split()[:2] == ["#Type", "#ProducerGroup"]
    pub_row = lines[2].split()
    assert pub_row[:2] == ["Pub", "admin-pg"]
    assert pub_row[-1] == "success" and pub_row[-2].endswith("ms")
    assert "(est.)" not in lines[2]  # the store time came from the broker
    sub_row = next(line for line in lines if line.startswith("Sub ")).split()
    assert sub_row[:2] == ["Sub", "admin-cg"]
    assert sub_row[-1] == "success" and sub_row[-3] == "0"  # retry times

    code = main(["admin", "trace", "00000000000000000000000000000000",
                 "-n", broker_thread.namesrv_addr])  # fmt: skip
    assert code == 1
    assert "no trace of message" in capsys.readouterr().out


# -- the hooks the plugin is built on ------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @hookimpl
    def rmqk_send_message_before(self, context: SendMessageContext) -> None:
        self.calls.append(("before", context.send_result))
        context.props["seen"] = True

    @hookimpl
    async def rmqk_send_message_after(self, context: SendMessageContext) -> None:
        self.calls.append(("after", context))

    @hookimpl
    def rmqk_client_started(self, context: ClientContext) -> None:
        self.calls.append(("started", context))

    @hookimpl
    async def rmqk_client_shutdown(self, context: ClientContext) -> None:
        self.calls.append(("shutdown", context))


async def _recorded_send(broker: Any) -> tuple[Recorder, Any]:
    recorder = Recorder()
    pm = get_plugin_manager()
    pm.register(recorder, name="test-recorder")
    try:
        async with AsyncProducer("hook-pg", namesrv_addr=broker.namesrv_addr) as producer:
            result = await producer.send(Message("Hooked", b"abc", tags="t", keys="k"))
    finally:
        pm.unregister(name="test-recorder")
    return recorder, result


async def test_hook_rmqk_send_message_before(broker: Any) -> None:
    recorder, _ = await _recorded_send(broker)
    befores = [c for c in recorder.calls if c[0] == "before"]
    assert befores == [("before", None)]  # called before the answer came


async def test_hook_rmqk_send_message_after(broker: Any) -> None:
    recorder, result = await _recorded_send(broker)
    (_, ctx), = [c for c in recorder.calls if c[0] == "after"]  # fmt: skip
    assert isinstance(ctx, SendMessageContext)
    assert ctx.props == {"seen": True}
    assert ctx.send_result == result and result.status is SendStatus.SEND_OK
    assert (ctx.producer_group, ctx.topic, ctx.body_length) == ("hook-pg", "Hooked", 3)
    assert (ctx.properties["TAGS"], ctx.properties["KEYS"]) == ("t", "k")
    assert ctx.broker_addr == broker.broker_addr and ctx.mode == "SYNC"
    assert ctx.msg_type == "Normal_Msg" and ctx.exception is None


async def test_hook_rmqk_client_started(broker: Any) -> None:
    recorder, _ = await _recorded_send(broker)
    kinds = [c[0] for c in recorder.calls]
    assert kinds[0] == "started" and kinds[-1] == "shutdown"
    ctx = recorder.calls[0][1]
    assert (ctx.role, ctx.group) == (ClientRole.PRODUCER, "hook-pg")
    assert ctx.namesrv_addrs == (broker.namesrv_addr,)
    assert ctx.options.enable_msg_trace is False


async def test_hook_rmqk_client_shutdown(broker: Any) -> None:
    recorder = Recorder()
    pm = get_plugin_manager()
    pm.register(recorder, name="test-recorder")
    try:
        consumer = AsyncPushConsumer("hook-cg", namesrv_addr=broker.namesrv_addr)
        consumer.subscribe("Hooked", "*")
        consumer.register_listener(lambda msgs: None)
        await consumer.start()
        await consumer.shutdown()
    finally:
        pm.unregister(name="test-recorder")
    (_, started), (_, stopped) = [c for c in recorder.calls if c[0] in ("started", "shutdown")]
    assert started == stopped and started.role is ClientRole.PUSH_CONSUMER
    assert started.client is consumer and started.group == "hook-cg"


# -- the documented example -------------------------------------------------------------------


def test_the_operations_guide_trace_example_runs(
    broker_thread: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    section = page.split("## Message trace", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    code = code.replace("127.0.0.1:9876", broker_thread.namesrv_addr)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False
    )
    assert run.returncode == 0, run.stderr
    msg_id = run.stdout.split("sent ", 1)[1].split()[0]
    assert main(["admin", "trace", msg_id, "-n", broker_thread.namesrv_addr]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^Pub\s+trace-demo-producer\s", out, re.M), out
    assert re.search(r"^Sub\s+trace-demo-consumer\s.*\s0\s+\d+ms\s+success$", out, re.M), out


def test_end_transaction_and_cloud_records_round_trip() -> None:
    end = TraceContext(
        TraceType.EndTransaction,
        5,
        (
            TraceBean(
                topic="T", msg_id="M", tags=None, keys="k", store_host="h:1",
                msg_type=MessageType.Trans_Msg_Half, transaction_id="TX",
                transaction_state="COMMIT_MESSAGE", from_transaction_check=True,
            ),
        ),
        region_id="DefaultRegion",
        group_name="pg",
    )  # fmt: skip
    data = encode(end).data
    assert data == A.join(
        ["EndTransaction", "5", "DefaultRegion", "pg", "T", "M", "null", "k", "h:1", "1", "TX",
         "COMMIT_MESSAGE", "true"]
    ) + B  # fmt: skip
    assert decode(data) == [end]
    cloud = TraceContext(
        TraceType.SubAfter, 0, (TraceBean(msg_id="M", keys="k"),), group_name="", cost_time=1,
        request_id="R", cloud=True,
    )  # fmt: skip
    assert decode(encode(cloud).data) == [cloud]
