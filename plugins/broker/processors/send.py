"""SendMessageProcessor: SEND_MESSAGE (V1, V2), SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK.

Follows Apache 4.9.8 in what a producer or a consumer sending a message back can
observe: response codes, remarks and the fields of the response header.
"""

from __future__ import annotations

import functools
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from rmqk.model import DLQ_GROUP_TOPIC_PREFIX, PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmqk.model.message import MessageProperty, parse_properties
from rmqk.plugins.broker.commands import FAQ_SUFFIX, HeaderError, Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import BrokerContext, Processor
from rmqk.plugins.broker.processors.end_transaction import refuse_half_message
from rmqk.plugins.broker.processors.topics import (
    TOPIC_MAX_LENGTH,
    create_topic_in_send,
    create_topic_in_send_back,
    topic_config_string,
    validate_group,
    validate_topic,
)
from rmqk.plugins.broker.store.topics import TopicConfig
from rmqk.plugins.broker.transactions import TransactionalMessageBridge, is_half_message
from rmqk.wire.message_codec import (
    decode_batch,
    decode_message,
    java_properties_string,
)
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["SendMessageProcessor"]

log = logging.getLogger("rmqk.broker")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
PROPERTIES_MAX_LENGTH = 0x7FFF
DLQ_NUMS_PER_GROUP = 1
# MQVersion.Version.V3_4_9.ordinal(): from here on the header's maxReconsumeTimes counts.
V3_4_9 = 121
_PERM_RW = PERM_WRITE | PERM_READ


@attrs.frozen
class _SendHeader:
    producer_group: str | None
    topic: str | None
    default_topic: str | None
    default_topic_queue_nums: int | None
    queue_id: int | None
    sys_flag: int | None
    born_timestamp: int | None
    flag: int | None
    properties: str | None
    reconsume_times: int | None
    unit_mode: bool
    batch: bool
    max_reconsume_times: int | None


# The send header's fields in _SendHeader's order, by their V1 names and by the
# one-letter names SendMessageRequestHeaderV2 gives them.
_V1_NAMES = (
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
    "maxReconsumeTimes",
)
_V2_NAMES = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l")
# The @CFNotNull fields of SendMessageRequestHeader.
_V1_REQUIRED = _V1_NAMES[:8]


def _decode_send_header(get: Callable[[str], str | None], names: tuple[str, ...]) -> _SendHeader:
    """Both header versions parse alike: a missing or non-numeric number is null."""
    (
        producer_group,
        topic,
        default_topic,
        default_topic_queue_nums,
        queue_id,
        sys_flag,
        born_timestamp,
        flag,
        properties,
        reconsume_times,
        unit_mode,
        batch,
        max_reconsume_times,
    ) = names
    return _SendHeader(
        producer_group=get(producer_group),
        topic=get(topic),
        default_topic=get(default_topic),
        default_topic_queue_nums=_opt_int(get(default_topic_queue_nums)),
        queue_id=_opt_int(get(queue_id)),
        sys_flag=_opt_int(get(sys_flag)),
        born_timestamp=_opt_int(get(born_timestamp)),
        flag=_opt_int(get(flag)),
        properties=get(properties),
        reconsume_times=_opt_int(get(reconsume_times)),
        unit_mode=_is_true(get(unit_mode)),
        batch=_is_true(get(batch)),
        max_reconsume_times=_opt_int(get(max_reconsume_times)),
    )


class SendMessageProcessor(Processor):
    """Stores what producers send and what consumers send back for a retry."""

    def __init__(
        self, ctx: BrokerContext, transactions: TransactionalMessageBridge | None = None
    ) -> None:
        super().__init__(ctx)
        self.transactions = transactions
        # What every send response carries, stringified once.
        self._send_fields: dict[str, str] = {
            "MSG_REGION": ctx.settings.region_id,
            "TRACE_ON": "true" if ctx.settings.trace_on else "false",
        }

    def _send_header(self, request: RemotingCommand) -> _SendHeader:
        if request.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE):
            Headers(request).require(*_V1_REQUIRED)
            return _decode_send_header(request.ext_fields.get, _V1_NAMES)
        # SendMessageRequestHeaderV2 is decoded without null checks (FastCodesHeader).
        return _decode_send_header(request.ext_fields.get, _V2_NAMES)

    def _send_response(self, request: RemotingCommand) -> RemotingCommand:
        response = make_response(request)
        response.ext_fields = dict(self._send_fields)
        return response

    def _illegal_message_remark(self) -> str:
        return (
            "the message is illegal, maybe msg body or properties length not matched. "
            f"msg body length limit {self.ctx.settings.max_message_size}B, "
            "msg properties length limit 32KB."
        )

    def _msg_check(
        self, conn: Connection, header: _SendHeader, response: RemotingCommand
    ) -> TopicConfig | None:
        """AbstractSendMessageProcessor.msgCheck; fills ``response`` and returns None on failure."""
        remark = validate_topic(header.topic)
        if remark is not None:
            response.code, response.remark = ResponseCode.SYSTEM_ERROR, remark
            return None
        topic = header.topic
        assert topic is not None
        if topic in NOT_ALLOWED_SEND_TOPICS:
            response.code = ResponseCode.NO_PERMISSION
            response.remark = f"Sending message to topic[{topic}] is forbidden."
            return None
        cfg = self.ctx.topics.get(topic)
        if cfg is None:
            sys_flag = 0
            if header.unit_mode:
                sys_flag = 2 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 1
            log.warning("the topic %s does not exist, producer: %s", topic, conn.remote_addr)
            cfg = create_topic_in_send(
                self.ctx,
                topic,
                header.default_topic,
                _require(header.default_topic_queue_nums),
                sys_flag,
            )
            if cfg is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                cfg = create_topic_in_send_back(self.ctx, topic, 1, _PERM_RW, sys_flag)
            if cfg is None:
                response.code = ResponseCode.TOPIC_NOT_EXIST
                response.remark = f"topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}"
                return None
        queue_id = _require(header.queue_id)
        if queue_id >= max(cfg.write_queue_nums, cfg.read_queue_nums):
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = (
                f"request queueId[{queue_id}] is illegal, {topic_config_string(cfg)} "
                f"Producer: {conn.remote_addr}"
            )
            return None
        return cfg

    # What ReplyMessageProcessor shares with the send (both AbstractSendMessageProcessors).
    send_header = _send_header
    send_response = _send_response
    msg_check = _msg_check

    def send_message(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        header = self._send_header(request)
        response = self._send_response(request)
        cfg = self._msg_check(conn, header, response)
        if cfg is None:
            return response
        if header.batch:
            return self._send_batch(conn, request, header, cfg, response)
        return self._send_single(conn, request, header, cfg, response)

    def _random_queue(self, cfg: TopicConfig) -> int:
        return random.randrange(99999999) % cfg.write_queue_nums

    def _send_single(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: _SendHeader,
        cfg: TopicConfig,
        response: RemotingCommand,
    ) -> RemotingCommand:
        queue_id = _require(header.queue_id)
        if queue_id < 0:
            queue_id = self._random_queue(cfg)
        topic = _require(header.topic)
        reconsume_times = header.reconsume_times or 0
        # handleRetryAndDLQ: a client's own send-back past its limit goes to the DLQ.
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and reconsume_times >= (
            self._max_reconsume_times(request, header.max_reconsume_times)
        ):
            topic, queue_id = self._dead_letter_queue(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
        props = parse_properties(header.properties)
        # A send-back of an old client (before 4.6.1) still carries TRAN_MSG; Apache
        # stores it as an ordinary message, as here.
        half = is_half_message(props) and not (
            reconsume_times > 0 and _int_or_zero(props.get("DELAY", "0")) > 0
        )
        if (
            half
            and (self.transactions is None or self.ctx.settings.reject_transaction_message)
            and refuse_half_message(props, self.ctx.broker_ip(), response)
        ):
            return response
        props[MessageProperty.CLUSTER] = self.ctx.settings.cluster
        # Apache drops WAIT from what it stores (it only steers the flush wait).
        props.pop(MessageProperty.WAIT_STORE_MSG_OK, None)
        properties_raw = java_properties_string(props)
        body = request.body
        if (
            len(body) > self.ctx.settings.max_message_size
            or len(properties_raw.encode("utf-8")) > PROPERTIES_MAX_LENGTH
        ):
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = self._illegal_message_remark()
            return response
        # A half message keeps its properties as a mapping: the transaction service rewrites them.
        put = (
            functools.partial(self.transactions.put_half_message, props=props)
            if half and self.transactions is not None
            else functools.partial(self.ctx.store.put_message, properties_raw=properties_raw)
        )
        result = put(
            topic=topic,
            queue_id=queue_id,
            body=body,
            flag=_require(header.flag),
            sys_flag=_with_multi_tags(_require(header.sys_flag), cfg),
            born_timestamp=_require(header.born_timestamp),
            born_host=conn.remote_addr,
            reconsume_times=reconsume_times,
        )
        return self._put_response(response, result, queue_id)

    def _send_batch(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: _SendHeader,
        cfg: TopicConfig,
        response: RemotingCommand,
    ) -> RemotingCommand:
        topic = _require(header.topic)
        queue_id = _require(header.queue_id)
        if queue_id < 0:
            queue_id = self._random_queue(cfg)
        if len(topic) > TOPIC_MAX_LENGTH:
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = f"message topic length too long {len(topic)}"
            return response
        batch_props = parse_properties(header.properties)
        batch_props[MessageProperty.CLUSTER] = self.ctx.settings.cluster
        delay = batch_props.get(MessageProperty.DELAY_TIME_LEVEL)
        sys_flag = _require(header.sys_flag)
        if (delay is not None and _int_or_zero(delay) > 0) or sys_flag & 0xC:
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = self._illegal_message_remark()
            return response
        if len(request.body) > self.ctx.settings.max_message_size:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = "java.lang.RuntimeException: message body size exceeded"
            return response
        try:
            entries = decode_batch(request.body)
        except Exception as exc:
            raise HeaderError(f"java.nio.BufferUnderflowException ({exc})") from exc
        batch_raw = java_properties_string(batch_props)
        messages = []
        for entry in entries:
            raw = entry.properties_raw
            if raw and batch_raw and not raw.endswith("\x02"):
                raw += "\x02"
            raw += batch_raw
            if len(raw.encode("utf-8")) > PROPERTIES_MAX_LENGTH:
                response.code = ResponseCode.MESSAGE_ILLEGAL
                response.remark = self._illegal_message_remark()
                return response
            messages.append(entry._replace(properties_raw=raw))
        results = self.ctx.store.put_messages_batch(
            topic=topic,
            queue_id=queue_id,
            messages=messages,
            sys_flag=_with_multi_tags(sys_flag, cfg),
            born_timestamp=_require(header.born_timestamp),
            born_host=conn.remote_addr,
            reconsume_times=header.reconsume_times or 0,
        )
        if not results:
            return self._put_response(response, None, queue_id)
        if all(r.ok for r in results):
            # A batch's message id is every stored message's offset id, comma-separated.
            first = attrs.evolve(results[0], msg_id=",".join(r.msg_id for r in results))
            return self._put_response(response, first, queue_id)
        return self._put_response(response, results[0], queue_id)

    def _disk_util(self) -> str:
        """SendMessageProcessor.diskUtil: used fractions of the log, queue and index disks."""
        root = getattr(self.ctx.store, "root", None)

        def used(path: Path | None) -> float:
            try:
                st = os.statvfs(path) if path is not None else None
            except OSError:
                st = None
            if st is None or not st.f_blocks:
                return -1.0
            return (st.f_blocks - st.f_bavail) / st.f_blocks

        cl = used(root / "commitlog" if root else None)
        cq = used(root / "consumequeue" if root else None)
        index = used(root / "index" if root else None)
        return f"CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {index:5.2f}"

    def _put_response(
        self, response: RemotingCommand, result: Any, queue_id: int
    ) -> RemotingCommand:
        if result is None:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = "store putMessage return null"
            return response
        if not result.ok:
            error = str((getattr(result, "status", None) and result.status.name) or "UNKNOWN_ERROR")
            if error in ("MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED", "MESSAGE_SIZE_EXCEEDED"):
                response.code = ResponseCode.MESSAGE_ILLEGAL
                response.remark = self._illegal_message_remark()
            elif error == "SERVICE_NOT_AVAILABLE":
                response.code = ResponseCode.SERVICE_NOT_AVAILABLE
                response.remark = (
                    "service not available now. It may be caused by one of the following "
                    f"reasons: the broker's disk is full [{self._disk_util()}], messages are "
                    "put to the slave, message store has been shut down, etc."
                )
            elif error == "CREATE_MAPEDFILE_FAILED":
                response.code = ResponseCode.SYSTEM_ERROR
                response.remark = "create mapped file failed, server is busy or broken."
            elif error == "FLUSH_DISK_TIMEOUT":
                response.code = ResponseCode.FLUSH_DISK_TIMEOUT
            else:
                response.code = ResponseCode.SYSTEM_ERROR
                response.remark = error
            if response.code != ResponseCode.FLUSH_DISK_TIMEOUT:
                return response
        response.ext_fields["msgId"] = str(result.msg_id)
        response.ext_fields["queueId"] = str(queue_id)
        response.ext_fields["queueOffset"] = str(result.queue_offset)
        return response

    def _max_reconsume_times(self, request: RemotingCommand, from_header: int | None) -> int:
        if request.version >= V3_4_9 and from_header is not None:
            return from_header
        return self.ctx.settings.retry_max_times

    def _dead_letter_queue(self, group: str) -> tuple[str, int]:
        """Where a message past its retries goes: the group's DLQ, created on first use."""
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        queue_id = random.randrange(99999999) % DLQ_NUMS_PER_GROUP
        create_topic_in_send_back(self.ctx, topic, DLQ_NUMS_PER_GROUP, _PERM_RW)
        return topic, queue_id

    # -- send back ---------------------------------------------------------------

    def consumer_send_msg_back(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("offset", "group", "delayLevel")
        offset = h.number("offset")
        group = h.text("group")
        refused = validate_group(group)
        if refused is not None:
            # Not on Apache: a group that is no name would make a retry topic no one can list.
            return make_response(request, ResponseCode.SYSTEM_ERROR, refused)
        delay_level = h.number("delayLevel")
        unit_mode = h.boolean("unitMode")
        max_reconsume_header = h.opt_number("maxReconsumeTimes")
        response = make_response(request)

        new_topic = RETRY_GROUP_TOPIC_PREFIX + group
        queue_id = random.randrange(99999999) % self.ctx.settings.retry_queue_nums
        sys_flag_topic = 2 if unit_mode else 0
        create_topic_in_send_back(
            self.ctx, new_topic, self.ctx.settings.retry_queue_nums, _PERM_RW, sys_flag_topic
        )
        record = self.ctx.store.look_message(offset)
        if record is None:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = f"look message by offset failed, {offset}"
            return response
        msg, _ = decode_message(record, 0, decompress=False)
        props = dict(msg.properties)
        if MessageProperty.RETRY_TOPIC not in props:
            props[MessageProperty.RETRY_TOPIC] = msg.topic
        props[MessageProperty.WAIT_STORE_MSG_OK] = "false"
        max_times = self._max_reconsume_times(request, max_reconsume_header)
        if msg.reconsume_times >= max_times or delay_level < 0:
            new_topic, queue_id = self._dead_letter_queue(group)
            props[MessageProperty.DELAY_TIME_LEVEL] = "0"
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[MessageProperty.DELAY_TIME_LEVEL] = str(delay_level)
        if not props.get(MessageProperty.ORIGIN_MESSAGE_ID):
            # A record read back from the commit log has the offset message id as its id.
            props[MessageProperty.ORIGIN_MESSAGE_ID] = msg.offset_msg_id
        result = self.ctx.store.put_message(
            topic=new_topic,
            queue_id=queue_id,
            body=msg.body,
            flag=msg.flag,
            properties_raw=java_properties_string(props),
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times + 1,
        )
        if result is None:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = "putMessageResult is null"
        elif not result.ok:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = result.status.name
        return response

    # -- pulling -----------------------------------------------------------------


def _require(value: int | str | None) -> Any:
    """A field the fast header decoder left null: Java dereferences it and fails."""
    if value is None:
        raise HeaderError("java.lang.NullPointerException")
    return value


def _with_multi_tags(sys_flag: int, cfg: TopicConfig) -> int:
    """MessageSysFlag.MULTI_TAGS_FLAG is set for topics of filter type MULTI_TAG."""
    return sys_flag | 0x2 if cfg.topic_filter_type == "MULTI_TAG" else sys_flag


def _opt_int(value: str | None) -> int | None:
    """Headers.opt_number without the lookup: a missing or non-numeric field is None."""
    if value is None:
        return None
    try:
        return int(value)  # int() itself ignores surrounding whitespace
    except ValueError:
        return None


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def _int_or_zero(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0
