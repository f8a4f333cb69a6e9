"""Half messages in the commit log (Apache's TransactionalMessageBridge).

Everything a transaction leaves is an ordinary record, so it survives a restart
with the commit log:

* a half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real
  topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` and its transaction bits
  cleared, so no consumer of the real topic can pull it;
* settling it (commit or rollback) writes an op message to
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (same queue id) tagged ``d`` whose body is the
  half message's queue offset;
* the check service's progress is the consumer offset of group
  ``CID_RMQ_SYS_TRANS`` on both topics.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.model import PERM_READ, PERM_WRITE
from rmqk.model.errors import FrameError
from rmqk.model.message import MessageExt, MessageProperty
from rmqk.plugins.broker.store.results import GetMessageStatus, PutResult
from rmqk.wire.message_codec import (
    MessageSysFlag,
    decode_message,
    decode_messages,
    java_properties_string,
)
from rmqk.wire.uniq_id import create_uniq_id

if TYPE_CHECKING:
    from rmqk.plugins.broker.processors.context import BrokerContext

__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "HALF_TOPIC",
    "OP_TOPIC",
    "REMOVE_TAG",
    "SYS_TRANS_GROUP",
    "PulledMessages",
    "TransactionalMessageBridge",
    "is_half_message",
]

log = logging.getLogger("rmqk.broker.transaction")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYS_TRANS_GROUP = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS
REMOVE_TAG = "d"
_TRANSACTION_BITS = int(MessageSysFlag.TRANSACTION_ROLLBACK)  # 0xC masks both bits
_RW = PERM_READ | PERM_WRITE


def is_half_message(props: dict[str, str]) -> bool:
    """``TRAN_MSG`` read as Java's Boolean.parseBoolean reads it."""
    return props.get(MessageProperty.TRANSACTION_PREPARED, "").lower() == "true"


def reset_transaction_bits(sys_flag: int, transaction_type: int) -> int:
    """MessageSysFlag.resetTransactionValue."""
    return (sys_flag & ~_TRANSACTION_BITS) | transaction_type


@attrs.frozen
class PulledMessages:
    """A read of a system queue, as the bridge's PullResult: FOUND, NO_NEW_MSG, ..."""

    status: str
    next_begin_offset: int
    messages: tuple[MessageExt, ...] | None


_PULL_STATUS = {
    GetMessageStatus.FOUND: "FOUND",
    GetMessageStatus.NO_MATCHED_MESSAGE: "NO_MATCHED_MSG",
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: "NO_NEW_MSG",
    GetMessageStatus.OFFSET_OVERFLOW_ONE: "NO_NEW_MSG",
}


def create_topic_in_send_back(ctx: BrokerContext, topic: str, queues: int, perm: int) -> Any:
    # Imported late: the processors package imports this module.
    from rmqk.plugins.broker.processors.topics import create_topic_in_send_back as create

    return create(ctx, topic, queues, perm)


class TransactionalMessageBridge:
    """Reads and writes the transaction system topics through the message store."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    @property
    def store(self) -> Any:
        return self.ctx.store

    # -- writing -------------------------------------------------------------------

    def put_half_message(
        self,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        props: dict[str, str],
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
    ) -> PutResult:
        """parseHalfMessageInner + putMessage: park the message in the half topic."""
        props[MessageProperty.REAL_TOPIC] = topic
        props[MessageProperty.REAL_QUEUE_ID] = str(queue_id)
        create_topic_in_send_back(self.ctx, HALF_TOPIC, 1, _RW)
        result: PutResult = self.store.put_message(
            topic=HALF_TOPIC,
            queue_id=0,
            body=body,
            flag=flag,
            properties_raw=java_properties_string(props),
            sys_flag=reset_transaction_bits(sys_flag, 0),
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
        )
        return result

    def put_back_half(self, msg: MessageExt) -> PutResult:
        """renewHalfMessageInner + putMessage: the half message again, at the queue's end."""
        return self._put_copy(msg, msg.topic, msg.queue_id)

    def _put_copy(self, msg: MessageExt, topic: str, queue_id: int) -> PutResult:
        """``msg`` stored again as it came, into ``topic``'s queue ``queue_id``."""
        result: PutResult = self.store.put_message(
            topic=topic,
            queue_id=queue_id,
            body=msg.body,
            flag=msg.flag,
            properties_raw=java_properties_string(msg.properties),
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
        )
        return result

    def put_op_remove(self, half: MessageExt) -> bool:
        """addRemoveTagInTransactionOp: mark the half message settled."""
        create_topic_in_send_back(self.ctx, OP_TOPIC, 1, _RW)
        props = {
            MessageProperty.TAGS: REMOVE_TAG,
            MessageProperty.WAIT_STORE_MSG_OK: "true",
            MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: create_uniq_id(),
        }
        result = self.store.put_message(
            topic=OP_TOPIC,
            queue_id=half.queue_id,
            body=str(half.queue_offset).encode(),
            flag=0,
            properties_raw=java_properties_string(props),
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=self.ctx.settings.broker_addr,
        )
        if not result.ok:
            log.error("Transaction op message write failed. queueOffset %d: %s",
                      half.queue_offset, result.error)  # fmt: skip
        return bool(result.ok)

    def put_discarded(self, msg: MessageExt) -> bool:
        """DefaultTransactionalMessageCheckListener.resolveDiscardMsg's put."""
        create_topic_in_send_back(self.ctx, CHECK_MAX_TIME_TOPIC, 1, _RW)
        return bool(self._put_copy(msg, CHECK_MAX_TIME_TOPIC, 0).ok)

    # -- reading -------------------------------------------------------------------

    def look_message(self, commit_log_offset: int) -> MessageExt | None:
        record = self.store.look_message(commit_log_offset)
        if record is None:
            return None
        try:
            msg, _ = decode_message(record, 0, self.ctx.settings.broker_name, decompress=False)
        except FrameError:
            return None
        return msg

    def pull(self, topic: str, queue_id: int, offset: int, count: int) -> PulledMessages:
        got = self.store.get_messages(topic, queue_id, offset, count)
        status = _PULL_STATUS.get(got.status, "OFFSET_ILLEGAL")
        messages: tuple[MessageExt, ...] | None = None
        if got.status is GetMessageStatus.FOUND:
            name = self.ctx.settings.broker_name
            messages = tuple(
                m for record in got.records for m in decode_messages(record, name, decompress=False)
            )
        return PulledMessages(status, got.next_begin_offset, messages or None)

    def consume_offset(self, topic: str, queue_id: int) -> int:
        """fetchConsumeOffset: the check's progress, or the queue's start."""
        offset: int = self.store.consumer_offsets.query_offset(SYS_TRANS_GROUP, topic, queue_id)
        if offset == -1:
            offset = self.store.min_offset(topic, queue_id)
        return offset

    def update_consume_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.store.consumer_offsets.commit_offset(SYS_TRANS_GROUP, topic, queue_id, offset)

    def half_queue_ids(self) -> list[int]:
        """fetchMessageQueues: the half topic's read queues.

        Apache creates the topic here when it is missing; it is created with the
        first half message instead, so a broker that never saw a transaction does
        not list the topic.
        """
        cfg = self.ctx.topics.get(HALF_TOPIC)
        return list(range(cfg.read_queue_nums)) if cfg is not None else []
