"""The asyncio push consumer (Java's DefaultMQPushConsumer and its Impl)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from rmqk.engine.client_check import check_client_in_broker
from rmqk.engine.consume_host import create_consume_service
from rmqk.engine.listener import ListenerInvoker
from rmqk.engine.member import ConsumerMember, options_where
from rmqk.engine.namespace_boundary import unwrapping_rebalance_listener
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.pull import (
    PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL,
    FlowControl,
    PullAPI,
    offsets_went_backwards,
)
from rmqk.engine.rebalance import Rebalance
from rmqk.engine.startup import load_offset_store, start_once
from rmqk.engine.stats import ConsumerStats
from rmqk.model import (
    RETRY_GROUP_TOPIC_PREFIX,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    ServiceState,
    SubscriptionData,
    build_subscription,
)
from rmqk.model.errors import ClientError, ConfigError, RmqkError
from rmqk.model.message import Message, MessageExt, MessageProperty
from rmqk.options import ConsumerOptions, validate_options
from rmqk.spi.consume import ConsumeService
from rmqk.spi.contexts import ClientRole
from rmqk.spi.contracts import ReadOffsetType
from rmqk.spi.transport import ConsumeMessageDirectlyResult, ConsumeStatus

__all__ = ["AsyncPushConsumer"]

log = logging.getLogger("rmqk.engine.consumer")

# DefaultMQPushConsumerImpl's fixed delays.
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000
BROKER_SUSPEND_MAX_TIME_MILLIS = 15_000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30_000
OFFSET_ILLEGAL_FIX_DELAY_MS = 10_000
RESET_OFFSET_PAUSE_MS = 10_000
# The timeout of the admin requests a rebalance sends (max offset, search by time).
ADMIN_TIMEOUT_MS = 3000


class AsyncPushConsumer(ConsumerMember):
    """A push consumer running in the caller's event loop.

    ``AsyncPushConsumer(group, namesrv_addr=..., **options)`` takes every option of
    :class:`rmqk.options.ConsumerOptions` by its snake_case Java name; bad values
    raise :class:`rmqk.model.errors.ConfigError` naming the option and what is allowed.
    """

    consume_type = ConsumeType.CONSUME_PASSIVELY
    client_role = ClientRole.PUSH_CONSUMER
    reported_options = (
        *ConsumerMember.reported_options,
        "consume_thread_min",
        "consume_thread_max",
        "consume_message_batch_max_size",
        "consume_concurrently_max_span",
    )
    log = log

    def __init__(self, group: str, options: ConsumerOptions | None = None, **kwargs: Any) -> None:
        where = options_where(group, "consumer")
        if options is not None and kwargs:
            raise ClientError("pass either a ConsumerOptions or keyword options, not both")
        if options is None:
            options, problems = validate_options(kwargs, where)
            if problems:
                raise ConfigError(problems)
        super().__init__(group, options)
        self.rebalance = Rebalance(self)
        self._subscriptions: dict[str, tuple[str, ExpressionType]] = {}
        self.listener: Callable[..., Any] | None = None
        self.listener_name: str | None = None
        self.rebalance_listener: Callable[..., Any] | None = None
        self._consume_hooks: list[Any] = []
        self.paused = False
        self.consume_service: ConsumeService
        self.invoker: ListenerInvoker
        self.consume_orderly = False
        self.flow = FlowControl(
            log,
            count=options.pull_threshold_for_queue,
            size_mib=options.pull_threshold_size_for_queue,
            span=options.consume_concurrently_max_span,
        )
        self.pull_api: PullAPI
        self.stats = ConsumerStats()
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        # Where this run started on each queue it pulled: what a stop reports progress from.
        self.run_start_offsets: dict[MessageQueue, int] = {}

    # -- configuration ------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> asyncio.Future[None] | None:
        """Subscribe to ``topic`` with a tag expression (``"TagA || TagB"``) or SQL92.

        On a running consumer the returned future ends once the brokers know the
        subscription; for SQL92 it raises SubscriptionRefusedError, with the
        broker's reason, when a broker of the topic cannot filter by it (the
        subscription is then not taken).
        """
        topic = self.wire_topic(topic)
        try:
            sub = build_subscription(topic, expression, expression_type, int(time.time() * 1000))
        except ValueError as exc:
            # The same rule, and words, as the lite pull consumer and ``rmqk check``.
            raise ClientError(f"subscribe to {topic!r}: {exc}") from None
        etype = sub.expression_type
        if self.state is not ServiceState.RUNNING:
            self._subscriptions[topic] = (sub.sub_string, etype)
            return None
        if etype is ExpressionType.TAG:
            self._subscriptions[topic] = (sub.sub_string, etype)
            self.rebalance.subscription_inner[topic] = sub
            return self._spawn(self.client.send_heartbeat_to_all_brokers())
        return self._spawn(self._subscribe_checked(sub))

    async def _subscribe_checked(self, sub: SubscriptionData) -> None:
        await self.client.update_topic_route(sub.topic)
        await check_client_in_broker(self.client, self.group, [sub])
        self._subscriptions[sub.topic] = (sub.sub_string, sub.expression_type)
        self.rebalance.subscription_inner[sub.topic] = sub
        await self.client.send_heartbeat_to_all_brokers()

    def unsubscribe(self, topic: str) -> None:
        topic = self.wire_topic(topic)
        self._subscriptions.pop(topic, None)
        self.rebalance.subscription_inner.pop(topic, None)

    def register_listener(
        self, listener: Callable[..., Any], *, name: str | None = None
    ) -> Callable[..., Any]:
        """Set the listener; usable as a decorator. May be a function or a coroutine function.

        ``name`` is what the failure log lines call the listener (by default its
        ``module:qualname``); ``rmqk run`` passes the sink's, as the config names it.
        """
        if not callable(listener):
            raise ClientError("messageListener must be callable")
        self.listener = listener
        self.listener_name = name
        return listener

    def register_consume_message_hook(self, hook: Any) -> Any:
        """Add a consume hook of this consumer only (Java's registerConsumeMessageHook).

        ``hook`` has ``consume_message_before(context)`` and/or
        ``consume_message_after(context)`` (plain or ``async def``), called around
        each of this consumer's listener calls with the
        :class:`~rmqk.spi.contexts.ConsumeMessageContext` the process's
        ``rmqk_consume_message_*`` plugin hooks receive, after them. Other clients of
        the process never reach it. One that raises is logged; consuming goes on.
        """
        if not any(
            callable(getattr(hook, m, None))
            for m in ("consume_message_before", "consume_message_after")
        ):
            raise ClientError(
                f"consume hook {hook!r} has neither consume_message_before(context) nor "
                "consume_message_after(context)"
            )
        self._consume_hooks.append(hook)
        return hook

    def register_rebalance_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        """``listener(topic, all_queues, assigned)`` after each rebalance change (may be async).

        The topic and queues are named as the user names them, without the namespace.
        """
        self.rebalance_listener = unwrapping_rebalance_listener(self.namespace, listener)
        return listener

    @property
    def retry_topic(self) -> str:
        return RETRY_GROUP_TOPIC_PREFIX + self.group

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        await start_once(self, "PushConsumer", self._start, self._cleanup_failed_start)

    async def _start(self) -> None:
        opts = self.options
        if self.listener is None:
            raise ClientError("messageListener is null")
        self._join_client()
        # copySubscription
        for topic, (expr, etype) in self._subscriptions.items():
            self.rebalance.subscription_inner[topic] = build_subscription(
                topic, expr, etype, int(time.time() * 1000)
            )
        if self.message_model is MessageModel.CLUSTERING:
            self.rebalance.subscription_inner[self.retry_topic] = build_subscription(
                self.retry_topic, "*", ExpressionType.TAG, int(time.time() * 1000)
            )
        self.offset_store = await load_offset_store(
            opts, self.group, self.message_model, self.client
        )
        # Starts at the core size; the concurrent service resizes it with the backlog.
        self.invoker = ListenerInvoker(
            self.listener,
            self.group,
            opts.consume_thread_min,
            name=self.listener_name,
            interceptors=self._consume_hooks,
            hook_plugins=self.hook_plugins,
            consume_timeout_ms=opts.consume_timeout * 60_000,
        )
        self.consume_service = create_consume_service(self, opts.consume_service or "concurrent")
        self.consume_orderly = bool(self.consume_service.orderly)
        if self.consume_orderly:
            # Orderly consumption holds one queue's messages in order: no span limit.
            self.flow.span = None
        self.pull_api = PullAPI(
            self.client,
            self.group,
            log,
            batch_size=opts.pull_batch_size,
            suspend_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
            timeout_ms=CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
            exception_delay_ms=opts.pull_time_delay_mills_when_exception,
            unit_mode=opts.unit_mode,
            lite=False,
            on_subscription_missing=self.heartbeat_now,
            max_body_size=opts.max_decompressed_body_size,
            filter_hooks=self._filter_hooks,
            stats=self.stats,
            hook_plugins=self.hook_plugins,
        )
        await self.consume_service.start()
        if not self.client.register_consumer(self.group, self):
            taken = self._group_taken()
            await self.consume_service.shutdown(0)
            raise taken
        await self.client.start()
        await self._lifecycle_hook("rmqk_client_started")
        await self._announce()

    async def _cleanup_failed_start(self) -> None:
        with contextlib.suppress(Exception):
            if hasattr(self, "consume_service"):
                await self.consume_service.shutdown(0)
        await self._leave_client_quietly()

    async def shutdown(self) -> None:
        """Stop pulling, persist offsets, unregister from brokers (Java's shutdown order)."""
        if self.state is not ServiceState.RUNNING:
            return
        await self.consume_service.shutdown(self.options.await_termination_millis_when_shutdown)
        for pq in self.rebalance.process_queue_table.values():
            pq.dropped = True
        tasks = list(self._pull_tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.persist_consumer_offset()
        await self.client.unregister_consumer(self.group)
        await self.client.shutdown_if_unused()
        self.rebalance.destroy()
        for fut in list(self._background):
            fut.cancel()
        self.invoker.shutdown()
        self.state = ServiceState.SHUTDOWN_ALREADY
        await self._lifecycle_hook("rmqk_client_shutdown")

    # -- pause / resume ----------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def suspend(self) -> None:
        """Java's DefaultMQPushConsumer.suspend(): the same as :meth:`pause`."""
        self.pause()

    def resume(self) -> None:
        if self.failure is not None:
            raise ClientError(f"this consumer stopped on an error: {self.failure}")
        self.paused = False
        if self.state is ServiceState.RUNNING:
            self.client.rebalance_immediately()

    # -- MemberInner (what the client instance calls) ------------------------------------------

    async def do_rebalance(self) -> None:
        # A consumer stopped on an error takes no queue again (an admin offset reset
        # un-pauses it, and must not bring it back).
        if not self.paused and self.failure is None and self.state is ServiceState.RUNNING:
            await self.rebalance.do_rebalance(self.consume_orderly)

    def _queues_to_persist(self) -> set[MessageQueue] | None:
        if not hasattr(self, "offset_store"):
            return None
        return set(self.rebalance.process_queue_table)

    async def reset_offset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop, wait, set, persist, remove, rebalance."""
        self.paused = True
        try:
            for mq, pq in list(self.rebalance.process_queue_table.items()):
                if mq.topic == topic:
                    pq.dropped = True
                    pq.clear()
            # Let in-flight pulls and consumes of the dropped queues finish first.
            await asyncio.sleep(self.reset_offset_pause_ms / 1000)
            for mq, offset in offsets.items():
                self.offset_store.update_offset(mq, offset, False)
            await self.offset_store.persist_all(set(offsets))
            for mq in offsets:
                self.offset_store.remove_offset(mq)
                self.rebalance.process_queue_table.pop(mq, None)
                task = self._pull_tasks.pop(mq, None)
                if task is not None:
                    task.cancel()
        finally:
            self.paused = self.failure is not None
            if not self.paused:
                await self.rebalance.do_rebalance(self.consume_orderly)

    reset_offset_pause_ms = RESET_OFFSET_PAUSE_MS

    def _running_properties(self) -> dict[str, str]:
        return {
            "PROP_CONSUMEORDERLY": str(self.consume_orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(self.options.consume_thread_min),
            **super()._running_properties(),
        }

    def _held_queues(self) -> Iterable[tuple[MessageQueue, ProcessQueue]]:
        return self.rebalance.process_queue_table.items()

    def _status_table(self) -> dict[str, ConsumeStatus]:
        # Java's push consumer reports every subscribed topic, zeros where nothing ran yet.
        return {s.topic: self.stats.consume_status(s.topic) for s in self.subscriptions()}

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        return await self.consume_service.consume_message_directly(msg, broker_name)

    # -- helpers for consume services -----------------------------------------------------------

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Show messages under their original topic, without namespace (resetRetryAndNamespace)."""
        retry = self.retry_topic
        for msg in msgs:
            if msg.topic == retry:
                original = msg.properties.get(MessageProperty.RETRY_TOPIC)
                if original:
                    msg.topic = original
        self.unwrap_messages(msgs)

    def max_reconsume_times(self) -> int:
        value = self.options.max_reconsume_times
        if value == -1:
            return 2**31 - 1 if self.consume_orderly else 16
        return value

    async def send_message_back(
        self, msg: MessageExt, delay_level: int, broker_name: str | None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the source broker, else re-publish to %RETRY%group.

        The broker is told the message's wire topic; the listener's message keeps the
        user's name afterwards, as Java's sendMessageBack restores it.
        """
        user_topic = msg.topic
        msg.topic = self.wire_topic(user_topic)
        try:
            await self._send_message_back(msg, delay_level, broker_name)
        finally:
            msg.topic = user_topic

    async def _send_message_back(
        self, msg: MessageExt, delay_level: int, broker_name: str | None
    ) -> None:
        addr = (
            self.client.find_broker_address_in_publish(broker_name)
            if broker_name
            else msg.store_host
        ) or msg.store_host
        try:
            await self.client.transport.consumer_send_msg_back(
                addr, msg, self.group, delay_level, self.max_reconsume_times(), 5000
            )
            return
        except Exception as exc:
            log.warning(
                "sendMessageBack to %s failed (%s); re-publishing to %s",
                addr,
                exc,
                self.retry_topic,
            )
        props = dict(msg.properties)
        props.setdefault(MessageProperty.ORIGIN_MESSAGE_ID, msg.msg_id)
        props[MessageProperty.RETRY_TOPIC] = msg.topic
        times = msg.reconsume_times + 1
        props[MessageProperty.RECONSUME_TIME] = str(times)
        props[MessageProperty.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times())
        props[MessageProperty.DELAY_TIME_LEVEL] = str(3 + times)
        props.pop(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, None)
        new = Message(self.retry_topic, msg.body, flag=msg.flag, properties=props)
        producer = await self._inner_producer()
        await producer.send(new)

    async def _inner_producer(self) -> Any:
        if self.client.inner_producer is None:
            from rmqk.engine.producer import AsyncProducer

            # Shared by the instance's consumers of every namespace: its group stays bare,
            # as Java's inner producer's, and the retry topics it sends to are wrapped already.
            producer = AsyncProducer(
                "CLIENT_INNER_PRODUCER",
                namesrv_addr=";".join(self._namesrv),
                transport=self.options.transport,
                namespace="",
            )
            await producer.start(client=self.client)
            self.client.inner_producer = producer
        return self.client.inner_producer

    def _admin_timeout_ms(self) -> int:
        return ADMIN_TIMEOUT_MS

    def apply_topic_flow_control(self) -> None:
        """pullThresholdForTopic / SizeForTopic divided across the queues held."""
        n = len(self.rebalance.process_queue_table)
        if n == 0:
            return
        if self.options.pull_threshold_for_topic != -1:
            self.flow.count = max(1, self.options.pull_threshold_for_topic // n)
        if self.options.pull_threshold_size_for_topic != -1:
            self.flow.size_mib = max(1, self.options.pull_threshold_size_for_topic // n)

    def call_later(self, delay_ms: int, fn: Callable[[], Awaitable[Any]]) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            await fn()

        self._spawn(later())

    # -- pulling ---------------------------------------------------------------------------------

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        self.run_start_offsets.setdefault(mq, next_offset)
        old = self._pull_tasks.pop(mq, None)
        if old is not None and not old.done():
            old.cancel()
        task = asyncio.get_running_loop().create_task(
            self._pull_loop(mq, pq, next_offset), name=f"pull {mq}"
        )
        self._pull_tasks[mq] = task
        task.add_done_callback(self._forget_pull_task)

    def _forget_pull_task(self, task: asyncio.Task[None]) -> None:
        for mq, current in list(self._pull_tasks.items()):
            if current is task:
                del self._pull_tasks[mq]

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """The one circulating pull request of a queue; ends when the queue is dropped."""
        request = _PullRequest(mq, pq, next_offset)
        while not pq.is_dropped():
            try:
                delay = await self._pull_once(request)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pull of %s failed unexpectedly", mq)
                delay = self.options.pull_time_delay_mills_when_exception
            if delay is None:
                return
            if delay > 0:
                await asyncio.sleep(delay / 1000)

    async def _pull_once(self, req: _PullRequest) -> int | None:
        """One pass of pullMessage; returns the delay before the next, or None to stop."""
        pq, mq, opts = req.pq, req.mq, self.options
        if pq.is_dropped():
            return None
        pq.last_pull_timestamp = int(time.time() * 1000)
        if self.state is not ServiceState.RUNNING:
            return opts.pull_time_delay_mills_when_exception
        if self.paused:
            return PULL_TIME_DELAY_MILLS_WHEN_SUSPEND
        if self.flow.blocks(pq, mq):
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        if self.consume_orderly:
            if not pq.locked:
                return opts.pull_time_delay_mills_when_exception
            if not req.locked_first:
                offset = await self.rebalance.compute_pull_from_where(mq)
                if offset < 0:
                    return opts.pull_time_delay_mills_when_exception
                if offset < req.next_offset:
                    log.info(
                        "[NOTIFYME]the first time to pull message, but pull request offset larger "
                        "than broker consume offset, %s offset=%d next=%d",
                        mq,
                        offset,
                        req.next_offset,
                    )
                req.locked_first = True
                req.next_offset = offset
        sub = self.rebalance.subscription_inner.get(mq.topic)
        if sub is None:
            return opts.pull_time_delay_mills_when_exception
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        begin = time.perf_counter()
        pull_api = self.pull_api
        post = opts.post_subscription_when_pull and not sub.class_filter_mode
        # The usual case awaits the transport's call directly: one coroutine less a pull.
        call = pull_api.start(
            mq, sub, req.next_offset, commit_offset=commit_offset, post_subscription=post
        )
        result: PullResult | int
        if call is None:
            result = await pull_api.pull(
                mq, sub, req.next_offset, commit_offset=commit_offset, post_subscription=post
            )
        else:
            try:
                result = await call
            except RmqkError as exc:
                result = pull_api.delay_after(mq, exc)
        if isinstance(result, int):
            return result
        if pq.is_dropped():
            return None
        rt_ms = (time.perf_counter() - begin) * 1000
        msgs = pull_api.process_now(mq, sub, result)
        if msgs is None:
            msgs = await pull_api.process_hooked(mq, sub, result)
        return self._on_pull_result(req, result, msgs, rt_ms)

    def _on_pull_result(
        self, req: _PullRequest, result: PullResult, msgs: list[MessageExt], rt_ms: float
    ) -> int | None:
        mq, pq = req.mq, req.pq
        status = result.status
        if status is PullStatus.FOUND:
            prev = req.next_offset
            req.next_offset = result.next_begin_offset
            if not msgs:
                self.stats.pull_rt(mq.topic, rt_ms)
                return 0
            if result.next_begin_offset < prev or msgs[0].queue_offset < prev:
                log.warning(
                    "[BUG] pull message result maybe data wrong, nextBeginOffset: %d "
                    "firstMsgOffset: %d prevRequestOffset: %d",
                    result.next_begin_offset,
                    msgs[0].queue_offset,
                    prev,
                )
            self.stats.pulled(mq.topic, rt_ms, len(msgs))
            if mq.topic != self.retry_topic:
                # Retried messages are renamed with their original topic by reset_retry_topic.
                self.unwrap_messages(msgs)
            dispatch = pq.put_messages(msgs)
            pq.set_acc_from_max_offset(result.max_offset, msgs[-1].queue_offset)
            self.consume_service.submit(msgs, pq, mq, dispatch)
            return self.options.pull_interval
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            if pq.msg_count == 0:
                self.offset_store.update_offset(mq, req.next_offset, True)
            return 0
        if status is PullStatus.OFFSET_ILLEGAL:
            reset = offsets_went_backwards(mq, req.next_offset, result)
            if reset is not None and not self.offsets_went_backwards(reset):
                # on_offsets_reset = "fail": the consumer stopped; the offsets stay.
                return None
            log.warning("the pull request offset illegal, %s next=%d", mq, result.next_begin_offset)
            # Java adopts nextBeginOffset: for offsets gone backwards that is the new
            # queue's max offset, past its new messages; they start from its min offset.
            req.next_offset = result.next_begin_offset if reset is None else reset.first
            pq.dropped = True
            fixed = req.next_offset

            async def fix() -> None:
                if reset is not None:
                    # Whatever recorded the old offsets beside the group forgets them
                    # first, or it would skip the queue's new messages as written.
                    try:
                        await self._forget_queue(mq)
                    except Exception as exc:
                        self.fail(
                            ClientError(
                                f"cannot start {mq} afresh after its offsets went backwards: "
                                f"forgetting its recorded offsets failed: {exc}"
                            )
                        )
                        return
                try:
                    self.offset_store.update_offset(mq, fixed, False)
                    await self.offset_store.persist(mq)
                    await self.rebalance.remove_process_queue(mq)
                    log.warning("fix the pull request offset, %s -> %d", mq, fixed)
                except Exception:
                    log.exception("executeTaskLater Exception")

            self.call_later(self.offset_illegal_fix_delay_ms, fix)
        return None

    # Java's delay before an OFFSET_ILLEGAL queue restarts (tests shorten it).
    offset_illegal_fix_delay_ms = OFFSET_ILLEGAL_FIX_DELAY_MS

    def _stop_pulling(self) -> None:
        # Paused: no rebalance re-creates a queue; dropped: every pull loop ends.
        self.paused = True
        for pq in self.rebalance.process_queue_table.values():
            pq.dropped = True


class _PullRequest:
    __slots__ = ("locked_first", "mq", "next_offset", "pq")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        self.mq = mq
        self.pq = pq
        self.next_offset = next_offset
        self.locked_first = False
