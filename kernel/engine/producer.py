"""The producer (Java's DefaultMQProducer): used by tools, tests and the retry fallback.

Sends go to the topic's writable queues round robin, or to a queue chosen from a
key's hash for ordered streams. Failures are handled as Apache RocketMQ 4.9.8's
``DefaultMQProducerImpl.sendDefaultImpl`` handles them:

* ``send`` (Java's synchronous mode) makes up to ``1 + retry_times_when_send_failed``
  attempts within one ``send_msg_timeout`` budget. A connection failure, a timeout,
  an unknown broker, or a broker answer in ``retry_response_codes`` is retried on a
  queue of another broker; any other broker answer raises :class:`BrokerError` at
  once; when the attempts are spent, :class:`SendFailedError`; when the budget is
  spent, :class:`RemotingTooMuchRequestError`.
* ``send_async`` (Java's asynchronous mode) makes one attempt plus up to
  ``retry_times_when_send_async_failed`` retries, and only when no answer came; a
  broker's error answer is never retried.
* ``send_oneway`` makes one attempt; a send to a given queue or through a selector
  is not retried in the synchronous mode.
* Queue choice and broker avoidance: :mod:`rmqk.engine.fault_strategy`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs

from rmqk.engine import namespace_boundary as boundary
from rmqk.engine.client import ClientInstance
from rmqk.engine.fault_strategy import (
    DEFAULT_LATENCY_MAX,
    DEFAULT_NOT_AVAILABLE_DURATION,
    MQFaultStrategy,
    TopicPublishInfo,
)
from rmqk.engine.producer_hooks import announce, hooked_send
from rmqk.engine.request_reply import create_correlation_id
from rmqk.engine.send_request import (
    CommunicationMode,
    Payload,
    build_header,
    build_payload,
    now_ms,
    send_failed,
)
from rmqk.engine.startup import client_config, client_id_for
from rmqk.model import (
    MASTER_ID,
    RETRY_GROUP_TOPIC_PREFIX,
    MessageQueue,
    SendResult,
    SendStatus,
    ServiceState,
    TopicRouteData,
    java_string_hash,
)
from rmqk.model import namespace as nsutil
from rmqk.model.errors import (
    BrokerError,
    ClientError,
    RemotingError,
    RemotingTooMuchRequestError,
    RequestTimeoutError,
    RmqkError,
)
from rmqk.model.message import Message, MessageExt, MessageProperty, decode_offset_msg_id
from rmqk.options.producer import DEFAULT_RETRY_RESPONSE_CODES, ProducerOptions
from rmqk.pluginmanager import check_hook_plugins
from rmqk.spi.client_options import ClientOptions, resolve_client_options
from rmqk.spi.options import Where
from rmqk.spi.transport import SendMessageRequest
from rmqk.wire.uniq_id import create_uniq_id

__all__ = [
    "AsyncProducer",
    "CommunicationMode",
    "QueryResult",
    "QueueSelector",
    "check_target",
    "select_by_hash",
    "validate_message",
]

log = logging.getLogger("rmqk.engine.producer")

AUTO_CREATE_TOPIC_KEY = "TBW102"
# MQAdminImpl.timeoutMillis: the admin calls' timeout.
ADMIN_TIMEOUT_MS = 6000
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_OVER = 4096
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")

QueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: the same key always lands on the same queue."""
    value = java_string_hash(arg) if isinstance(arg, str) else hash(arg)
    return queues[abs(value) % len(queues)]


@attrs.frozen
class QueryResult:
    """Java's QueryResult: what a query by key found, and how fresh the brokers' index was."""

    index_last_update_timestamp: int
    messages: tuple[MessageExt, ...]


def check_target(queue: MessageQueue | None, selector: QueueSelector | None, arg: Any) -> None:
    """Refuse a send target rmqk would otherwise have to pick from: one queue or one selector."""
    if queue is not None and selector is not None:
        raise ClientError("give either queue= or selector=, not both: the send has one target")
    if selector is None and arg is not None:
        raise ClientError("arg= is the selector's argument: it needs selector=")


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


class AsyncProducer:
    """A producer running in the caller's event loop (Java's DefaultMQProducer).

    Takes the producer's own options (:class:`ProducerOptions`), ``transport`` and
    ``transport_options``, and every client option of
    :class:`rmqk.spi.client_options.ClientOptions` by the same keyword names the
    consumers take (``namesrv_addr``, ``use_tls``, ``tls_ca_file``, ``access_key``,
    ``mq_client_api_timeout``, ...), or one ``client_options=ClientOptions(...)``.
    Bad values raise :class:`rmqk.model.errors.ConfigError` naming each option.
    """

    def __init__(
        self,
        group: str,
        *,
        client_options: ClientOptions | None = None,
        send_msg_timeout: int = 3000,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        send_latency_fault_enable: bool = False,
        latency_max: Sequence[int] = DEFAULT_LATENCY_MAX,
        not_available_duration: Sequence[int] = DEFAULT_NOT_AVAILABLE_DURATION,
        retry_response_codes: Collection[int] = DEFAULT_RETRY_RESPONSE_CODES,
        compress_msg_body_over_howmuch: int = COMPRESS_OVER,
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        transport: str = "tcp",
        transport_options: dict[str, Any] | None = None,
        **client: Any,
    ) -> None:
        # namesrv_addr="" meant "from NAMESRV_ADDR", namespace="" "no namespace at all"
        # (the consumers' inner producer): both kept, outside the option check.
        if client.get("namesrv_addr") in ("", (), []):
            del client["namesrv_addr"]
        no_namespace = client.get("namespace") == ""
        if no_namespace:
            del client["namespace"]
        self.client_options = resolve_client_options(
            client_options, client, Where("<producer options>", f"producer {group!r}")
        )
        copts = self.client_options
        # Whose send hooks apply to this producer (None: every plugin's).
        self.hook_plugins = check_hook_plugins(copts.hook_plugins, f"producer {group!r}")
        self.namesrv_addrs = copts.namesrv_addr or tuple(
            a for a in os.environ.get("NAMESRV_ADDR", "").split(";") if a
        )
        who = f"producer {group!r}"
        self.namespace = nsutil.resolve_namespace(
            "" if no_namespace else copts.namespace, self.namesrv_addrs, who
        )
        group = nsutil.wrap(self.namespace, group)  # as Java's start(): wrapped, then checked
        if not group or not _GROUP_RE.match(group) or len(group) > 255:
            raise ClientError(
                f"producerGroup {group!r} is invalid: "
                "only letters, digits, %, |, - and _ are allowed"
            )
        if group == "DEFAULT_PRODUCER":
            raise ClientError(
                "producerGroup can not equal DEFAULT_PRODUCER, please specify another one."
            )
        self.group = group
        self.options = ProducerOptions.build(
            send_msg_timeout=send_msg_timeout,
            retry_times_when_send_failed=retry_times_when_send_failed,
            retry_times_when_send_async_failed=retry_times_when_send_async_failed,
            retry_another_broker_when_not_store_ok=retry_another_broker_when_not_store_ok,
            send_latency_fault_enable=send_latency_fault_enable,
            latency_max=latency_max,
            not_available_duration=not_available_duration,
            retry_response_codes=retry_response_codes,
            compress_msg_body_over_howmuch=compress_msg_body_over_howmuch,
            max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums,
            enable_msg_trace=copts.enable_msg_trace,
            customized_trace_topic=copts.customized_trace_topic,
            vip_channel_enabled=copts.vip_channel_enabled,
        )
        self.instance_name = copts.instance_name
        self.send_msg_timeout = self.options.send_msg_timeout
        self.max_message_size = self.options.max_message_size
        self.default_topic_queue_nums = self.options.default_topic_queue_nums
        self.fault_strategy = MQFaultStrategy(
            enabled=self.options.send_latency_fault_enable,
            latency_max=self.options.latency_max,
            not_available_duration=self.options.not_available_duration,
        )
        self.transport_name = transport
        self.transport_options = dict(transport_options or {})
        self.unit_name = copts.unit_name
        self.state = ServiceState.CREATE_JUST
        self.client: ClientInstance
        self._publish: dict[str, TopicPublishInfo] = {}
        self._owns_client = True
        # This producer's own send hooks (register_send_message_hook).
        self.send_hooks: list[Any] = []
        self._requested = False  # whether request() has made sure of a heartbeat

    def register_send_message_hook(self, hook: Any) -> Any:
        """Add a send hook of this producer only (Java's registerSendMessageHook).

        ``hook`` has ``send_message_before(context)`` and/or
        ``send_message_after(context)`` (plain or ``async def``), called around each
        send attempt of this producer with the :class:`~rmqk.spi.contexts.SendMessageContext`
        the ``rmqk_send_message_*`` plugin hooks receive, after them. Other clients of
        the process never reach it. One that raises is logged; the send goes on.
        """
        if not any(
            callable(getattr(hook, m, None)) for m in ("send_message_before", "send_message_after")
        ):
            raise ClientError(
                f"send hook {hook!r} has neither send_message_before(context) nor "
                "send_message_after(context)"
            )
        self.send_hooks.append(hook)
        return hook

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
            # Java's producer changes a DEFAULT instance name to the pid as well.
            self.client = ClientInstance.get_or_create(
                client_id_for(self.client_options, pid_instance_name=True),
                client_config(
                    self.client_options,
                    self.namesrv_addrs,
                    self.transport_name,
                    self.transport_options,
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
        await announce(self, "rmqk_client_started")

    async def shutdown(self) -> None:
        if self.state is not ServiceState.RUNNING:
            return
        self.state = ServiceState.SHUTDOWN_ALREADY
        if self._owns_client:
            await self.client.unregister_producer(self.group)
            await self.client.shutdown_if_unused()
        else:
            self.client.producers.pop(self.group, None)
        await announce(self, "rmqk_client_shutdown")

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- ProducerInner ------------------------------------------------------------

    def publish_topics(self) -> list[str]:
        return list(self._publish)

    def is_publish_topic_need_update(self, topic: str) -> bool:
        info = self._publish.get(topic)
        return info is None or not info.ok()

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None:
        queues = route.publish_queues(topic)
        if queues:
            info = self._publish.get(topic)
            if info is None:
                self._publish[topic] = TopicPublishInfo(queues)
            else:
                info.queues, info.route_known = queues, True

    async def _publish_info(self, topic: str) -> TopicPublishInfo:
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
                info = TopicPublishInfo(queues, route_known=False)
                self._publish[topic] = info
                return info
        raise ClientError(f"No route info of this topic: {topic}")

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (fetchPublishMessageQueues)."""
        queues = (await self._publish_info(nsutil.wrap(self.namespace, topic))).queues
        return [nsutil.unwrap_queue(self.namespace, mq) for mq in queues]

    # -- sending --------------------------------------------------------------------

    def _check_running(self) -> None:
        if self.state is not ServiceState.RUNNING:
            raise ClientError(f"The producer service state not OK, {self.state.value}")

    # -- MQAdmin (Java's DefaultMQProducer implements it through MQAdminImpl) -----------

    async def _admin_query(self, mq: MessageQueue, call: Callable[[str, MessageQueue], Any]) -> int:
        self._check_running()
        mq = nsutil.wrap_queue(self.namespace, mq)
        addr = await self._broker_addr(mq)
        try:
            return int(await call(addr, mq))
        except RmqkError as exc:
            raise ClientError(f"Invoke Broker[{addr}] exception: {exc}") from exc

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms``."""
        t = self.client.transport
        return await self._admin_query(
            mq, lambda addr, q: t.search_offset(addr, q, timestamp_ms, ADMIN_TIMEOUT_MS)
        )

    async def max_offset(self, mq: MessageQueue) -> int:
        t = self.client.transport
        return await self._admin_query(
            mq, lambda addr, q: t.get_max_offset(addr, q, ADMIN_TIMEOUT_MS)
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        t = self.client.transport
        return await self._admin_query(
            mq, lambda addr, q: t.get_min_offset(addr, q, ADMIN_TIMEOUT_MS)
        )

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        """The store time (ms) of the queue's earliest message."""
        t = self.client.transport
        return await self._admin_query(
            mq, lambda addr, q: t.get_earliest_msg_store_time(addr, q, ADMIN_TIMEOUT_MS)
        )

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message with this offset message id (``SendResult.offset_msg_id``), read
        from the broker the id names (MQAdminImpl.viewMessage)."""
        self._check_running()
        try:
            addr, offset = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            raise ClientError("query message by id finished, but no message.") from exc
        return await self.client.transport.view_message(addr, offset, ADMIN_TIMEOUT_MS)

    async def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryResult:
        """The messages of ``topic`` with ``key`` among their KEYS stored in [begin, end] ms
        (MQAdminImpl.queryMessage): every broker of the topic is asked (its master, else
        a replica); the index matches hashes, so other keys are dropped here, as in Java.
        Nothing found raises ClientError, as Java's NO_MESSAGE."""
        self._check_running()
        wire_topic = nsutil.wrap(self.namespace, topic)
        route = self.client.route_table.get(wire_topic)
        if route is None:
            await self.client.update_topic_route(wire_topic)
            route = self.client.route_table.get(wire_topic)
        addrs = [a for a in (b.select_addr() for b in route.broker_datas) if a] if route else []
        if not addrs:
            raise ClientError(f"The topic[{topic}] not matched route info")
        transport = self.client.transport
        answers = await asyncio.gather(
            *(
                transport.query_message(
                    addr, wire_topic, key, max_num, begin, end, False, ADMIN_TIMEOUT_MS * 3
                )
                for addr in addrs
            ),
            return_exceptions=True,
        )
        last_update = 0
        found: list[MessageExt] = []
        for addr, answer in zip(addrs, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, RmqkError | OSError):
                    raise answer
                # Java logs a broker that failed and goes on with the others.
                log.warning("queryMessage at %s failed: %s", addr, answer)
                continue
            stamp, messages = answer
            last_update = max(last_update, stamp)
            for m in messages:
                keys = (m.keys or "").split(MessageProperty.KEY_SEPARATOR)
                if m.topic == wire_topic and key in keys:
                    m.topic = nsutil.unwrap(self.namespace, m.topic)
                    found.append(m)
                else:
                    log.warning("queryMessage, find message key not matched, maybe hash duplicate")
        if not found:
            raise ClientError("query message by key finished, but no message.")
        return QueryResult(last_update, tuple(found))

    async def create_topic(
        self, key: str, new_topic: str, queue_num: int, topic_sys_flag: int = 0
    ) -> None:
        """Create ``new_topic`` with ``queue_num`` read and write queues on every master of
        the brokers serving ``key`` (MQAdminImpl.createTopic; ``key`` is usually TBW102)."""
        self._check_running()
        new_topic = nsutil.wrap(self.namespace, new_topic)
        validate_message(Message(new_topic, b"x"))  # Validators.checkTopic
        if nsutil.is_system_resource(new_topic):
            raise ClientError(f"The topic[{new_topic}] is conflict with system topic.")
        transport = self.client.transport
        try:
            route = await transport.get_route(key, ADMIN_TIMEOUT_MS)
        except RmqkError as exc:
            raise ClientError(f"create new topic failed: {exc}") from exc
        if route is None or not route.broker_datas:
            raise ClientError("create new topic failed: Not found broker, maybe key is wrong")
        created, error = False, None
        for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = broker.broker_addrs.get(MASTER_ID)
            if addr is None:
                continue
            for attempt in range(5):
                try:
                    await transport.create_topic(
                        addr,
                        new_topic,
                        queue_num,
                        queue_num,
                        timeout_ms=ADMIN_TIMEOUT_MS,
                        default_topic=key,
                        topic_sys_flag=topic_sys_flag,
                    )
                    created = True
                    break
                except RmqkError as exc:
                    if attempt == 4:
                        error = exc
        if error is not None and not created:
            raise ClientError(
                f"create new topic failed: create topic to broker exception: {error}"
            ) from error

    # -- request-reply ----------------------------------------------------------------

    async def request(
        self,
        msg: Message,
        timeout: float = 3.0,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> MessageExt:
        """Send ``msg`` as a request and wait up to ``timeout`` seconds for its reply.

        Java's ``request(msg, timeout)`` (and its ``mq`` and ``selector`` forms):
        ``msg`` gets CORRELATION_ID, REPLY_TO_CLIENT and TTL properties and is sent
        in the asynchronous mode; the reply a responder sends with
        :func:`rmqk.create_reply_message` is returned. No reply in time raises
        :class:`~rmqk.model.errors.RequestTimeoutError` naming the correlation id; a
        failed send raises :class:`ClientError` with the send's error as its cause.
        """
        self._check_running()
        check_target(queue, selector, arg)
        if not timeout > 0:
            raise ClientError(f"the request timeout must be > 0 seconds, not {timeout!r}")
        timeout_ms = int(timeout * 1000)
        begin = now_ms()
        correlation_id = create_correlation_id()
        # prepareSendRequest: the caller's message carries them, as in Java.
        msg.properties[MessageProperty.CORRELATION_ID] = correlation_id
        msg.properties[MessageProperty.MESSAGE_REPLY_TO_CLIENT] = self.client.client_id
        msg.properties[MessageProperty.MESSAGE_TTL] = str(timeout_ms)
        wire_topic = nsutil.wrap(self.namespace, msg.topic)
        if wire_topic not in self.client.route_table or not self._requested:
            # A broker pushes a reply only to a client it has a producer heartbeat
            # from: Java heartbeats when the topic's route is new; rmqk also does on
            # a producer's first request, as a route looked up before (queues_for,
            # a send) may have come before any heartbeat reached its brokers.
            await self._publish_info(wire_topic)
            await self.client.send_heartbeat_to_all_brokers()
            self._requested = True
        futures = self.client.reply_futures
        waiting = futures.register(correlation_id)
        try:
            remaining = timeout_ms - (now_ms() - begin)
            if remaining < 1:
                raise self._request_timeout(msg.topic, timeout_ms, correlation_id)
            try:
                await self.send_async(
                    msg, queue=queue, selector=selector, arg=arg, timeout_ms=int(remaining)
                )
            except (RmqkError, OSError) as exc:
                raise ClientError(
                    f"send request message to <{msg.topic}> fail "
                    f"(CorrelationId: {correlation_id}): {exc}"
                ) from exc
            remaining = timeout_ms - (now_ms() - begin)
            try:
                async with asyncio.timeout(max(remaining, 0) / 1000):
                    return await waiting
            except TimeoutError:
                raise self._request_timeout(msg.topic, timeout_ms, correlation_id) from None
        finally:
            futures.forget(correlation_id)

    @staticmethod
    def _request_timeout(topic: str, timeout_ms: int, correlation_id: str) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"send request message to <{topic}> OK, but wait reply message timeout, "
            f"{timeout_ms} ms (CorrelationId: {correlation_id})",
            correlation_id=correlation_id,
        )

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer (Java's synchronous mode; retries above)."""
        check_target(queue, selector, arg)
        ns = self.namespace
        return await boundary.send_in(ns, self._send_sync, msg, queue, selector, arg, timeout_ms)

    async def _send_sync(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None,
        selector: QueueSelector | None,
        arg: Any,
        timeout_ms: int | None,
    ) -> SendResult:
        self._check_running()
        validate_message(msg, self.max_message_size)
        timeout = timeout_ms or self.send_msg_timeout
        payload = self._payload(msg)
        if queue is not None or selector is not None:
            begin = now_ms()
            info = await self._publish_info(msg.topic)
            mq = queue if queue is not None else selector(info.queues, msg, arg)  # type: ignore[misc]
            remaining = timeout - (now_ms() - begin)
            if remaining < 0:
                raise RemotingTooMuchRequestError("call timeout")
            result = await self._send_kernel(mq, payload, CommunicationMode.SYNC, remaining)
            assert result is not None
            return result
        result = await self._send_default(payload, CommunicationMode.SYNC, timeout)
        assert result is not None
        return result

    async def send_async(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send with Java's asynchronous mode's rules (``send(msg, SendCallback)``).

        Await it, or wrap it in a task for a send that completes in the background.
        """
        check_target(queue, selector, arg)
        ns = self.namespace
        return await boundary.send_in(ns, self._send_async, msg, queue, selector, arg, timeout_ms)


    async def _send_async(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None,
        selector: QueueSelector | None,
        arg: Any,
        timeout_ms: int | None,
    ) -> SendResult:
        begin = now_ms()
        timeout = timeout_ms or self.send_msg_timeout
        self._check_running()
        validate_message(msg, self.max_message_size)
        payload = self._payload(msg)
        info = await self._publish_info(msg.topic)
        if queue is None and selector is None:
            cost = now_ms() - begin
            if timeout <= cost:
                raise RemotingTooMuchRequestError("DEFAULT ASYNC send call timeout")
            result = await self._send_default(payload, CommunicationMode.ASYNC, timeout - cost)
            assert result is not None
            return result
        mq = queue if queue is not None else selector(info.queues, msg, arg)  # type: ignore[misc]
        # A send to a chosen queue retries on that queue's broker (no publish info).
        addr, header = await self._prepare(mq, payload)
        remaining = timeout - (now_ms() - begin)
        if remaining < 0:
            raise RemotingTooMuchRequestError("sendKernelImpl call timeout")
        return await self._exchange_async(mq.broker_name, addr, header, payload, remaining, None)

    async def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """One attempt, no answer awaited (Java's oneway mode; ``sendOneway(msg, mq)``
        and ``sendOneway(msg, selector, arg)`` with ``queue=`` or ``selector=``)."""
        check_target(queue, selector, arg)
        queue, selector = boundary.wire_target(self.namespace, queue, selector)
        msg = boundary.wire_message(self.namespace, msg)
        self._check_running()
        validate_message(msg, self.max_message_size)
        payload = self._payload(msg)
        if queue is None and selector is None:
            await self._send_default(payload, CommunicationMode.ONEWAY, self.send_msg_timeout)
            return
        begin = now_ms()
        if queue is None:
            assert selector is not None
            info = await self._publish_info(msg.topic)
            queue = selector(info.queues, msg, arg)
        remaining = self.send_msg_timeout - (now_ms() - begin)
        if remaining < 0:
            raise RemotingTooMuchRequestError("call timeout")
        await self._send_kernel(queue, payload, CommunicationMode.ONEWAY, remaining)

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
        """Send several messages of one topic in one request (SEND_BATCH_MESSAGE).

        Retried as ``send`` is, unless ``queue`` is given.
        """
        return await self._batch_in(msgs, queue, timeout_ms, CommunicationMode.SYNC)

    async def send_batch_async(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """``send_batch`` with the asynchronous mode's rules (Java's
        ``send(Collection, SendCallback)``): retried only when no answer came."""
        return await self._batch_in(msgs, queue, timeout_ms, CommunicationMode.ASYNC)

    async def _batch_in(
        self,
        msgs: Sequence[Message],
        queue: MessageQueue | None,
        timeout_ms: int | None,
        mode: CommunicationMode,
    ) -> SendResult:
        ns = self.namespace
        queue, _ = boundary.wire_target(ns, queue, None)
        wire = [boundary.wire_message(ns, m) for m in msgs] if ns else msgs
        result = await self._send_batch(wire, queue=queue, timeout_ms=timeout_ms, mode=mode)
        return boundary.user_send_result(ns, result)

    async def _send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None,
        timeout_ms: int | None,
        mode: CommunicationMode = CommunicationMode.SYNC,
    ) -> SendResult:
        begin = now_ms()
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
        payload = Payload(topic=topic, body=body, properties="", batch=True)
        timeout = timeout_ms or self.send_msg_timeout
        if mode is CommunicationMode.ASYNC:
            if queue is None:
                result = await self._send_default(payload, mode, timeout - (now_ms() - begin))
            else:
                # As send_async to a queue: retried on that queue's broker only.
                addr, header = await self._prepare(queue, payload)
                remaining = timeout - (now_ms() - begin)
                if remaining < 0:
                    raise RemotingTooMuchRequestError("sendKernelImpl call timeout")
                result = await self._exchange_async(
                    queue.broker_name, addr, header, payload, remaining, None
                )
        elif queue is not None:
            result = await self._send_kernel(queue, payload, mode, timeout)
        else:
            result = await self._send_default(payload, mode, timeout)
        assert result is not None
        return result

    # -- sendDefaultImpl ------------------------------------------------------------

    async def _send_default(
        self, payload: Payload, mode: CommunicationMode, timeout: float
    ) -> SendResult | None:
        begin_first = now_ms()
        info = await self._publish_info(payload.topic)
        options = self.options
        fault = self.fault_strategy
        times_total = (
            1 + options.retry_times_when_send_failed if mode is CommunicationMode.SYNC else 1
        )
        mq: MessageQueue | None = None
        error: Exception | None = None
        result: SendResult | None = None
        brokers_sent: list[str] = []
        times = 0
        call_timeout = False
        while times < times_total:
            mq = fault.select_one_message_queue(info, mq.broker_name if mq else None)
            brokers_sent.append(mq.broker_name)
            times += 1
            begin_prev = now_ms()
            cost = begin_prev - begin_first
            if timeout < cost:
                call_timeout = True
                break
            try:
                if mode is CommunicationMode.ASYNC:
                    addr, header = await self._prepare(mq, payload)
                    remaining = timeout - (now_ms() - begin_first)
                    if remaining < 0:
                        raise RemotingTooMuchRequestError("sendKernelImpl call timeout")
                else:
                    result = await self._send_kernel(mq, payload, mode, timeout - cost)
            except (RemotingError, ClientError) as exc:
                fault.update_fault_item(mq.broker_name, now_ms() - begin_prev, True)
                log.warning("send to %s failed, resend at once: %s", mq, exc)
                error = exc
                continue
            except BrokerError as exc:
                fault.update_fault_item(mq.broker_name, now_ms() - begin_prev, True)
                error = exc
                if exc.code in options.retry_response_codes:
                    log.warning("send to %s failed, resend at once: %s", mq, exc)
                    continue
                if result is not None:
                    return result
                raise
            fault.update_fault_item(mq.broker_name, now_ms() - begin_prev, False)
            if mode is CommunicationMode.ASYNC:
                return await self._exchange_async(
                    mq.broker_name, addr, header, payload, remaining, info
                )
            if mode is CommunicationMode.ONEWAY:
                return None
            assert result is not None
            if result.status is not SendStatus.SEND_OK and (
                options.retry_another_broker_when_not_store_ok
            ):
                continue
            return result
        if result is not None:
            return result
        if call_timeout:
            raise RemotingTooMuchRequestError("sendDefaultImpl call timeout") from error
        raise send_failed(payload.topic, times, now_ms() - begin_first, brokers_sent, error)

    async def _exchange_async(
        self,
        broker_name: str,
        addr: str,
        header: SendMessageRequest,
        payload: Payload,
        timeout: float,
        info: TopicPublishInfo | None,
    ) -> SendResult:
        """sendMessageAsync: retried, on another broker when it can be, only if no answer came."""
        fault = self.fault_strategy
        retries = 0
        while True:
            begin = now_ms()
            try:
                if timeout < 0:
                    raise RemotingTooMuchRequestError("invokeAsyncImpl call timeout")
                result = await hooked_send(
                    self, broker_name, addr, header, payload, int(timeout), CommunicationMode.ASYNC
                )
            except BrokerError:
                fault.update_fault_item(broker_name, now_ms() - begin, True)
                raise
            except (RemotingError, ClientError) as exc:
                cost = now_ms() - begin
                fault.update_fault_item(broker_name, cost, True)
                retries += 1
                if retries > self.options.retry_times_when_send_async_failed:
                    raise
                if info is not None:
                    broker_name = fault.select_one_message_queue(info, broker_name).broker_name
                found = self.client.find_broker_address_in_publish(broker_name)
                if found is None:
                    raise ClientError(f"The broker[{broker_name}] not exist") from exc
                log.warning("async send retry %d to %s (%s): %s", retries, broker_name, found, exc)
                addr, timeout = found, timeout - cost
                continue
            assert result is not None
            fault.update_fault_item(broker_name, now_ms() - begin, False)
            return result

    # -- sendKernelImpl -------------------------------------------------------------

    def _payload(self, msg: Message) -> Payload:
        return build_payload(msg, self.options.compress_msg_body_over_howmuch)

    async def _broker_addr(self, mq: MessageQueue) -> str:
        """The publish address, the route refreshed if unknown (sends and MQAdminImpl alike)."""
        addr = self.client.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self.client.update_topic_route(mq.topic)
            addr = self.client.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def _prepare(self, mq: MessageQueue, payload: Payload) -> tuple[str, SendMessageRequest]:
        addr = await self._broker_addr(mq)
        return addr, build_header(
            self.group,
            mq,
            payload,
            self.default_topic_queue_nums,
            self.client_options.unit_mode,
        )

    async def _send_kernel(
        self, mq: MessageQueue, payload: Payload, mode: CommunicationMode, timeout: float
    ) -> SendResult | None:
        begin = now_ms()
        addr, header = await self._prepare(mq, payload)
        remaining = timeout - (now_ms() - begin)
        if remaining < 0:
            raise RemotingTooMuchRequestError("sendKernelImpl call timeout")
        return await hooked_send(
            self, mq.broker_name, addr, header, payload, int(remaining), mode
        )
