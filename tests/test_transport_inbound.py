"""Requests a broker sends to the client, answered as Java's ClientRemotingProcessor does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pluggy
import pytest
from test_transport_support import PeerConnection, ScriptedServer, config

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi import hookspecs
from rmqk.spi.hookspecs import hookimpl
from rmqk.spi.transport import ConsumeMessageDirectlyResult, ConsumerRunningInfo, ProcessQueueInfo
from rmqk.wire import bodies
from rmqk.wire.message_codec import encode_stored_message
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(30)

MQ0 = MessageQueue("Orders", "broker-a", 0)
MQ1 = MessageQueue("Orders", "broker-a", 1)
RUNNING_PQ = ProcessQueueInfo(
    commit_offset=5,
    cached_msg_min_offset=5,
    cached_msg_max_offset=7,
    cached_msg_count=3,
    cached_msg_size_in_mib=0,
    transaction_msg_min_offset=0,
    transaction_msg_max_offset=0,
    transaction_msg_count=0,
    locked=False,
    try_unlock_times=0,
    last_lock_timestamp=0,
    droped=False,
    last_pull_timestamp=1,
    last_consume_timestamp=2,
)


class Engine:
    """An InboundHandler that records what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.called = asyncio.Event()
        self.block: asyncio.Event | None = None

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        self.called.set()

    async def notify_consumer_ids_changed(self, group: str) -> None:
        self._record("notify", group)
        if self.block is not None:
            await self.block.wait()

    async def reset_offset(
        self, topic: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        self._record("reset", topic, group, dict(offsets))

    async def get_consumer_status(self, topic: str, group: str) -> dict[MessageQueue, int]:
        self._record("status", topic, group)
        if group == "unsupported":
            raise NotImplementedError
        return {MQ0: 10, MQ1: 20}

    async def get_consumer_running_info(self, group: str, jstack: bool) -> ConsumerRunningInfo:
        self._record("running", group, jstack)
        if group != "g1":
            raise LookupError(group)
        return ConsumerRunningInfo(
            properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
            mq_table={MQ1: RUNNING_PQ},
            jstack="stack" if jstack else None,
        )

    async def consume_message_directly(
        self, group: str, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        self._record("direct", group, msg, broker_name)
        if group == "boom":
            raise ValueError("listener exploded")
        if group != "g1":
            raise LookupError(group)
        return ConsumeMessageDirectlyResult(
            order=False,
            auto_commit=True,
            consume_result="CR_SUCCESS",
            remark=None,
            spent_time_mills=3,
        )


# What a test gets from ``linked``: the transport, the peer's end, the engine.
Linked = tuple[TcpTransport, PeerConnection, Engine]


@pytest.fixture
async def linked() -> AsyncIterator[Linked]:
    """A transport connected to a peer, with an engine registered."""
    async with ScriptedServer() as server:
        transport = TcpTransport(config(server.addr))
        engine = Engine()
        transport.set_inbound_handler(engine)
        try:
            await transport.invoke(server.addr, RemotingCommand.request(RequestCode.HEART_BEAT))
            yield transport, server.connections[0], engine
        finally:
            await transport.close()


async def _no_answer(conn: PeerConnection, wait: float = 0.3) -> bool:
    try:
        await asyncio.wait_for(conn.responses.get(), wait)
    except TimeoutError:
        return True
    return False


async def test_notify_consumer_ids_changed_is_oneway(linked: Linked) -> None:
    _, conn, engine = linked
    request = RemotingCommand.request(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"}
    )
    request.mark_oneway()
    conn.send(request)
    await asyncio.wait_for(engine.called.wait(), 5)
    assert engine.calls == [("notify", ("g1",))]
    assert await _no_answer(conn)


async def test_reset_offset_reads_fastjson_body_and_sends_nothing(linked: Linked) -> None:
    _, conn, engine = linked
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:5,'
        b'{"brokerName":"broker-a","queueId":1,"topic":"Orders"}:9}}'
    )
    request = RemotingCommand.request(
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
        {"topic": "Orders", "group": "g1", "timestamp": 1700000000000, "isForce": True},
        body=body,
    )
    conn.send(request)
    await asyncio.wait_for(engine.called.wait(), 5)
    assert engine.calls == [("reset", ("Orders", "g1", {MQ0: 5, MQ1: 9}))]
    assert await _no_answer(conn)


async def test_get_consumer_status(linked: Linked) -> None:
    _, conn, engine = linked
    request = RemotingCommand.request(
        RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "Orders", "group": "g1"}
    )
    response = await conn.push(request)
    assert engine.calls == [("status", ("Orders", "g1"))]
    assert response.code == ResponseCode.SUCCESS
    assert response.opaque == request.opaque and response.is_response
    assert bodies.decode_consumer_status(response.body) == {MQ0: 10, MQ1: 20}
    assert response.body == (
        b'{"consumerTable":{},"messageQueueTable":{'
        b'{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:10,'
        b'{"brokerName":"broker-a","queueId":1,"topic":"Orders"}:20}}'
    )


async def test_get_consumer_running_info(linked: Linked) -> None:
    _, conn, engine = linked
    response = await conn.push(
        RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "g1", "clientId": "ip@1", "jstackEnable": True},
        )
    )
    assert response.code == ResponseCode.SUCCESS
    # The transport writes the engine's value as fastjson does: the queue object as the key.
    assert response.body.startswith(
        b'{"jstack":"stack","mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"Orders"}:'
        b'{"cachedMsgCount":3,'
    )
    assert bodies.decode_consumer_running_info(response.body) == ConsumerRunningInfo(
        properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
        mq_table={MQ1: RUNNING_PQ},
        jstack="stack",
    )
    assert engine.calls == [("running", ("g1", True))]
    missing = await conn.push(
        RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "nope", "jstackEnable": False}
        )
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == "The Consumer Group <nope> not exist in this consumer"


async def test_consume_message_directly(linked: Linked) -> None:
    _, conn, engine = linked
    record = encode_stored_message(
        topic="Orders", body=b"direct", queue_id=1, queue_offset=8, store_host="127.0.0.1:10911"
    )
    fields = {"consumerGroup": "g1", "clientId": "ip@1", "msgId": "X", "brokerName": "broker-a"}
    response = await conn.push(
        RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields, body=record)
    )
    assert response.code == ResponseCode.SUCCESS
    assert json.loads(response.body) == {
        "autoCommit": True,
        "consumeResult": "CR_SUCCESS",
        "order": False,
        "spentTimeMills": 3,
    }
    ((name, (group, msg, broker)),) = engine.calls
    assert (name, group, broker) == ("direct", "g1", "broker-a")
    assert (msg.body, msg.queue_offset, msg.broker_name) == (b"direct", 8, "broker-a")
    missing = await conn.push(
        RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, {**fields, "consumerGroup": "other"}, body=record
        )
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == "The Consumer Group <other> not exist in this consumer"


async def test_handler_exception_is_a_system_error(linked: Linked) -> None:
    _, conn, _ = linked
    record = encode_stored_message(topic="Orders", body=b"x", store_host="127.0.0.1:10911")
    response = await conn.push(
        RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "boom"}, body=record
        )
    )
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None
    assert response.remark.startswith("ValueError: listener exploded, consume_message_directly(")


async def test_unknown_code_is_not_supported(linked: Linked) -> None:
    _, conn, engine = linked
    response = await conn.push(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 39 not supported"
    assert engine.calls == []


async def test_handler_raising_not_implemented_is_not_supported(linked: Linked) -> None:
    _, conn, _ = linked
    response = await conn.push(
        RemotingCommand.request(
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "T", "group": "unsupported"}
        )
    )
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 221 not supported"


async def test_no_handler_is_not_supported(linked: Linked) -> None:
    transport, conn, engine = linked
    transport.set_inbound_handler(None)
    response = await conn.push(
        RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g1"})
    )
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 307 not supported"
    assert engine.calls == []


async def test_slow_handler_blocks_neither_reads_nor_other_requests(linked: Linked) -> None:
    transport, conn, engine = linked
    engine.block = asyncio.Event()
    conn.send(
        RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"})
    )
    await asyncio.wait_for(engine.called.wait(), 5)
    # The notify handler is stuck; responses and other pushed requests still flow.
    response = await transport.invoke(conn.server.addr, RemotingCommand.request(30), 3000)
    assert response.code == ResponseCode.SUCCESS
    status = await conn.push(
        RemotingCommand.request(
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "Orders", "group": "g1"}
        )
    )
    assert status.code == ResponseCode.SUCCESS
    engine.block.set()


class HookRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int | None]] = []

    @hookimpl
    def rmqk_before_request(self, address: str, request: RemotingCommand) -> None:
        self.events.append(("before", address, request.code, None))
        request.ext_fields["traced"] = "yes"

    @hookimpl
    def rmqk_after_response(
        self, address: str, request: RemotingCommand, response: RemotingCommand | None
    ) -> None:
        self.events.append(
            ("after", address, request.code, None if response is None else response.code)
        )


async def test_hook_rmqk_after_response() -> None:
    """Called after sync responses and around broker-pushed requests, not for oneway sends."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    recorder = HookRecorder()
    pm.register(recorder)
    async with ScriptedServer() as server:
        transport = TcpTransport(config(server.addr), pm.hook)
        transport.set_inbound_handler(Engine())
        try:
            await transport.invoke(server.addr, RemotingCommand.request(30), 2000)
            await transport.invoke_oneway(server.addr, RemotingCommand.request(15))
            await server.wait_requests(2)
            assert all(r.field("traced") == "yes" for r in server.requests)
            conn = server.connections[0]
            await conn.push(
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "T", "group": "g1"}
                )
            )
            notify = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"}
            )
            notify.mark_oneway()
            conn.send(notify)
            async with asyncio.timeout(5):
                while len(recorder.events) < 7:
                    await asyncio.sleep(0.02)
            a = server.addr
            assert recorder.events == [
                ("before", a, 30, None),
                ("after", a, 30, 0),
                ("before", a, 15, None),  # a oneway send gets no after-response call
                ("before", a, 221, None),
                ("after", a, 221, 0),
                ("before", a, 40, None),
                ("after", a, 40, None),  # handled, nothing answered
            ]
        finally:
            await transport.close()
