"""Request-reply (Java's ``DefaultMQProducer.request``, RocketMQ 4.6+).

A request is an ordinary message with three properties added (Java's
``prepareSendRequest``): ``CORRELATION_ID`` (a random UUID), ``REPLY_TO_CLIENT``
(the requesting client's id) and ``TTL`` (the request's timeout in ms). The
broker stores it and adds ``CLUSTER``. A responder consumes it and answers with
:func:`create_reply_message`, a message to ``<cluster>_REPLY_TOPIC`` with
``MSG_TYPE=reply``, which any producer sends with its ordinary ``send``: the
transport sends such a message as SEND_REPLY_MESSAGE_V2, and the broker pushes it
to the requesting client's connection (PUSH_REPLY_MESSAGE_TO_CLIENT), where
:class:`ReplyFutures` hands it to the waiting request.

Java keeps the waiting requests in one table per JVM; rmqk keeps one per client
instance, which is the unit a broker pushes a reply to (by client id).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from rmqk.model.errors import ClientError
from rmqk.model.message import Message, MessageExt, MessageProperty

__all__ = [
    "REPLY_MESSAGE_FLAG",
    "ReplyFutures",
    "create_correlation_id",
    "create_reply_message",
    "is_reply",
    "reply_topic",
]

log = logging.getLogger("rmqk.engine.request_reply")

# MixAll.REPLY_MESSAGE_FLAG: the MSG_TYPE of a reply.
REPLY_MESSAGE_FLAG = "reply"


def reply_topic(cluster: str) -> str:
    """MixAll.getReplyTopic: the topic every broker of ``cluster`` has for replies."""
    return f"{cluster}_REPLY_TOPIC"


def create_correlation_id() -> str:
    """CorrelationIdUtil.createCorrelationId: a random UUID's text."""
    return str(uuid.uuid4())


def is_reply(properties: dict[str, str]) -> bool:
    """MQClientAPIImpl.sendMessage's ``isReply``: sent as SEND_REPLY_MESSAGE(_V2)."""
    return properties.get(MessageProperty.MESSAGE_TYPE) == REPLY_MESSAGE_FLAG


def create_reply_message(request: Message | MessageExt, body: bytes) -> Message:
    """The reply to a consumed request, as Java's ``MessageUtil.createReplyMessage`` builds it.

    It goes to the request's cluster's reply topic and carries the request's
    correlation id, reply-to client and TTL; send it with any producer's ``send``.
    A message that was not consumed from a broker (no ``CLUSTER`` property) is
    refused, as in Java (ClientErrorCode.CREATE_REPLY_MESSAGE_EXCEPTION).
    """
    if request is None:
        raise ClientError("create reply message fail, requestMessage cannot be null.")
    props = request.properties
    cluster = props.get(MessageProperty.CLUSTER)
    if cluster is None:
        raise ClientError(
            "create reply message fail, requestMessage error, "
            f"property[{MessageProperty.CLUSTER}] is null."
        )
    copied = {
        MessageProperty.MESSAGE_TYPE: REPLY_MESSAGE_FLAG,
        MessageProperty.CORRELATION_ID: props.get(MessageProperty.CORRELATION_ID),
        MessageProperty.MESSAGE_REPLY_TO_CLIENT: props.get(MessageProperty.MESSAGE_REPLY_TO_CLIENT),
        MessageProperty.MESSAGE_TTL: props.get(MessageProperty.MESSAGE_TTL),
    }
    # Java puts a missing one as null, which its property encoding then leaves out.
    return Message(
        reply_topic(cluster),
        body,
        properties={k: v for k, v in copied.items() if v is not None},
    )


class ReplyFutures:
    """The requests of one client instance waiting for their reply (RequestFutureHolder)."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}
        # Replies that matched no waiting request (late, or not ours): dropped, counted.
        self.unmatched_total = 0

    def register(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def __len__(self) -> int:
        return len(self._waiting)

    def deliver(self, reply: MessageExt) -> bool:
        """Hand a pushed reply to its request; False (with a warning) when none waits."""
        correlation_id = reply.properties.get(MessageProperty.CORRELATION_ID)
        future = self._waiting.pop(correlation_id, None) if correlation_id else None
        if future is None or future.done():
            self.unmatched_total += 1
            log.warning(
                "receive reply message, but not matched any request, CorrelationId: %s , "
                "reply from host: %s (dropped; %d unmatched replies so far)",
                correlation_id,
                reply.born_host,
                self.unmatched_total,
            )
            return False
        future.set_result(reply)
        return True
