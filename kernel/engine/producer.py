"""The producer (Java's DefaultMQProducer): used by tools, tests and the retry fallback.

Sends go to the topic's writable queues round robin, or to a queue chosen from a
key's hash for ordered streams. A failed synchronous send is retried (2 more
attempts by default) on another broker when there is one.
"""

from __future__ import annotations

import logging
import os
import re
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from rmqk.engine.client import ClientConfig, ClientInstance, build_client_id
from rmqk.errors import ClientError, RmqkError
from rmqk.message import Message, MessageProperty, format_properties
from rmqk.model import (
    RETRY_GROUP_TOPIC_PREFIX,
    MessageQueue,
    SendResult,
    ServiceState,
    TopicRouteData,
    java_string_hash,
)
from rmqk.transport import SendMessageRequest
from rmqk.uniq_id import create_uniq_id

__all__ = ["AsyncProducer", "QueueSelector", "select_by_hash", "validate_message"]

log = logging.getLogger("rmqk.engine.producer")

AUTO_CREATE_TOPIC_KEY = "TBW102"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_OVER = 4096
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
SYSFLAG_COMPRESSED = 0x1

QueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: the same key always lands on the same queue."""
    value = java_string_hash(arg) if isinstance(arg, str) else hash(arg)
    return queues[abs(value) % len(queues)]


def validate_message(msg: Message, max_size: int = MAX_MESSAGE_SIZE) -> None:
    """Java's Validators.checkMessage, with its limits and messages."""
    if msg is None:
        raise ClientError("the message is null")
    topic = msg.topic
    if not topic or not topic.strip():
        raise ClientError("The specified topic is blank")
    if len(topic) > 127 and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise ClientError(f"The specified topic is longer than topic max length 127: {topic}")
    if not _TOPIC_RE.match(topic):
        raise ClientError(
            f"The specified topic[{topic}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    if topic == AUTO_CREATE_TOPIC_KEY:
        raise ClientError(f"The topic[{topic}] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC.")
    if not msg.body:
        raise ClientError("the message body length is zero")
    if len(msg.body) > max_size:
        raise ClientError(f"the message body size over max value, MAX: {max_size}")


class _PublishInfo:
    __slots__ = ("counter", "queues", "route")

    def __init__(self, queues: tuple[MessageQueue, ...], route: TopicRouteData | None) -> None:
        self.queues = queues
        self.counter = 0
        self.route = route

    def select(self, last_broker: str | None) -> MessageQueue:
        self.counter += 1
        n = len(self.queues)
        if last_broker is not None:
            for i in range(n):
                mq = self.queues[(self.counter + i) % n]
                if mq.broker_name != last_broker:
                    return mq
        return self.queues[self.counter % n]


class AsyncProducer:
    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str] = "",
        instance_name: str = "DEFAULT",
        send_msg_timeout: int = 3000,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_howmuch: int = COMPRESS_OVER,
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        transport: str = "tcp",
        transport_options: dict[str, Any] | None = None,
        unit_name: str | None = None,
    ) -> None:
        if not group or not _GROUP_RE.match(group) or len(group) > 255:
            raise ClientError(
                f"producerGroup {group!r} is invalid: "
                "only letters, digits, %, |, - and _ are allowed"
            )
        if group == "DEFAULT_PRODUCER":
            raise ClientError(
                "producerGroup can not equal DEFAULT_PRODUCER, please specify another one."
            )
        if isinstance(namesrv_addr, str):
            addrs = tuple(a for a in namesrv_addr.split(";") if a)
        else:
            addrs = tuple(namesrv_addr)
        self.group = group
        self.namesrv_addrs = addrs or tuple(
            a for a in os.environ.get("NAMESRV_ADDR", "").split(";") if a
        )
        self.instance_name = instance_name
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_over = compress_msg_body_over_howmuch
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.transport_name = transport
        self.transport_options = dict(transport_options or {})
        self.unit_name = unit_name
        self.state = ServiceState.CREATE_JUST
        self.client: ClientInstance
        self._publish: dict[str, _PublishInfo] = {}
        self._owns_client = True

    async def start(self, client: ClientInstance | None = None) -> None:
        if self.state is not ServiceState.CREATE_JUST:
            raise ClientError(
                f"The producer service state not OK, maybe started once, {self.state.value}"
            )
        if client is None and not self.namesrv_addrs:
            raise ClientError("namesrv_addr is not set")
        self.state = ServiceState.START_FAILED
        if client is not None:
            # The consumer's inner producer shares the consumer's instance (start(false)).
            self.client = client
            self._owns_client = False
        else:
            name = self.instance_name
            if name == "DEFAULT":
                name = f"{os.getpid()}#{time.monotonic_ns()}"
            self.client = ClientInstance.get_or_create(
                build_client_id(name, self.unit_name),
                ClientConfig(
                    namesrv_addrs=self.namesrv_addrs,
                    transport=self.transport_name,
                    transport_options=self.transport_options,
                ),
            )
        if not self.client.register_producer(self.group, self):
            self.state = ServiceState.CREATE_JUST
            raise ClientError(
                f"The producer group[{self.group}] has been created before, "
                "specify another name please."
            )
        if self._owns_client:
            await self.client.start()
        self.state = ServiceState.RUNNING

    async def shutdown(self) -> None:
        if self.state is not ServiceState.RUNNING:
            return
        self.state = ServiceState.SHUTDOWN_ALREADY
        if self._owns_client:
            await self.client.unregister_producer(self.group)
            await self.client.shutdown_if_unused()
        else:
            self.client.producers.pop(self.group, None)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- ProducerInner ------------------------------------------------------------

    def publish_topics(self) -> list[str]:
        return list(self._publish)

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None:
        queues = route.publish_queues(topic)
        if queues:
            info = self._publish.get(topic)
            if info is None:
                self._publish[topic] = _PublishInfo(queues, route)
            else:
                info.queues, info.route = queues, route

    async def _publish_info(self, topic: str) -> _PublishInfo:
        info = self._publish.get(topic)
        if info is not None and info.queues:
            return info
        await self.client.update_topic_route(topic)
        info = self._publish.get(topic)
        if info is not None and info.queues:
            return info
        # Unknown topic: borrow the auto-create template's route, as Java does; the broker
        # creates the topic on the first send when autoCreateTopicEnable is on.
        route = await self.client.transport.get_route(AUTO_CREATE_TOPIC_KEY, 3000)
        if route is not None:
            for b in route.broker_datas:
                self.client.broker_addr_table[b.broker_name] = dict(b.broker_addrs)
            queues = tuple(
                MessageQueue(topic, q.broker_name, i)
                for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
                for i in range(min(self.default_topic_queue_nums, q.read_queue_nums))
            )
            if queues:
                info = _PublishInfo(queues, None)
                self._publish[topic] = info
                return info
        raise ClientError(f"No route info of this topic: {topic}")

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (fetchPublishMessageQueues)."""
        return list((await self._publish_info(topic)).queues)

    # -- sending --------------------------------------------------------------------

    def _check_running(self) -> None:
        if self.state is not ServiceState.RUNNING:
            raise ClientError(f"The producer service state not OK, {self.state.value}")

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer; retried on another broker when one fails."""
        self._check_running()
        validate_message(msg, self.max_message_size)
        timeout = timeout_ms or self.send_msg_timeout
        info = await self._publish_info(msg.topic)
        if queue is not None or selector is not None:
            mq = queue if queue is not None else selector(info.queues, msg, arg)  # type: ignore[misc]
            result = await self._send_to(mq, msg, timeout, oneway=False)
            assert result is not None
            return result
        deadline = time.monotonic() + timeout / 1000
        last_broker: str | None = None
        last_error: Exception | None = None
        for _attempt in range(1 + self.retry_times_when_send_failed):
            mq = info.select(last_broker)
            remaining = int((deadline - time.monotonic()) * 1000)
            if remaining <= 0:
                break
            try:
                result = await self._send_to(mq, msg, remaining, oneway=False)
                assert result is not None
                return result
            except RmqkError as exc:
                last_error = exc
                last_broker = mq.broker_name
                log.warning("send to %s failed (%s); retrying", mq, exc)
        raise ClientError(
            f"send of a message to topic {msg.topic} failed: {last_error}"
        ) from last_error

    async def send_oneway(self, msg: Message) -> None:
        self._check_running()
        validate_message(msg, self.max_message_size)
        info = await self._publish_info(msg.topic)
        await self._send_to(info.select(None), msg, self.send_msg_timeout, oneway=True)

    async def send_orderly(
        self, msg: Message, key: str, timeout_ms: int | None = None
    ) -> SendResult:
        """Send to the queue the key hashes to, so one key's messages keep their order."""
        return await self.send(msg, selector=select_by_hash, arg=key, timeout_ms=timeout_ms)

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send several messages of one topic in one request (SEND_BATCH_MESSAGE)."""
        self._check_running()
        if not msgs:
            raise ClientError("the batch is empty")
        topic = msgs[0].topic
        for m in msgs:
            if m.topic != topic:
                raise ClientError("The topic of the messages in one batch should be the same")
            if m.delay_level > 0:
                raise ClientError("TimeDelayLevel is not supported for batching")
            if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise ClientError("Retry Group is not supported for batching")
            validate_message(m, self.max_message_size)
            m.properties.setdefault(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
        body = self.client.transport.encode_batch(msgs)
        if len(body) > self.max_message_size:
            raise ClientError(
                f"the batch body size {len(body)} is over max value {self.max_message_size}"
            )
        info = await self._publish_info(topic)
        mq = queue or info.select(None)
        addr = await self._broker_addr(mq)
        header = SendMessageRequest(
            producer_group=self.group,
            topic=topic,
            queue_id=mq.queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties="",
            batch=True,
            default_topic_queue_nums=self.default_topic_queue_nums,
        )
        result = await self.client.transport.send_message(
            addr, mq.broker_name, header, body, timeout_ms or self.send_msg_timeout
        )
        assert result is not None
        return result

    async def _broker_addr(self, mq: MessageQueue) -> str:
        addr = self.client.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self.client.update_topic_route(mq.topic)
            addr = self.client.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def _send_to(
        self, mq: MessageQueue, msg: Message, timeout_ms: int, oneway: bool
    ) -> SendResult | None:
        addr = await self._broker_addr(mq)
        props = dict(msg.properties)
        props.setdefault(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
        body = msg.body
        sys_flag = 0
        if len(body) > self.compress_over:
            compressed = zlib.compress(body, 5)
            if len(compressed) < len(body):
                body = compressed
                sys_flag |= SYSFLAG_COMPRESSED
        reconsume = None
        max_reconsume = None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            reconsume = props.get(MessageProperty.RECONSUME_TIME)
            max_reconsume = props.get(MessageProperty.MAX_RECONSUME_TIMES)
        header = SendMessageRequest(
            producer_group=self.group,
            topic=msg.topic,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=msg.flag,
            properties=format_properties(props),
            reconsume_times=int(reconsume) if reconsume else 0,
            max_reconsume_times=int(max_reconsume) if max_reconsume else None,
            default_topic_queue_nums=self.default_topic_queue_nums,
        )
        return await self.client.transport.send_message(
            addr, mq.broker_name, header, body, timeout_ms, oneway=oneway
        )
