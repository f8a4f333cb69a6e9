"""Requests brokers send the client, answered as Java's ``ClientRemotingProcessor`` does.

Each request code maps to a function that reads the request, calls the engine's
:class:`~rmqk.spi.transport.InboundHandler` and builds the answer. The RPC hooks run
around it: ``rmqk_before_request`` before the request is handled,
``rmqk_after_response`` after (with the answer, or None).

Handler conventions beyond :class:`~rmqk.spi.transport.InboundHandler`:
``get_consumer_running_info`` and ``consume_message_directly`` may raise
``LookupError`` (or return None) for a group this client does not have; the
broker then gets Java's SYSTEM_ERROR "The Consumer Group <g> not exist in this
consumer". Any other exception is answered SYSTEM_ERROR with its description.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Protocol

from rmqk.model.message import MessageExt, MessageProperty, parse_properties
from rmqk.plugins.remoting.connection import Connection
from rmqk.spi.transport import (
    DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
    CheckTransactionStateRequest,
    ConsumerRunningInfo,
    InboundHandler,
)
from rmqk.wire import bodies
from rmqk.wire.compression import inflate
from rmqk.wire.frame import SerializeType
from rmqk.wire.message_codec import decode_messages
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["RequestHooks", "exception_simple_desc", "serve"]

log = logging.getLogger("rmqk.remoting")

# Java's ClientRemotingProcessor remark when a group is not in this client.
_GROUP_NOT_HERE = "The Consumer Group <{}> not exist in this consumer"
# MessageSysFlag.COMPRESSED_FLAG
_COMPRESSED_FLAG = 0x1


class RequestHooks(Protocol):
    """The RPC hooks run around a served request."""

    def before_request(self, addr: str, request: RemotingCommand) -> None: ...

    def after_response(
        self, addr: str, request: RemotingCommand, response: RemotingCommand | None
    ) -> None: ...


# Each takes the handler, the request and the address of the broker that sent it.
InboundFn = Callable[[InboundHandler, RemotingCommand, str], Awaitable[RemotingCommand | None]]


def exception_simple_desc(exc: BaseException) -> str:
    """The remark of a SYSTEM_ERROR answer: the exception and where it was raised
    (RemotingHelper.exceptionSimpleDesc)."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f", {last.name}({os.path.basename(last.filename)}:{last.lineno})"
    return text


async def serve(
    hooks: RequestHooks,
    handler: InboundHandler | None,
    conn: Connection,
    cmd: RemotingCommand,
    st: SerializeType,
) -> None:
    """Answer one broker-pushed request on ``conn`` (unless it is oneway)."""
    fn = _INBOUND.get(cmd.code)
    response: RemotingCommand | None
    if fn is None or handler is None:
        response = _not_supported(cmd)
        # Tools run without a handler and still get NOTIFY_CONSUMER_IDS_CHANGED.
        level = logging.WARNING if fn is None else logging.DEBUG
        log.log(level, "%s: request code %d is not supported here", conn.addr, cmd.code)
    else:
        try:
            hooks.before_request(conn.addr, cmd)
            response = await fn(handler, cmd, conn.addr)
            hooks.after_response(conn.addr, cmd, response)
        except NotImplementedError:
            response = _not_supported(cmd)
        except Exception as exc:
            log.exception("request code %d from %s failed", cmd.code, conn.addr)
            response = RemotingCommand.response_to(
                cmd, ResponseCode.SYSTEM_ERROR, exception_simple_desc(exc)
            )
    # A oneway sender keeps no record of its request, so an answer would only be
    # logged by the peer as unmatched.
    if response is not None and not cmd.is_oneway:
        conn.send_response(response, st)


def _not_supported(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.response_to(
        cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
    )


def _group_missing(cmd: RemotingCommand, group: str) -> RemotingCommand:
    return RemotingCommand.response_to(
        cmd, ResponseCode.SYSTEM_ERROR, _GROUP_NOT_HERE.format(group)
    )


async def _notify_consumer_ids_changed(
    handler: InboundHandler, cmd: RemotingCommand, _addr: str
) -> RemotingCommand | None:
    await handler.notify_consumer_ids_changed(cmd.field("consumerGroup") or "")
    return None


async def _reset_offset(
    handler: InboundHandler, cmd: RemotingCommand, _addr: str
) -> RemotingCommand | None:
    offsets = bodies.decode_reset_offset(cmd.body) if cmd.body else {}
    await handler.reset_offset(cmd.field("topic") or "", cmd.field("group") or "", offsets)
    return None


async def _get_consumer_status(
    handler: InboundHandler, cmd: RemotingCommand, _addr: str
) -> RemotingCommand | None:
    offsets = await handler.get_consumer_status(cmd.field("topic") or "", cmd.field("group") or "")
    return RemotingCommand.response_to(cmd, body=bodies.encode_consumer_status(offsets))


async def _get_consumer_running_info(
    handler: InboundHandler, cmd: RemotingCommand, _addr: str
) -> RemotingCommand | None:
    group = cmd.field("consumerGroup") or ""
    jstack = (cmd.field("jstackEnable") or "false").lower() == "true"
    try:
        info: ConsumerRunningInfo | None = await handler.get_consumer_running_info(group, jstack)
    except LookupError:
        info = None
    if info is None:
        return _group_missing(cmd, group)
    return RemotingCommand.response_to(cmd, body=bodies.encode_consumer_running_info(info))


async def _consume_message_directly(
    handler: InboundHandler, cmd: RemotingCommand, _addr: str
) -> RemotingCommand | None:
    group = cmd.field("consumerGroup") or ""
    broker_name = cmd.field("brokerName")
    messages = decode_messages(cmd.body, broker_name or "")
    if not messages:
        return RemotingCommand.response_to(
            cmd, ResponseCode.SYSTEM_ERROR, "CONSUME_MESSAGE_DIRECTLY request holds no message"
        )
    try:
        result = await handler.consume_message_directly(group, messages[0], broker_name)
    except LookupError:
        return _group_missing(cmd, group)
    if result is None:  # Java's contract; a handler typed looser than ours may do it
        return _group_missing(cmd, group)  # type: ignore[unreachable,unused-ignore]
    return RemotingCommand.response_to(
        cmd, body=bodies.encode_consume_message_directly_result(result)
    )


def _required_long(cmd: RemotingCommand, name: str) -> int:
    """A @CFNotNull Long of a request header; a missing one fails the request, as in Java."""
    value = cmd.field(name)
    if value is None:
        raise ValueError(f"the request has no {name}")
    return int(value)


async def _check_transaction_state(
    handler: InboundHandler, cmd: RemotingCommand, addr: str
) -> RemotingCommand | None:
    # Java's ClientRemotingProcessor answers nothing (the broker sent it oneway); the
    # producer's verdict goes back as an END_TRANSACTION on this same connection.
    if getattr(handler, "check_transaction_state", None) is None:
        raise NotImplementedError  # an engine without producers: answered not supported
    header = CheckTransactionStateRequest(
        tran_state_table_offset=_required_long(cmd, "tranStateTableOffset"),
        commit_log_offset=_required_long(cmd, "commitLogOffset"),
        msg_id=cmd.field("msgId"),
        transaction_id=cmd.field("transactionId"),
        offset_msg_id=cmd.field("offsetMsgId"),
        broker_name=cmd.field("bname"),
    )
    messages = decode_messages(cmd.body, header.broker_name or "") if cmd.body else []
    if not messages:
        log.warning("checkTransactionState from %s, decode message failed", addr)
        return None
    await handler.check_transaction_state(addr, header, messages[0])
    return None


def _socket_address(text: str | None) -> str:
    """A reply's born or store host: "ip:port" from 4.9.8 brokers; the brokers before
    4.9.x wrote ``SocketAddress.toString()`` ("name/1.2.3.4:5"), read the same."""
    return (text or "").rpartition("/")[2]


async def _push_reply_message(
    handler: InboundHandler, cmd: RemotingCommand, addr: str
) -> RemotingCommand | None:
    # ClientRemotingProcessor.receiveReplyMessage: the reply to one of our requests,
    # its header ReplyMessageRequestHeader, its body as the responder sent it.
    if getattr(handler, "receive_reply_message", None) is None:
        raise NotImplementedError  # an engine without producers: answered not supported
    receive_time = int(time.time() * 1000)
    try:
        sys_flag = int(cmd.field("sysFlag") or 0)
        body = cmd.body
        if sys_flag & _COMPRESSED_FLAG:
            try:
                body = inflate(body, sys_flag, DEFAULT_MAX_DECOMPRESSED_BODY_SIZE)
            except ValueError as exc:
                # Java logs and hands over the body as it came; so does rmqk, loudly.
                log.warning("reply message from %s: body does not uncompress: %s", addr, exc)
        props = parse_properties(cmd.field("properties"))
        props[MessageProperty.REPLY_MESSAGE_ARRIVE_TIME] = str(receive_time)
        reconsume = cmd.field("reconsumeTimes")
        reply = MessageExt(
            topic=cmd.field("topic") or "",
            body=body,
            queue_id=int(cmd.field("queueId") or 0),
            flag=int(cmd.field("flag") or 0),
            sys_flag=sys_flag,
            born_timestamp=int(cmd.field("bornTimestamp") or 0),
            born_host=_socket_address(cmd.field("bornHost")) or "127.0.0.1:0",
            store_timestamp=int(cmd.field("storeTimestamp") or 0),
            store_host=_socket_address(cmd.field("storeHost")) or "127.0.0.1:0",
            reconsume_times=int(reconsume) if reconsume else 0,
            properties=props,
        )
        await handler.receive_reply_message(reply)
    except Exception:
        log.warning("unknown err when receiveReplyMsg from %s", addr, exc_info=True)
        return RemotingCommand.response_to(
            cmd, ResponseCode.SYSTEM_ERROR, "process reply message fail"
        )
    return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)


_INBOUND: dict[int, InboundFn] = {
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _notify_consumer_ids_changed,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: _reset_offset,
    RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: _get_consumer_status,
    RequestCode.GET_CONSUMER_RUNNING_INFO: _get_consumer_running_info,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _consume_message_directly,
    RequestCode.CHECK_TRANSACTION_STATE: _check_transaction_state,
    RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: _push_reply_message,
}
