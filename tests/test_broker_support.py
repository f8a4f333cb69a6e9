"""A tiny raw remoting client for the embedded broker's tests (no tests here).

It speaks frames through the remoting plugin's codec and nothing else, so the
broker is tested over real TCP independently of the ``tcp`` transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rmqk.model.message import MessageExt, format_properties
from rmqk.wire.frame import FrameDecoder, SerializeType, encode_frame
from rmqk.wire.message_codec import decode_messages
from rmqk.wire.protocol import LanguageCode, RemotingCommand, RequestCode, stringify_fields

JAVA_4_9_8 = 409


class RawClient:
    """One connection: requests with opaque matching, and a queue of broker→client requests."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.serialize_type = serialize_type
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.inbound: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.inbound_types: list[SerializeType] = []
        self.response_types: dict[int, SerializeType] = {}
        self.answer: dict[int, Callable[[RemotingCommand], RemotingCommand | None]] = {}
        self.closed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())
        self._next_opaque = 1000

    @classmethod
    async def connect(
        cls, addr: str, serialize_type: SerializeType = SerializeType.JSON
    ) -> RawClient:
        host, _, port = addr.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, serialize_type)

    async def _read(self) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                for frame in decoder.feed_typed(data):
                    cmd = frame.command
                    if cmd.is_response:
                        self.response_types[cmd.opaque] = frame.serialize_type
                        fut = self.pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    else:
                        self.inbound_types.append(frame.serialize_type)
                        handler = self.answer.get(cmd.code)
                        if handler is not None:
                            reply = handler(cmd)
                            if reply is not None:
                                reply.opaque = cmd.opaque
                                reply.flag |= 1
                                self.writer.write(encode_frame(reply, self.serialize_type))
                        await self.inbound.put(cmd)
        except (ConnectionError, OSError):
            return
        finally:
            self.closed.set()
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    def make(
        self,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        version: int = JAVA_4_9_8,
    ) -> RemotingCommand:
        self._next_opaque += 1
        return RemotingCommand(
            code,
            ext_fields=stringify_fields(fields or {}),
            body=body,
            opaque=self._next_opaque,
            language=LanguageCode.JAVA,
            version=version,
        )

    async def call(
        self,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        timeout: float = 10.0,
        version: int = JAVA_4_9_8,
    ) -> RemotingCommand:
        return await self.send(self.make(code, fields, body, version=version), timeout=timeout)

    async def send(self, request: RemotingCommand, *, timeout: float = 10.0) -> RemotingCommand:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[request.opaque] = fut
        self.writer.write(encode_frame(request, self.serialize_type))
        return await asyncio.wait_for(fut, timeout)

    def oneway(
        self, code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
    ) -> None:
        request = self.make(code, fields, body)
        request.mark_oneway()
        self.writer.write(encode_frame(request, self.serialize_type))

    def write_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def next_inbound(self, timeout: float = 5.0) -> RemotingCommand:
        return await asyncio.wait_for(self.inbound.get(), timeout)

    def drain_inbound(self) -> list[RemotingCommand]:
        out = []
        while not self.inbound.empty():
            out.append(self.inbound.get_nowait())
        return out

    # -- conveniences --------------------------------------------------------------

    async def send_message(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | None = None,
        queue_id: int = 0,
        properties: Mapping[str, str] | None = None,
        producer_group: str = "test-producer",
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int | None = None,
    ) -> RemotingCommand:
        props = dict(properties or {})
        if tags is not None:
            props["TAGS"] = tags
        if keys is not None:
            props["KEYS"] = keys
        fields: dict[str, object] = {
            "a": producer_group,
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": sys_flag,
            "g": born_timestamp if born_timestamp is not None else int(time.time() * 1000),
            "h": flag,
            "i": format_properties(props),
            "j": reconsume_times,
            "k": False,
            "l": max_reconsume_times,
        }
        return await self.call(RequestCode.SEND_MESSAGE_V2, fields, body)

    async def pull(
        self,
        topic: str,
        queue_id: int = 0,
        offset: int = 0,
        *,
        group: str = "test-group",
        max_msgs: int = 32,
        subscription: str | None = "*",
        sys_flag: int | None = None,
        suspend_ms: int = 0,
        commit_offset: int = 0,
        timeout: float = 10.0,
    ) -> RemotingCommand:
        if sys_flag is None:
            sys_flag = 0x4 if subscription is not None else 0
            if suspend_ms:
                sys_flag |= 0x2
        fields: dict[str, object] = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": subscription,
            "subVersion": 0,
            "expressionType": "TAG",
        }
        return await self.call(RequestCode.PULL_MESSAGE, fields, timeout=timeout)

    async def heartbeat(
        self,
        client_id: str,
        group: str | None = None,
        subscriptions: Mapping[str, str] | None = None,
        *,
        producer_groups: Iterable[str] = (),
        message_model: str = "CLUSTERING",
        sub_version: int = 1,
    ) -> RemotingCommand:
        from rmqk.model import build_subscription

        consumers = []
        if group is not None:
            subs = []
            for topic, expression in (subscriptions or {}).items():
                sub = build_subscription(topic, expression)
                subs.append(
                    {
                        "classFilterMode": False,
                        "codeSet": sorted(sub.code_set),
                        "expressionType": "TAG",
                        "subString": sub.sub_string,
                        "subVersion": sub_version,
                        "tagsSet": sorted(sub.tags_set),
                        "topic": topic,
                    }
                )
            consumers.append(
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": group,
                    "messageModel": message_model,
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
            )
        body = {
            "clientID": client_id,
            "consumerDataSet": consumers,
            "producerDataSet": [{"groupName": g} for g in producer_groups],
        }
        return await self.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())


def messages_of(response: RemotingCommand) -> list[MessageExt]:
    return decode_messages(response.body)


def json_body(response: RemotingCommand) -> Any:
    return json.loads(response.body)
