"""Broker2Client: requests the broker itself sends to a client's connection.

Admin tools ask the broker for things only a client knows (running info, a
direct consume) or can do (reset its offsets); the broker forwards them.
"""

from __future__ import annotations

from collections.abc import Iterable

from rmqk.model import MessageQueue
from rmqk.model.errors import RemotingError, RemotingTimeoutError
from rmqk.plugins.broker.clients import ClientChannelInfo
from rmqk.plugins.broker.commands import make_request, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.wire.bodies import encode_reset_offset
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["call_client", "reset_offset"]


async def call_client(
    conn: Connection,
    request: RemotingCommand,
    serialize_type: int,
    target: Connection,
    group: str,
    client_id: str,
    timeout: float,
    forward: RemotingCommand | None = None,
) -> None:
    """callClient: forward the request to the client, answer ``conn`` with its reply."""
    if forward is None:
        forward = make_request(request.code, body=request.body)
        forward.ext_fields = dict(request.ext_fields)
    try:
        answer = await target.request(forward, timeout)
    except RemotingTimeoutError as exc:
        answer = make_response(
            request,
            ResponseCode.CONSUME_MSG_TIMEOUT,
            f"consumer <{group}> <{client_id}> Timeout: "
            f"org.apache.rocketmq.remoting.exception.RemotingTimeoutException: {exc}",
        )
    except RemotingError as exc:
        answer = make_response(
            request,
            ResponseCode.SYSTEM_ERROR,
            f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
        )
    conn.respond(request, answer, serialize_type)


def reset_offset(
    channels: Iterable[ClientChannelInfo],
    topic: str,
    group: str,
    timestamp: int,
    offsets: dict[MessageQueue, int],
) -> bytes:
    """resetOffset: push the new offsets to every client of the group; the body sent."""
    body = encode_reset_offset(offsets)
    for channel in channels:
        push = make_request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            # Apache's broker sets topic, group and timestamp on the pushed header; isForce
            # is left at its default, so a 4.9.8 client always reads false here.
            fields={"topic": topic, "group": group, "timestamp": timestamp, "isForce": False},
            body=body,
        )
        channel.channel.oneway(push)
    return body
