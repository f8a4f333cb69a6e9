"""The asyncio push consumer (Java's DefaultMQPushConsumer and its Impl)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rmqk.consume_host import ConsumeService
from rmqk.contexts import FilterMessageContext
from rmqk.contracts import AllocationStrategy, OffsetStore, ReadOffsetType
from rmqk.engine.client import ClientInstance
from rmqk.engine.consume_host import create_consume_service
from rmqk.engine.listener import ListenerInvoker
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.rebalance import Rebalance
from rmqk.engine.startup import client_for, load_offset_store, resolve_namesrv, start_once
from rmqk.engine.stats import ConsumerStats
from rmqk.errors import BrokerError, ClientError, ConfigError, RmqkError
from rmqk.message import Message, MessageExt, MessageProperty
from rmqk.model import (
    MASTER_ID,
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
from rmqk.options import ConsumerOptions, Where, check_group, validate_options
from rmqk.pluginmanager import call_event_hook, get_plugin_manager, registries
from rmqk.protocol import PullSysFlag
from rmqk.transport import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    PullMessageRequest,
)

__all__ = ["TAGS_ONLY_FILTER", "AsyncPushConsumer", "filter_pulled", "stamp_queue_offsets"]

log = logging.getLogger("rmqk.engine.consumer")

# DefaultMQPushConsumerImpl's fixed delays.
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000
BROKER_SUSPEND_MAX_TIME_MILLIS = 15_000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30_000
OFFSET_ILLEGAL_FIX_DELAY_MS = 10_000
RESET_OFFSET_PAUSE_MS = 10_000


class AsyncPushConsumer:
    """A push consumer running in the caller's event loop.

    ``AsyncPushConsumer(group, namesrv_addr=..., **options)`` takes every option of
    :class:`rmqk.options.ConsumerOptions` by its snake_case Java name; bad values
    raise :class:`rmqk.errors.ConfigError` naming the option and what is allowed.
    """

    def __init__(self, group: str, options: ConsumerOptions | None = None, **kwargs: Any) -> None:
        problem = check_group(group)
        where = Where("<consumer options>", f"consumer {group!r}")
        if problem:
            raise ConfigError([where.problem("group", problem)])
        if options is not None and kwargs:
            raise ClientError("pass either a ConsumerOptions or keyword options, not both")
        if options is None:
            options, problems = validate_options(kwargs, where)
            if problems:
                raise ConfigError(problems)
        resolved = options
        self.options: ConsumerOptions = resolved
        self.group = group
        self.message_model: MessageModel = resolved.message_model
        self.state = ServiceState.CREATE_JUST
        self.rebalance = Rebalance(self)
        self._subscriptions: dict[str, tuple[str, ExpressionType]] = {}
        self.listener: Callable[..., Any] | None = None
        self.rebalance_listener: Callable[..., Any] | None = None
        self.paused = False
        self.client: ClientInstance
        self.client_id = ""
        self.offset_store: OffsetStore
        self.consume_service: ConsumeService
        self.allocation_strategy: AllocationStrategy
        self.invoker: ListenerInvoker
        self.consume_orderly = False
        self.pull_threshold_for_queue = resolved.pull_threshold_for_queue
        self.pull_threshold_size_for_queue = resolved.pull_threshold_size_for_queue
        self.stats = ConsumerStats()
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._pull_from_which_node: dict[MessageQueue, int] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._heartbeat_requested_at = 0.0
        self.start_timestamp = 0

    # -- configuration ------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> None:
        """Subscribe to ``topic`` with a tag expression (``"TagA || TagB"``) or SQL92."""
        etype = ExpressionType(expression_type)
        sub = build_subscription(topic, expression, etype, int(time.time() * 1000))
        self._subscriptions[topic] = (sub.sub_string, etype)
        if self.state is ServiceState.RUNNING:
            self.rebalance.subscription_inner[topic] = sub
            self._spawn(self.client.send_heartbeat_to_all_brokers())

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self.rebalance.subscription_inner.pop(topic, None)

    def register_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        """Set the listener; usable as a decorator. May be a function or a coroutine function."""
        if not callable(listener):
            raise ClientError("messageListener must be callable")
        self.listener = listener
        return listener

    def register_rebalance_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        """``listener(topic, all_queues, assigned)`` after each rebalance change (may be async)."""
        self.rebalance_listener = listener
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
        self._namesrv = resolve_namesrv(opts)
        regs = registries()
        self.allocation_strategy = regs.allocation_strategies.create(
            opts.allocate_message_queue_strategy, **dict(opts.allocate_options)
        )
        # copySubscription
        for topic, (expr, etype) in self._subscriptions.items():
            self.rebalance.subscription_inner[topic] = build_subscription(
                topic, expr, etype, int(time.time() * 1000)
            )
        if self.message_model is MessageModel.CLUSTERING:
            self.rebalance.subscription_inner[self.retry_topic] = build_subscription(
                self.retry_topic, "*", ExpressionType.TAG, int(time.time() * 1000)
            )
        self.client = client_for(opts, self.message_model, self._namesrv)
        self.client_id = self.client.client_id
        self.offset_store = await load_offset_store(
            opts, self.group, self.message_model, self.client
        )
        threads = max(opts.consume_thread_min, opts.consume_thread_max)
        self.invoker = ListenerInvoker(self.listener, self.group, threads)
        self.consume_service = create_consume_service(self, opts.consume_service or "concurrent")
        self.consume_orderly = bool(self.consume_service.orderly)
        await self.consume_service.start()
        if not self.client.register_consumer(self.group, self):
            self.state = ServiceState.CREATE_JUST
            await self.consume_service.shutdown(0)
            raise ClientError(
                f"The consumer group[{self.group}] has been created before, "
                "specify another name please."
            )
        await self.client.start()
        self.state = ServiceState.RUNNING
        self.start_timestamp = int(time.time() * 1000)
        for topic in list(self.rebalance.subscription_inner):
            await self.client.update_topic_route(topic)
        await self.client.send_heartbeat_to_all_brokers()
        self.client.rebalance_immediately()

    async def _cleanup_failed_start(self) -> None:
        with contextlib.suppress(Exception):
            if hasattr(self, "consume_service"):
                await self.consume_service.shutdown(0)
        with contextlib.suppress(Exception):
            if hasattr(self, "client") and self.client.consumers.get(self.group) is self:
                await self.client.unregister_consumer(self.group)
                await self.client.shutdown_if_unused()

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

    async def __aenter__(self) -> AsyncPushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- pause / resume ----------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def suspend(self) -> None:
        """Java's DefaultMQPushConsumer.suspend(): the same as :meth:`pause`."""
        self.pause()

    def resume(self) -> None:
        self.paused = False
        if self.state is ServiceState.RUNNING:
            self.client.rebalance_immediately()

    # -- MemberInner (what the client instance calls) ------------------------------------------

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self.rebalance.subscription_inner.values())

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.options.consume_from_where,
            subscriptions=self.subscriptions(),
            unit_mode=self.options.unit_mode,
        )

    def update_topic_subscribe_info(self, topic: str, mqs: frozenset[MessageQueue]) -> None:
        self.rebalance.update_topic_subscribe_info(topic, mqs)

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        return self.rebalance.is_subscribe_topic_need_update(topic)

    async def do_rebalance(self) -> None:
        if not self.paused and self.state is ServiceState.RUNNING:
            await self.rebalance.do_rebalance(self.consume_orderly)

    async def persist_consumer_offset(self) -> None:
        if not hasattr(self, "offset_store"):
            return
        try:
            await self.offset_store.persist_all(set(self.rebalance.process_queue_table))
        except Exception:
            log.exception("group %s persistConsumerOffset exception", self.group)

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.clone_offset_table(topic)

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
            self.paused = False
            await self.rebalance.do_rebalance(self.consume_orderly)

    reset_offset_pause_ms = RESET_OFFSET_PAUSE_MS

    def running_info(self) -> dict[str, Any]:
        props = {
            name: str(getattr(self.options, name))
            for name in (
                "consume_thread_min",
                "consume_thread_max",
                "pull_batch_size",
                "consume_message_batch_max_size",
                "pull_threshold_for_queue",
                "consume_concurrently_max_span",
                "message_model",
                "consume_from_where",
            )
        }
        props["PROP_CONSUMEORDERLY"] = str(self.consume_orderly).lower()
        props["PROP_THREADPOOL_CORE_SIZE"] = str(self.options.consume_thread_min)
        props["PROP_CONSUMER_START_TIMESTAMP"] = str(self.start_timestamp)
        mq_table = {}
        for mq, pq in self.rebalance.process_queue_table.items():
            info = pq.info()
            info["commitOffset"] = self.offset_store.clone_offset_table(mq.topic).get(mq, -1)
            mq_table[_mq_key(mq)] = info
        return {
            "properties": props,
            "subscriptionSet": [
                {
                    "topic": s.topic,
                    "subString": s.sub_string,
                    "tagsSet": sorted(s.tags_set),
                    "codeSet": sorted(s.code_set),
                    "subVersion": s.sub_version,
                    "expressionType": s.expression_type.value,
                }
                for s in self.subscriptions()
            ],
            "mqTable": mq_table,
            "statusTable": self.stats.status_table(),
        }

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        return await self.consume_service.consume_message_directly(msg, broker_name)

    # -- helpers for consume services -----------------------------------------------------------

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Show retried messages under their original topic (resetRetryTopic)."""
        retry = self.retry_topic
        for msg in msgs:
            if msg.topic == retry:
                original = msg.properties.get(MessageProperty.RETRY_TOPIC)
                if original:
                    msg.topic = original

    def max_reconsume_times(self) -> int:
        value = self.options.max_reconsume_times
        if value == -1:
            return 2**31 - 1 if self.consume_orderly else 16
        return value

    async def send_message_back(
        self, msg: MessageExt, delay_level: int, broker_name: str | None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the source broker, else re-publish to %RETRY%group."""
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

            producer = AsyncProducer(
                "CLIENT_INNER_PRODUCER",
                namesrv_addr=";".join(self._namesrv),
                transport=self.options.transport,
            )
            await producer.start(client=self.client)
            self.client.inner_producer = producer
        return self.client.inner_producer

    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self.client.find_broker_addr_for_admin(mq.broker_name, mq.topic)
        return await self.client.transport.get_max_offset(addr, mq, 3000)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self.client.find_broker_addr_for_admin(mq.broker_name, mq.topic)
        return await self.client.transport.search_offset(addr, mq, timestamp_ms, 3000)

    def apply_topic_flow_control(self) -> None:
        """pullThresholdForTopic / SizeForTopic divided across the queues held."""
        n = len(self.rebalance.process_queue_table)
        if n == 0:
            return
        if self.options.pull_threshold_for_topic != -1:
            self.pull_threshold_for_queue = max(1, self.options.pull_threshold_for_topic // n)
        if self.options.pull_threshold_size_for_topic != -1:
            self.pull_threshold_size_for_queue = max(
                1, self.options.pull_threshold_size_for_topic // n
            )

    def _spawn(self, aw: Awaitable[Any]) -> None:
        fut = asyncio.ensure_future(aw)
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)

    def call_later(self, delay_ms: int, fn: Callable[[], Awaitable[Any]]) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            await fn()

        self._spawn(later())

    # -- pulling ---------------------------------------------------------------------------------

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        old = self._pull_tasks.pop(mq, None)
        if old is not None and not old.done():
            old.cancel()
        task = asyncio.get_running_loop().create_task(
            self._pull_loop(mq, pq, next_offset), name=f"pull {mq}"
        )
        self._pull_tasks[mq] = task
        task.add_done_callback(self._forget_pull_task)

    def _heartbeat_now(self) -> None:
        """Register with the brokers again now, at most once a second.

        A broker forgets a client when its connection closes or the broker restarts,
        and then refuses every pull until the client's next heartbeat, up to
        ``heartbeat_broker_interval`` (30 s) away. Java 4.9.8 waits for it; rmqk
        sends one at once (docs/reliability.md has the measurements).
        """
        now = time.monotonic()
        if now - self._heartbeat_requested_at < 1.0:
            return
        self._heartbeat_requested_at = now
        self._spawn(self.client.send_heartbeat_to_all_brokers())

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
        if pq.msg_count > self.pull_threshold_for_queue:
            pq.flow_control_times += 1
            if pq.flow_control_times % 1000 == 1:
                log.warning(
                    "the cached message count exceeds the threshold %d, so do flow control, "
                    "%s, count=%d",
                    self.pull_threshold_for_queue,
                    mq,
                    pq.msg_count,
                )
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        if pq.msg_size / (1024 * 1024) > self.pull_threshold_size_for_queue:
            pq.flow_control_times += 1
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        if not self.consume_orderly:
            if pq.max_span() > opts.consume_concurrently_max_span:
                pq.span_control_times += 1
                if pq.span_control_times % 1000 == 1:
                    log.warning(
                        "the queue's messages span too long, so do flow control, %s, span=%d",
                        mq,
                        pq.max_span(),
                    )
                return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        elif pq.locked:
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
        else:
            return opts.pull_time_delay_mills_when_exception
        sub = self.rebalance.subscription_inner.get(mq.topic)
        if sub is None:
            return opts.pull_time_delay_mills_when_exception
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        post_sub = opts.post_subscription_when_pull and not sub.class_filter_mode
        sys_flag = PullSysFlag.SUSPEND
        if commit_offset > 0:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        if post_sub:
            sys_flag |= PullSysFlag.SUBSCRIPTION
        found = self.client.find_broker_address_in_subscribe(
            mq.broker_name, self._pull_from_which_node.get(mq, MASTER_ID), False
        )
        if found is None:
            await self.client.update_topic_route(mq.topic)
            found = self.client.find_broker_address_in_subscribe(
                mq.broker_name, self._pull_from_which_node.get(mq, MASTER_ID), False
            )
        if found is None:
            log.warning("The broker[%s] not exist", mq.broker_name)
            return opts.pull_time_delay_mills_when_exception
        if found.slave:
            sys_flag &= ~PullSysFlag.COMMIT_OFFSET  # a slave must never commit offsets
        header = PullMessageRequest(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=req.next_offset,
            max_msg_nums=opts.pull_batch_size,
            sys_flag=int(sys_flag),
            commit_offset=max(commit_offset, 0),
            suspend_timeout_millis=BROKER_SUSPEND_MAX_TIME_MILLIS,
            subscription=sub.sub_string if post_sub else None,
            sub_version=sub.sub_version,
            expression_type=sub.expression_type.value,
            broker_name=mq.broker_name,
        )
        begin = time.perf_counter()
        try:
            result = await self.client.transport.pull_message(
                found.broker_addr, header, CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND
            )
        except RmqkError as exc:
            if not mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("execute the pull request exception for %s: %s", mq, exc)
            if isinstance(exc, BrokerError) and exc.code == 215:  # FLOW_CONTROL
                return 20
            if isinstance(exc, BrokerError) and exc.code == 24:  # SUBSCRIPTION_NOT_EXIST
                self._heartbeat_now()
            return opts.pull_time_delay_mills_when_exception
        if pq.is_dropped():
            return None
        return await self._on_pull_result(req, sub, result, (time.perf_counter() - begin) * 1000)

    async def _on_pull_result(
        self, req: _PullRequest, sub: SubscriptionData, result: PullResult, rt_ms: float
    ) -> int | None:
        mq, pq = req.mq, req.pq
        self._pull_from_which_node[mq] = result.suggest_which_broker_id
        status = result.status
        if status is PullStatus.FOUND:
            prev = req.next_offset
            req.next_offset = result.next_begin_offset
            self.stats.pull_rt(mq.topic, rt_ms)
            msgs = list(result.messages)
            if msgs:
                msgs = await self._filter(mq, sub, msgs)
            if not msgs:
                return 0
            if result.next_begin_offset < prev or msgs[0].queue_offset < prev:
                log.warning(
                    "[BUG] pull message result maybe data wrong, nextBeginOffset: %d "
                    "firstMsgOffset: %d prevRequestOffset: %d",
                    result.next_begin_offset,
                    msgs[0].queue_offset,
                    prev,
                )
            stamp_queue_offsets(msgs, result.min_offset, result.max_offset)
            self.stats.pull_tps(mq.topic, len(msgs))
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
            log.warning("the pull request offset illegal, %s next=%d", mq, result.next_begin_offset)
            req.next_offset = result.next_begin_offset
            pq.dropped = True
            fixed = req.next_offset

            async def fix() -> None:
                try:
                    self.offset_store.update_offset(mq, fixed, False)
                    await self.offset_store.persist(mq)
                    await self.rebalance.remove_process_queue(mq)
                    log.warning("fix the pull request offset, %s -> %d", mq, fixed)
                except Exception:
                    log.exception("executeTaskLater Exception")

            self.call_later(OFFSET_ILLEGAL_FIX_DELAY_MS, fix)
        return None

    async def _filter(
        self, mq: MessageQueue, sub: SubscriptionData, msgs: list[MessageExt]
    ) -> list[MessageExt]:
        return await filter_pulled(self.group, mq, sub, msgs, self.options.unit_mode)


# A filter implementation with this attribute set to True only ever narrows TAG
# subscriptions that name tags; for ``*`` it would do nothing, so it is not called.
TAGS_ONLY_FILTER = "rmqk_filters_named_tags_only"


def _filters_needed(sub: SubscriptionData) -> bool:
    """False when no filter hook would act on this subscription."""
    impls = get_plugin_manager().hook.rmqk_filter_message.get_hookimpls()
    if not impls:
        return False
    if sub.expression_type is not ExpressionType.TAG or sub.tags_set or sub.class_filter_mode:
        return True
    return any(not getattr(impl.function, TAGS_ONLY_FILTER, False) for impl in impls)


async def filter_pulled(
    group: str, mq: MessageQueue, sub: SubscriptionData, msgs: list[MessageExt], unit_mode: bool
) -> list[MessageExt]:
    """Run the ``rmqk_filter_message`` hooks over one FOUND pull response."""
    if not _filters_needed(sub):
        return msgs
    ctx = FilterMessageContext(group, mq, msgs, sub, unit_mode)
    await call_event_hook("rmqk_filter_message", context=ctx)
    return ctx.messages


def stamp_queue_offsets(msgs: list[MessageExt], min_offset: int, max_offset: int) -> None:
    """Record the queue's min and max offset in each message (PullAPIWrapper's MIN/MAX_OFFSET).

    One tuple shared by the pull's messages; the properties get them when parsed.
    """
    bounds = (min_offset, max_offset)
    for m in msgs:
        if m._props is None:
            m._queue_bounds = bounds
        else:
            m.set_queue_bounds(bounds)


class _PullRequest:
    __slots__ = ("locked_first", "mq", "next_offset", "pq")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        self.mq = mq
        self.pq = pq
        self.next_offset = next_offset
        self.locked_first = False


def _mq_key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"
