"""The embedded broker's request processors.

Each processor follows its Apache 4.9.8 counterpart (SendMessageProcessor,
PullMessageProcessor, ConsumerManageProcessor, ClientManageProcessor,
QueryMessageProcessor, AdminBrokerProcessor) in what a client can observe:
response codes, remarks, header fields and bodies. Where the embedded broker
knowingly differs, the docstring of the processor says so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from rmqk.errors import RemotingError, RemotingTimeoutError
from rmqk.message import MessageProperty, decode_offset_msg_id, parse_properties
from rmqk.model import (
    DLQ_GROUP_TOPIC_PREFIX,
    MASTER_ID,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SUB_ALL,
    ExpressionType,
    MessageQueue,
    SubscriptionData,
    java_string_hash,
)
from rmqk.plugins.broker import jsonwire
from rmqk.plugins.broker.clients import (
    ClientChannelInfo,
    ClientManager,
    parse_heartbeat,
    subscription_to_json,
)
from rmqk.plugins.broker.locks import RebalanceLockManager
from rmqk.plugins.broker.longpoll import HeldPull, PullHoldService
from rmqk.plugins.broker.server import Connection, HeaderError, Headers, make_request, make_response
from rmqk.plugins.broker.store.topics import TopicConfig, TopicConfigs
from rmqk.plugins.remoting.bodies import encode_reset_offset
from rmqk.plugins.remoting.message_codec import (
    decode_batch,
    decode_message,
    java_properties_string,
)
from rmqk.protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode

__all__ = ["BrokerProcessors", "BrokerSettings", "perm_to_string"]

log = logging.getLogger("rmqk.broker")

FAQ_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
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
TOPIC_MAX_LENGTH = 127
PROPERTIES_MAX_LENGTH = 0x7FFF
DLQ_NUMS_PER_GROUP = 1
# MQVersion.Version.V3_4_9.ordinal(): from here on the header's maxReconsumeTimes counts.
V3_4_9 = 121
_VALID_NAME_CHARS = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# GetMessageStatus (by name) → pull response code, as PullMessageProcessor maps them.
_PULL_CODES = {
    "FOUND": ResponseCode.SUCCESS,
    "MESSAGE_WAS_REMOVING": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
}
_EMPTY_QUEUE_STATUSES = frozenset({"NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"})
# Plain ints: an int & IntFlag goes through enum machinery on every pull.
_PULL_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_PULL_SUSPEND = int(PullSysFlag.SUSPEND)
_PULL_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_MASTER_ID_TEXT = str(MASTER_ID)


def perm_to_string(perm: int) -> str:
    """PermName.perm2String: ``RWX`` with ``-`` for a missing bit."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


def _topic_config_string(cfg: TopicConfig) -> str:
    return (
        f"TopicConfig [topicName={cfg.topic_name}, readQueueNums={cfg.read_queue_nums}, "
        f"writeQueueNums={cfg.write_queue_nums}, perm={perm_to_string(cfg.perm)}, "
        f"topicFilterType={cfg.topic_filter_type}, topicSysFlag={cfg.topic_sys_flag}, "
        f"order={'true' if cfg.order else 'false'}]"
    )


def _java_addr(conn: Connection) -> str:
    # Java's InetSocketAddress.toString() of a numeric address: "/ip:port".
    return "/" + conn.remote_addr


def validate_topic(topic: str | None) -> str | None:
    """TopicValidator.validateTopic: the SYSTEM_ERROR remark, or None when valid."""
    if topic is None or not topic.strip():
        return "The specified topic is blank."
    if not _VALID_NAME_CHARS.issuperset(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


@attrs.frozen
class BrokerSettings:
    """The broker options a client can observe (BrokerConfig / MessageStoreConfig)."""

    broker_name: str = "broker-a"
    cluster: str = "DefaultCluster"
    broker_addr: str = "127.0.0.1:10911"
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    auto_create_topic: bool = True
    default_topic_queue_nums: int = 8
    max_message_size: int = 4 * 1024 * 1024
    max_pull_msgs: int = 32
    max_pull_bytes: int = 256 * 1024
    retry_max_times: int = 16
    retry_queue_nums: int = 1
    notify_consumer_ids_changed: bool = True
    call_client_timeout: float = 10.0


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


class BrokerProcessors:
    """Dispatches the broker port's requests to the processors below."""

    def __init__(
        self,
        settings: BrokerSettings,
        store: Any,
        *,
        system_topics: Iterable[str] = (),
        on_topics_changed: Callable[[], None] = lambda: None,
        lock_expiry: float = 60.0,
        channel_expiry: float = 120.0,
        hold_check_interval: float = 5.0,
    ) -> None:
        self.settings = settings
        self.store = store
        self.topics: TopicConfigs = store.topics
        self.system_topics = set(system_topics)
        self._on_topics_changed = on_topics_changed
        self.clients = ClientManager(
            self._notify_consumer_ids_changed, channel_expiry=channel_expiry
        )
        self.locks = RebalanceLockManager(lock_expiry)
        self.holds = PullHoldService(
            self._answer_held_pull, self._max_offset, check_interval=hold_check_interval
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        # What every send response carries, stringified once.
        self._send_fields: dict[str, str] = {
            "MSG_REGION": settings.region_id,
            "TRACE_ON": "true" if settings.trace_on else "false",
        }
        self._handlers: dict[int, Callable[[Connection, RemotingCommand, int], Any]] = {
            RequestCode.SEND_MESSAGE: self.send_message,
            RequestCode.SEND_MESSAGE_V2: self.send_message,
            RequestCode.SEND_BATCH_MESSAGE: self.send_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
            RequestCode.PULL_MESSAGE: self.pull_message,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.invoke_broker_to_reset_offset,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic_in_broker,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
        }

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self.holds.start()

    async def stop(self) -> None:
        await self.holds.stop()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def connection_closed(self, conn: Connection) -> None:
        self.holds.drop_connection(conn)
        self.clients.channel_closed(conn)

    def on_message_arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.holds.on_message_arrived(topic, queue_id, max_offset)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        handler = self._handlers.get(request.code)
        if handler is None:
            # AdminBrokerProcessor, the broker's default processor, answers this.
            return make_response(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        result: RemotingCommand | None = handler(conn, request, serialize_type)
        return result

    # -- topics ------------------------------------------------------------------

    def _save_topic(self, cfg: TopicConfig) -> TopicConfig:
        self.topics.put(cfg)
        self._on_topics_changed()
        return cfg

    def _create_topic_in_send_back(
        self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig:
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg
        log.info("creating topic %s with %d queues", topic, queue_nums)
        return self._save_topic(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
                topic_sys_flag=sys_flag,
            )
        )

    def _create_topic_in_send(
        self, topic: str, default_topic: str | None, client_queue_nums: int, sys_flag: int
    ) -> TopicConfig | None:
        """createTopicInSendMessageMethod: inherit from the default topic (TBW102)."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg
        if default_topic is None:
            return None
        default = self.topics.get(default_topic)
        if default is None:
            return None
        perm = default.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.settings.auto_create_topic:
            perm = PERM_READ | PERM_WRITE
        if not perm & PERM_INHERIT:
            return None
        queue_nums = max(0, min(client_queue_nums, default.write_queue_nums))
        log.info(
            "auto-creating topic %s with %d queues (from %s)", topic, queue_nums, default_topic
        )
        return self._save_topic(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=queue_nums,
                write_queue_nums=queue_nums,
                perm=perm & ~PERM_INHERIT,
                topic_sys_flag=sys_flag,
                topic_filter_type=default.topic_filter_type,
            )
        )

    # -- sending -----------------------------------------------------------------

    def _send_header(self, request: RemotingCommand) -> _SendHeader:
        h = Headers(request)
        if request.code == RequestCode.SEND_MESSAGE:
            h.require(
                "producerGroup",
                "topic",
                "defaultTopic",
                "defaultTopicQueueNums",
                "queueId",
                "sysFlag",
                "bornTimestamp",
                "flag",
            )
            return _SendHeader(
                producer_group=h.opt_text("producerGroup"),
                topic=h.opt_text("topic"),
                default_topic=h.opt_text("defaultTopic"),
                default_topic_queue_nums=h.opt_number("defaultTopicQueueNums"),
                queue_id=h.opt_number("queueId"),
                sys_flag=h.opt_number("sysFlag"),
                born_timestamp=h.opt_number("bornTimestamp"),
                flag=h.opt_number("flag"),
                properties=h.opt_text("properties"),
                reconsume_times=h.opt_number("reconsumeTimes"),
                unit_mode=h.boolean("unitMode"),
                batch=h.boolean("batch"),
                max_reconsume_times=h.opt_number("maxReconsumeTimes"),
            )
        # SendMessageRequestHeaderV2 is decoded without null checks (FastCodesHeader).
        get = request.ext_fields.get
        return _SendHeader(
            producer_group=get("a"),
            topic=get("b"),
            default_topic=get("c"),
            default_topic_queue_nums=_opt_int(get("d")),
            queue_id=_opt_int(get("e")),
            sys_flag=_opt_int(get("f")),
            born_timestamp=_opt_int(get("g")),
            flag=_opt_int(get("h")),
            properties=get("i"),
            reconsume_times=_opt_int(get("j")),
            unit_mode=_is_true(get("k")),
            batch=_is_true(get("m")),
            max_reconsume_times=_opt_int(get("l")),
        )

    def _send_response(self, request: RemotingCommand) -> RemotingCommand:
        response = make_response(request)
        response.ext_fields = dict(self._send_fields)
        return response

    def _illegal_message_remark(self) -> str:
        return (
            "the message is illegal, maybe msg body or properties length not matched. "
            f"msg body length limit {self.settings.max_message_size}B, "
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
        cfg = self.topics.get(topic)
        if cfg is None:
            sys_flag = 0
            if header.unit_mode:
                sys_flag = 2 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 1
            log.warning("the topic %s does not exist, producer: %s", topic, conn.remote_addr)
            cfg = self._create_topic_in_send(
                topic, header.default_topic, _require(header.default_topic_queue_nums), sys_flag
            )
            if cfg is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                cfg = self._create_topic_in_send_back(topic, 1, PERM_WRITE | PERM_READ, sys_flag)
            if cfg is None:
                response.code = ResponseCode.TOPIC_NOT_EXIST
                response.remark = f"topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}"
                return None
        queue_id = _require(header.queue_id)
        if queue_id >= max(cfg.write_queue_nums, cfg.read_queue_nums):
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = (
                f"request queueId[{queue_id}] is illegal, {_topic_config_string(cfg)} "
                f"Producer: {conn.remote_addr}"
            )
            return None
        return cfg

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
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # handleRetryAndDLQ: a client's own send-back past its limit goes to the DLQ.
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
            max_times = self.settings.retry_max_times
            if request.version >= V3_4_9 and header.max_reconsume_times is not None:
                max_times = header.max_reconsume_times
            if reconsume_times >= max_times:
                topic = DLQ_GROUP_TOPIC_PREFIX + group
                queue_id = random.randrange(99999999) % DLQ_NUMS_PER_GROUP
                self._create_topic_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
        props = parse_properties(header.properties)
        # Half (prepared transaction) messages are refused as by a broker with
        # rejectTransactionMessage=true: the embedded broker has no transaction service.
        if props.get(MessageProperty.TRANSACTION_PREPARED, "").lower() == "true":
            response.code = ResponseCode.NO_PERMISSION
            response.remark = (
                f"the broker[{self._broker_ip()}] sending transaction message is forbidden"
            )
            return response
        props[MessageProperty.CLUSTER] = self.settings.cluster
        # Apache drops WAIT from what it stores (it only steers the flush wait).
        props.pop(MessageProperty.WAIT_STORE_MSG_OK, None)
        properties_raw = _java_properties(props)
        body = request.body
        if (
            len(body) > self.settings.max_message_size
            or len(properties_raw.encode("utf-8")) > PROPERTIES_MAX_LENGTH
        ):
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = self._illegal_message_remark()
            return response
        result = self.store.put_message(
            topic=topic,
            queue_id=queue_id,
            body=body,
            flag=_require(header.flag),
            properties_raw=properties_raw,
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
        batch_props[MessageProperty.CLUSTER] = self.settings.cluster
        delay = batch_props.get(MessageProperty.DELAY_TIME_LEVEL)
        sys_flag = _require(header.sys_flag)
        if (delay is not None and _int_or_zero(delay) > 0) or sys_flag & 0xC:
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = self._illegal_message_remark()
            return response
        if len(request.body) > self.settings.max_message_size:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = "java.lang.RuntimeException: message body size exceeded"
            return response
        try:
            entries = decode_batch(request.body)
        except Exception as exc:
            raise HeaderError(f"java.nio.BufferUnderflowException ({exc})") from exc
        batch_raw = _java_properties(batch_props)
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
        results = self.store.put_messages_batch(
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
                    "reasons: the broker's disk is full, messages are put to the slave, "
                    "message store has been shut down, etc."
                )
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

    def _broker_ip(self) -> str:
        return self.settings.broker_addr.rpartition(":")[0]

    # -- send back ---------------------------------------------------------------

    def consumer_send_msg_back(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("offset", "group", "delayLevel")
        offset = h.number("offset")
        group = h.text("group")
        delay_level = h.number("delayLevel")
        unit_mode = h.boolean("unitMode")
        max_reconsume_header = h.opt_number("maxReconsumeTimes")
        response = make_response(request)

        new_topic = RETRY_GROUP_TOPIC_PREFIX + group
        queue_id = random.randrange(99999999) % self.settings.retry_queue_nums
        sys_flag_topic = 2 if unit_mode else 0
        self._create_topic_in_send_back(
            new_topic, self.settings.retry_queue_nums, PERM_WRITE | PERM_READ, sys_flag_topic
        )
        record = self.store.look_message(offset)
        if record is None:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = f"look message by offset failed, {offset}"
            return response
        msg, _ = decode_message(record, 0, decompress=False)
        props = dict(msg.properties)
        if MessageProperty.RETRY_TOPIC not in props:
            props[MessageProperty.RETRY_TOPIC] = msg.topic
        props[MessageProperty.WAIT_STORE_MSG_OK] = "false"
        max_times = self.settings.retry_max_times
        if request.version >= V3_4_9 and max_reconsume_header is not None:
            max_times = max_reconsume_header
        if msg.reconsume_times >= max_times or delay_level < 0:
            new_topic = DLQ_GROUP_TOPIC_PREFIX + group
            queue_id = random.randrange(99999999) % DLQ_NUMS_PER_GROUP
            self._create_topic_in_send_back(new_topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
            props[MessageProperty.DELAY_TIME_LEVEL] = "0"
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[MessageProperty.DELAY_TIME_LEVEL] = str(delay_level)
        if not props.get(MessageProperty.ORIGIN_MESSAGE_ID):
            # A record read back from the commit log has the offset message id as its id.
            props[MessageProperty.ORIGIN_MESSAGE_ID] = msg.offset_msg_id
        result = self.store.put_message(
            topic=new_topic,
            queue_id=queue_id,
            body=msg.body,
            flag=msg.flag,
            properties_raw=_java_properties(props),
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

    def pull_message(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        return self._process_pull(conn, request, serialize_type, allow_suspend=True)

    def _pull_subscription(
        self, request: RemotingCommand, h: Headers, group: str, topic: str, sys_flag: int
    ) -> SubscriptionData | RemotingCommand:
        if sys_flag & _PULL_SUBSCRIPTION:
            expression_type = h.opt_text("expressionType")
            sub = build_broker_subscription(topic, h.opt_text("subscription"), expression_type)
            if sub is None:
                return make_response(
                    request,
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    "parse the consumer's subscription failed",
                )
            return sub
        info = self.clients.consumer_group(group)
        if info is None:
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist{FAQ_SUFFIX}",
            )
        found = info.subscriptions.get(topic)
        if found is None:
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist{FAQ_SUFFIX}",
            )
        if found.sub_version < h.lenient_number("subVersion"):
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                "the consumer's subscription not latest",
            )
        return found

    def _process_pull(
        self,
        conn: Connection,
        request: RemotingCommand,
        serialize_type: int,
        *,
        allow_suspend: bool,
    ) -> RemotingCommand | None:
        h = Headers(request)
        group = h.opt_text("consumerGroup")
        topic = h.opt_text("topic")
        if group is None or topic is None:
            raise HeaderError("java.lang.NullPointerException")
        sys_flag = h.lenient_number("sysFlag")
        queue_id = h.lenient_number("queueId")
        queue_offset = h.lenient_number("queueOffset")
        max_msgs = h.lenient_number("maxMsgNums")
        has_suspend = bool(sys_flag & _PULL_SUSPEND)
        has_commit = bool(sys_flag & _PULL_COMMIT_OFFSET)
        suspend_ms = h.lenient_number("suspendTimeoutMillis") if has_suspend else 0

        cfg = self.topics.get(topic)
        if cfg is None:
            log.error("the topic %s does not exist, consumer: %s", topic, conn.remote_addr)
            return make_response(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please! {FAQ_SUFFIX}",
            )
        if not cfg.perm & PERM_READ:
            return make_response(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic}] pulling message is forbidden",
            )
        if queue_id < 0 or queue_id >= cfg.read_queue_nums:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{cfg.read_queue_nums}] consumer:[{_java_addr(conn)}]",
            )
        sub = self._pull_subscription(request, h, group, topic, sys_flag)
        if isinstance(sub, RemotingCommand):
            return sub
        if sub.expression_type is not ExpressionType.TAG:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by "
                + sub.expression_type.value,
            )
        tag_filter = _tag_filter(sub)
        result = self.store.get_messages(
            topic,
            queue_id,
            queue_offset,
            max(0, min(max_msgs, self.settings.max_pull_msgs)),
            max_total_bytes=self.settings.max_pull_bytes,
            tag_filter=tag_filter,
        )
        status = str(getattr(result.status, "name", result.status))
        if status in _EMPTY_QUEUE_STATUSES:
            code = (
                ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
            )
        else:
            code = _PULL_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        answer: RemotingCommand | None = None
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
            self.holds.hold(
                HeldPull(
                    conn=conn,
                    request=request,
                    serialize_type=serialize_type,
                    topic=topic,
                    queue_id=queue_id,
                    offset=queue_offset,
                    timeout=suspend_ms / 1000.0,
                    # Without a filter every arrival matches (no scan needed to know).
                    has_match=None
                    if tag_filter is None
                    else lambda: self._has_match(topic, queue_id, queue_offset, tag_filter),
                )
            )
        else:
            answer = make_response(
                request,
                code,
                status,
                fields={
                    "suggestWhichBrokerId": _MASTER_ID_TEXT,
                    "nextBeginOffset": str(result.next_begin_offset),
                    "minOffset": str(result.min_offset),
                    "maxOffset": str(result.max_offset),
                },
                body=b"".join(result.records) if code == ResponseCode.SUCCESS else b"",
            )
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning(
                "PULL_OFFSET_MOVED: topic=%s group=%s requestOffset=%d newOffset=%d",
                topic,
                group,
                queue_offset,
                result.next_begin_offset,
            )
        if allow_suspend and has_commit:
            self.store.consumer_offsets.commit_offset(
                group, topic, queue_id, h.lenient_number("commitOffset")
            )
        return answer

    def _has_match(self, topic: str, queue_id: int, offset: int, tag_filter: Any) -> bool:
        result = self.store.get_messages(topic, queue_id, offset, 1, tag_filter=tag_filter)
        return str(getattr(result.status, "name", result.status)) == "FOUND"

    def _max_offset(self, topic: str, queue_id: int) -> int:
        return int(self.store.max_offset(topic, queue_id))

    def _answer_held_pull(self, pull: HeldPull) -> None:
        try:
            response = self._process_pull(
                pull.conn, pull.request, pull.serialize_type, allow_suspend=False
            )
        except HeaderError as exc:
            response = make_response(pull.request, ResponseCode.SYSTEM_ERROR, exc.remark)
        if response is not None:
            pull.conn.respond(pull.request, response, pull.serialize_type)

    # -- consumer offsets --------------------------------------------------------

    def query_consumer_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("consumerGroup", "topic", "queueId")
        group, topic, queue_id = h.text("consumerGroup"), h.text("topic"), h.number("queueId")
        offset = self.store.consumer_offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return make_response(request, fields={"offset": offset})
        # Apache answers 0 when the queue still starts at 0 and its first message is
        # in memory; everything the embedded broker stores counts as in memory.
        if self.store.min_offset(topic, queue_id) <= 0:
            return make_response(request, fields={"offset": 0})
        return make_response(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_consumer_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("consumerGroup", "topic", "queueId", "commitOffset")
        self.store.consumer_offsets.commit_offset(
            h.text("consumerGroup"), h.text("topic"), h.number("queueId"), h.number("commitOffset")
        )
        return make_response(request)

    # -- offsets and messages of queues --------------------------------------------

    def _topic_queue(self, request: RemotingCommand) -> tuple[str, int]:
        h = Headers(request)
        h.require("topic", "queueId")
        return h.text("topic"), h.number("queueId")

    def get_max_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(request, fields={"offset": self.store.max_offset(topic, queue_id)})

    def get_min_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(request, fields={"offset": self.store.min_offset(topic, queue_id)})

    def search_offset_by_timestamp(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("topic", "queueId", "timestamp")
        offset = self.store.offset_for_timestamp(
            h.text("topic"), h.number("queueId"), h.number("timestamp")
        )
        return make_response(request, fields={"offset": offset})

    def get_earliest_msg_storetime(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(
            request, fields={"timestamp": self.store.earliest_store_time(topic, queue_id)}
        )

    def view_message_by_id(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        offset = h.number("offset")
        record = self.store.look_message(offset)
        if record is None:
            return make_response(
                request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return make_response(request, body=bytes(record))

    # -- clients -----------------------------------------------------------------

    def heart_beat(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        try:
            hb = parse_heartbeat(jsonwire.loads(request.body))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"com.alibaba.fastjson.JSONException: bad HeartbeatData body ({exc})",
            )
        language = request.language
        language_name = str(getattr(language, "name", language))
        for consumer in hb.consumers:
            self._create_topic_in_send_back(
                RETRY_GROUP_TOPIC_PREFIX + consumer.group,
                self.settings.retry_queue_nums,
                PERM_WRITE | PERM_READ,
                2 if consumer.unit_mode else 0,
            )
            changed = self.clients.register_consumer(
                consumer,
                ClientChannelInfo(conn, hb.client_id, language_name, request.version),
                notify_enabled=True,
            )
            if changed:
                log.info("consumer group %s changed by %s", consumer.group, hb.client_id)
        for group in hb.producer_groups:
            self.clients.register_producer(
                group, ClientChannelInfo(conn, hb.client_id, language_name, request.version)
            )
        return make_response(request)

    def unregister_client(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("clientID")
        producer_group = h.opt_text("producerGroup")
        if producer_group is not None:
            self.clients.unregister_producer(producer_group, conn)
        consumer_group = h.opt_text("consumerGroup")
        if consumer_group is not None:
            self.clients.unregister_consumer(consumer_group, conn)
        return make_response(request)

    def get_consumer_list_by_group(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group = Headers(request).text("consumerGroup")
        info = self.clients.consumer_group(group)
        if info is not None:
            ids = info.client_ids()
            if ids:
                return make_response(request, body=jsonwire.dumps({"consumerIdList": ids}))
        return make_response(
            request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
        )

    def _notify_consumer_ids_changed(self, channel: Any, group: str) -> None:
        if not self.settings.notify_consumer_ids_changed:
            return
        request = make_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
        channel.oneway(request)

    def get_consumer_connection_list(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group = Headers(request).text("consumerGroup")
        info = self.clients.consumer_group(group)
        if info is None:
            return make_response(
                request, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = {
            "connectionSet": [
                {
                    "clientAddr": ci.channel.remote_addr,
                    "clientId": ci.client_id,
                    "language": ci.language,
                    "version": ci.version,
                }
                for ci in info.channels.values()
            ],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {
                topic: subscription_to_json(sub) for topic, sub in info.subscriptions.items()
            },
        }
        return make_response(request, body=jsonwire.dumps(body))

    def get_consumer_running_info(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        h = Headers(request)
        h.require("consumerGroup", "clientId")
        group, client_id = h.text("consumerGroup"), h.text("clientId")
        info = self.clients.consumer_group(group)
        target = info.find_channel(client_id) if info is not None else None
        if target is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online",
            )
        self._spawn(self._relay(conn, request, serialize_type, target.channel, group, client_id))
        return None

    def consume_message_directly(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        """Admin -> broker -> client: the client consumes one stored message (debugging)."""
        h = Headers(request)
        h.require("consumerGroup", "clientId", "msgId")
        group, client_id = h.text("consumerGroup"), h.text("clientId")
        try:
            _, commit_log_offset = decode_offset_msg_id(h.text("msgId"))
        except ValueError:
            return make_response(
                request, ResponseCode.SYSTEM_ERROR, f"invalid msgId {h.text('msgId')}"
            )
        record = self.store.look_message(commit_log_offset)
        if record is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"can not find message by the offset, {commit_log_offset}",
            )
        info = self.clients.consumer_group(group)
        target = info.find_channel(client_id) if info is not None else None
        if target is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online",
            )
        forward = make_request(request.code, body=bytes(record))
        forward.ext_fields = dict(request.ext_fields)
        self._spawn(
            self._relay(
                conn, request, serialize_type, target.channel, group, client_id, forward=forward
            )
        )
        return None

    def invoke_broker_to_reset_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        """Broker2Client.resetOffset: compute offsets by time, push them to every client."""
        h = Headers(request)
        h.require("topic", "group", "timestamp")
        topic, group = h.text("topic"), h.text("group")
        timestamp = h.number("timestamp")
        force = h.boolean("isForce", True)
        if self.store.topics.get(topic) is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] topic config not exist, {topic}",
            )
        offsets: dict[MessageQueue, int] = {}
        for queue_id in self.store.queue_ids(topic):
            mq = MessageQueue(topic, self.settings.broker_name, queue_id)
            current = self.store.consumer_offsets.query_offset(group, topic, queue_id)
            if current == -1:
                return make_response(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    f"THe consumer group <{group}> not exist",
                )
            if timestamp == -1:
                target = self.store.max_offset(topic, queue_id)
            else:
                target = self.store.offset_for_timestamp(topic, queue_id, timestamp)
            target = max(target, 0)
            offsets[mq] = target if force or target < current else current
        info = self.clients.consumer_group(group)
        channels = list(info.channels.values()) if info is not None else []
        if not channels:
            return make_response(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {timestamp}",
            )
        body = encode_reset_offset(offsets)
        for channel in channels:
            push = make_request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                fields={"topic": topic, "group": group, "timestamp": timestamp, "isForce": force},
                body=body,
            )
            channel.channel.oneway(push)
        return make_response(request, body=body)

    async def _relay(
        self,
        conn: Connection,
        request: RemotingCommand,
        serialize_type: int,
        target: Connection,
        group: str,
        client_id: str,
        forward: RemotingCommand | None = None,
    ) -> None:
        """Broker2Client.callClient: forward the request to the client's connection."""
        if forward is None:
            forward = make_request(request.code, body=request.body)
            forward.ext_fields = dict(request.ext_fields)
        try:
            answer = await target.request(forward, self.settings.call_client_timeout)
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

    # -- queue locks -------------------------------------------------------------

    @staticmethod
    def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        try:
            body = jsonwire.loads(request.body)
            group = str(body["consumerGroup"])
            client_id = str(body["clientId"])
            mqs = [
                MessageQueue(str(m["topic"]), str(m["brokerName"]), int(m["queueId"]))
                for m in jsonwire.as_list(body.get("mqSet"))
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HeaderError(f"com.alibaba.fastjson.JSONException: bad lock body ({exc})") from exc
        return group, client_id, mqs

    def lock_batch_mq(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(request)
        locked = self.locks.try_lock_batch(group, mqs, client_id)
        body = {"lockOKMQSet": [_mq_json(mq) for mq in sorted(locked)]}
        return make_response(request, body=jsonwire.dumps(body))

    def unlock_batch_mq(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(request)
        self.locks.unlock_batch(group, mqs, client_id)
        return make_response(request)

    # -- topics (admin) ----------------------------------------------------------

    def update_and_create_topic(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require(
            "topic",
            "defaultTopic",
            "readQueueNums",
            "writeQueueNums",
            "perm",
            "topicFilterType",
            "order",
        )
        topic = h.text("topic")
        remark = validate_topic(topic)
        if remark is not None:
            return make_response(request, ResponseCode.SYSTEM_ERROR, remark)
        if topic in self.system_topics or topic.startswith("rmq_sys_"):
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{topic}] is conflict with system topic.",
            )
        cfg = TopicConfig(
            topic_name=topic,
            read_queue_nums=h.number("readQueueNums"),
            write_queue_nums=h.number("writeQueueNums"),
            perm=h.number("perm"),
            topic_filter_type=h.text("topicFilterType"),
            topic_sys_flag=h.opt_number("topicSysFlag", 0) or 0,
            order=h.boolean("order"),
        )
        self._save_topic(cfg)
        return make_response(request)

    def delete_topic_in_broker(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic = Headers(request).text("topic")
        if self.topics.delete(topic):
            self._on_topics_changed()
        return make_response(request)

    def get_all_topic_config(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        table = {cfg.topic_name: cfg.to_json() for cfg in self.topics.all()}
        body = {
            "dataVersion": self.topics.data_version.to_json(),
            "topicConfigTable": table,
        }
        return make_response(request, body=jsonwire.dumps(body))

    def get_consume_stats(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        group = h.text("consumerGroup")
        topic = h.opt_text("topic")
        if topic is None or not topic.strip():
            topics: Iterable[str] = self.store.consumer_offsets.topics_of_group(group)
        else:
            topics = [topic]
        table: list[tuple[Any, Any]] = []
        for name in sorted(topics):
            cfg = self.topics.get(name)
            if cfg is None:
                continue
            info = self.clients.consumer_group(group)
            if info is not None and info.subscriptions and name not in info.subscriptions:
                continue
            for qid in range(cfg.read_queue_nums):
                broker_offset = max(0, int(self.store.max_offset(name, qid)))
                consumer_offset = max(
                    0, int(self.store.consumer_offsets.query_offset(group, name, qid))
                )
                entry: dict[str, Any] = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": 0,
                }
                if consumer_offset > 0:
                    last = self.store.store_time_at(name, qid, consumer_offset - 1)
                    if last and last > 0:
                        entry["lastTimestamp"] = last
                key = {"brokerName": self.settings.broker_name, "queueId": qid, "topic": name}
                table.append((key, entry))
        body = {"consumeTps": 0.0, "offsetTable": jsonwire.ObjectKeyMap(tuple(table))}
        return make_response(request, body=jsonwire.dumps(body))


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


def _java_properties(props: Mapping[str, str]) -> str:
    """messageProperties2String of 4.9.8: ``k\\x01v`` pairs joined by ``\\x02``, none trailing."""
    return java_properties_string(props)


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


@functools.lru_cache(maxsize=1024)
def build_broker_subscription(
    topic: str, expression: str | None, expression_type: str | None
) -> SubscriptionData | None:
    """FilterAPI.build as the broker runs it on a pull's subscription; None when it fails.

    Unlike the client's builder it never rejects a tag expression: ``"||"`` gives
    an empty tag set that matches nothing, as on Apache.
    """
    if expression_type is None or expression_type == ExpressionType.TAG.value:
        if expression is None or expression.strip() in ("", SUB_ALL):
            return SubscriptionData(topic=topic, sub_string=SUB_ALL)
        tags = [t.strip() for t in expression.split("||")]
        tags = [t for t in tags if t]
        return SubscriptionData(
            topic=topic,
            sub_string=expression,
            tags_set=frozenset(tags),
            code_set=frozenset(java_string_hash(t) for t in tags),
        )
    if not expression:
        return None
    try:
        etype = ExpressionType(expression_type)
    except ValueError:
        return None
    return SubscriptionData(topic=topic, sub_string=expression, expression_type=etype)


def _tag_filter(sub: SubscriptionData) -> Callable[[int], bool] | None:
    """Which consume queue tag codes a pull accepts; None for all (ExpressionMessageFilter)."""
    if sub.sub_string == SUB_ALL or sub.class_filter_mode:
        return None
    return sub.code_set.__contains__
