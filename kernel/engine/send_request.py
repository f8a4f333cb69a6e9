"""What one send puts on the wire, and the error a send reports when every attempt failed.

Built once per send (Java's sendKernelImpl sets the UNIQ_KEY once and compresses
the same way on every attempt), so all attempts of a send carry the same message id.
"""

from __future__ import annotations

import enum
import time
import zlib

import attrs

from rmqk.model import RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rmqk.model.errors import (
    BrokerError,
    ClientError,
    RemotingConnectError,
    RemotingTimeoutError,
    SendFailedError,
)
from rmqk.model.message import Message, MessageProperty, format_properties
from rmqk.spi.transport import SendMessageRequest
from rmqk.wire.uniq_id import create_uniq_id

__all__ = [
    "ACCESS_BROKER_TIMEOUT",
    "BROKER_NOT_EXIST_EXCEPTION",
    "CONNECT_BROKER_EXCEPTION",
    "SYSFLAG_COMPRESSED",
    "CommunicationMode",
    "Payload",
    "build_header",
    "build_payload",
    "now_ms",
    "send_failed",
]

SYSFLAG_COMPRESSED = 0x1

# ClientErrorCode: the response code a failed send reports when no broker answered.
CONNECT_BROKER_EXCEPTION = 10001
ACCESS_BROKER_TIMEOUT = 10002
BROKER_NOT_EXIST_EXCEPTION = 10003


class CommunicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


@attrs.frozen
class Payload:
    """The parts of a send request that stay the same across its attempts."""

    topic: str
    body: bytes
    properties: str
    sys_flag: int = 0
    flag: int = 0
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    batch: bool = False


def now_ms() -> float:
    return time.monotonic() * 1000


def build_payload(msg: Message, compress_over: int) -> Payload:
    props = dict(msg.properties)
    props.setdefault(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
    body = msg.body
    sys_flag = 0
    if len(body) > compress_over:
        compressed = zlib.compress(body, 5)
        if len(compressed) < len(body):
            body = compressed
            sys_flag |= SYSFLAG_COMPRESSED
    reconsume = max_reconsume = None
    if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        reconsume = props.get(MessageProperty.RECONSUME_TIME)
        max_reconsume = props.get(MessageProperty.MAX_RECONSUME_TIMES)
    return Payload(
        topic=msg.topic,
        body=body,
        properties=format_properties(props),
        sys_flag=sys_flag,
        flag=msg.flag,
        reconsume_times=int(reconsume) if reconsume else 0,
        max_reconsume_times=int(max_reconsume) if max_reconsume else None,
    )


def build_header(
    group: str,
    mq: MessageQueue,
    payload: Payload,
    default_topic_queue_nums: int,
    unit_mode: bool = False,
) -> SendMessageRequest:
    return SendMessageRequest(
        producer_group=group,
        topic=payload.topic,
        queue_id=mq.queue_id,
        sys_flag=payload.sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=payload.flag,
        properties=payload.properties,
        reconsume_times=payload.reconsume_times,
        max_reconsume_times=payload.max_reconsume_times,
        batch=payload.batch,
        default_topic_queue_nums=default_topic_queue_nums,
        # sendKernelImpl: requestHeader.setUnitMode(this.isUnitMode()).
        unit_mode=unit_mode,
    )


def send_failed(
    topic: str, times: int, cost_ms: float, brokers: list[str], error: Exception | None
) -> SendFailedError:
    """Java's "Send [n] times, still failed" with the code of what went wrong last."""
    if isinstance(error, BrokerError):
        code = error.code
    elif isinstance(error, RemotingConnectError):
        code = CONNECT_BROKER_EXCEPTION
    elif isinstance(error, RemotingTimeoutError):
        code = ACCESS_BROKER_TIMEOUT
    elif isinstance(error, ClientError):
        code = BROKER_NOT_EXIST_EXCEPTION
    else:
        code = -1
    failure = SendFailedError(
        f"Send [{times}] times, still failed, cost [{int(cost_ms)}]ms, Topic: {topic}, "
        f"BrokersSent: {brokers}; last error: {error}",
        response_code=code,
        attempts=times,
        brokers_sent=tuple(brokers),
    )
    failure.__cause__ = error
    return failure
