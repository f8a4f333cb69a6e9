"""The broker's fast paths: inline request handling, inline held-pull answers, responses.

Over real TCP on loopback, like the other broker tests.
"""

from __future__ import annotations

import asyncio
import enum
import socket

import pytest
from test_broker_support import RawClient, messages_of

from rmqk.plugins.broker.commands import make_response
from rmqk.plugins.broker.server import RemotingServer
from rmqk.wire.frame import SerializeType, encode_frame
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode, stringify_fields

pytestmark = pytest.mark.timeout(60)


class _Color(enum.Enum):
    RED = "red"


def test_make_response_fields_are_stringified_as_java_does() -> None:
    request = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=77)
    fields: dict[str, object] = {
        "s": "text",
        "i": 12,
        "neg": -3,
        "t": True,
        "f": False,
        "none": None,
        "code": ResponseCode.PULL_NOT_FOUND,
        "color": _Color.RED,
    }
    response = make_response(request, ResponseCode.SUCCESS, "ok", fields, b"body")
    assert response.ext_fields == stringify_fields(fields)
    assert response.ext_fields["t"] == "true"
    assert response.ext_fields["code"] == str(int(ResponseCode.PULL_NOT_FOUND))
    assert "none" not in response.ext_fields
    assert response.opaque == 77
    assert response.is_response
    assert (response.code, response.remark, response.body) == (ResponseCode.SUCCESS, "ok", b"body")
    assert response.version == 409


async def test_unfiltered_held_pull_is_answered_by_the_put_itself(broker_factory) -> None:
    broker = await broker_factory(hold_check_interval=60)
    consumer = await RawClient.connect(broker.broker_addr)
    producer = await RawClient.connect(broker.broker_addr)
    try:
        await producer.send_message("Inline", b"seed")
        pull = asyncio.ensure_future(consumer.pull("Inline", offset=1, suspend_ms=20_000))
        while broker.processors.holds.held_count == 0:
            await asyncio.sleep(0.01)
        # Stored from the loop thread, as a send is: the held pull is answered before
        # put_message returns, not at some later loop iteration.
        result = broker.store.put_message(
            topic="Inline",
            queue_id=0,
            body=b"direct",
            flag=0,
            properties_raw="",
            sys_flag=0,
            born_timestamp=0,
            born_host="127.0.0.1:1",
        )
        assert result.ok
        assert broker.processors.holds.held_count == 0
        response = await asyncio.wait_for(pull, 10)
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in messages_of(response)] == [b"direct"]
        assert response.ext_fields["nextBeginOffset"] == "2"
    finally:
        await consumer.close()
        await producer.close()


async def test_filtered_held_pull_still_ignores_other_tags_inline(broker_factory) -> None:
    broker = await broker_factory(hold_check_interval=60)
    consumer = await RawClient.connect(broker.broker_addr)
    producer = await RawClient.connect(broker.broker_addr)
    try:
        await producer.send_message("InlineTags", b"seed", tags="A")
        pull = asyncio.ensure_future(
            consumer.pull("InlineTags", offset=1, subscription="A", suspend_ms=20_000)
        )
        while broker.processors.holds.held_count == 0:
            await asyncio.sleep(0.01)
        await producer.send_message("InlineTags", b"other", tags="B")
        assert broker.processors.holds.held_count == 1
        assert not pull.done()
        await producer.send_message("InlineTags", b"wanted", tags="A")
        response = await asyncio.wait_for(pull, 10)
        assert [m.body for m in messages_of(response)] == [b"wanted"]
    finally:
        await consumer.close()
        await producer.close()


class _SlowFirst:
    """A server handler whose first request suspends until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.order: list[int] = []

    async def handle(self, conn, request, serialize_type):
        number = int(request.ext_fields["n"])
        if number == 0:
            await self.release.wait()
            await asyncio.sleep(0)
        self.order.append(number)
        return make_response(request, fields={"n": number})


async def _raw_connection(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _read_response(reader: asyncio.StreamReader) -> RemotingCommand:
    from rmqk.wire.frame import decode_frame

    length = int.from_bytes(await reader.readexactly(4), "big")
    return decode_frame(await reader.readexactly(length))


async def test_requests_after_a_suspended_handler_wait_their_turn() -> None:
    slow = _SlowFirst()
    server = RemotingServer("order", slow.handle)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await _raw_connection(port)
    try:
        frames = b"".join(
            encode_frame(RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"n": str(n)}))
            for n in range(3)
        )
        writer.write(frames)
        await asyncio.sleep(0.3)
        assert slow.order == [], "requests 1 and 2 must wait for the suspended request 0"
        slow.release.set()
        answers = [await asyncio.wait_for(_read_response(reader), 10) for _ in range(3)]
        assert [a.ext_fields["n"] for a in answers] == ["0", "1", "2"]
        assert slow.order == [0, 1, 2]
    finally:
        writer.close()
        await server.stop()


async def test_stop_while_a_handler_is_suspended_does_not_hang() -> None:
    slow = _SlowFirst()
    server = RemotingServer("stuck", slow.handle)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await _raw_connection(port)
    try:
        writer.write(encode_frame(RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"n": "0"})))
        await asyncio.sleep(0.2)
        assert len(server.connections) == 1
        await asyncio.wait_for(server.stop(), 10)
        assert not server.connections
        assert await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()


async def test_frames_split_into_single_bytes_and_coalesced_are_all_answered() -> None:
    async def echo(conn, request, serialize_type):
        return make_response(request, fields={"n": request.ext_fields["n"]}, body=request.body)

    server = RemotingServer("split", echo)
    port = await server.start("127.0.0.1", 0)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        first = encode_frame(
            RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"n": "0"}, body=b"x" * 300),
            SerializeType.ROCKETMQ,
        )
        for i in range(len(first)):
            writer.write(first[i : i + 1])
            await writer.drain()
            if i % 50 == 0:
                await asyncio.sleep(0.001)
        rest = b"".join(
            encode_frame(RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"n": str(n)}))
            for n in range(1, 20)
        )
        writer.write(rest)
        answers = [await asyncio.wait_for(_read_response(reader), 10) for _ in range(20)]
        assert [a.ext_fields["n"] for a in answers] == [str(n) for n in range(20)]
        assert answers[0].body == b"x" * 300
    finally:
        writer.close()
        await server.stop()


async def test_a_bad_frame_length_closes_only_that_connection() -> None:
    async def echo(conn, request, serialize_type):
        return make_response(request)

    server = RemotingServer("bad", echo)
    port = await server.start("127.0.0.1", 0)
    good_reader, good_writer = await _raw_connection(port)
    bad_reader, bad_writer = await _raw_connection(port)
    try:
        bad_writer.write((2).to_bytes(4, "big") + b"zz")
        assert await asyncio.wait_for(bad_reader.read(), 10) == b""
        good_writer.write(encode_frame(RemotingCommand(RequestCode.HEART_BEAT)))
        answer = await asyncio.wait_for(_read_response(good_reader), 10)
        assert answer.code == ResponseCode.SUCCESS
    finally:
        good_writer.close()
        bad_writer.close()
        await server.stop()
