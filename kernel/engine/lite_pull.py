"""The asyncio lite pull consumer (Java's DefaultLitePullConsumer and its Impl).

The Kafka-like consumer: the application asks for messages with :meth:`poll`
and owns its offsets (``seek``, ``commit``), instead of registering a listener.
Queues come either from ``subscribe`` (group membership and rebalance, as a
``CONSUME_ACTIVELY`` member) or from ``assign`` (a fixed set, no group
coordination); a consumer uses one or the other, never both.

Each held queue has one background fetcher that long-polls the broker and puts
every non-empty pull response, one batch, into a buffer shared by all queues.
``poll`` hands out one batch at a time, from one queue, in the order they were
fetched, and moves that queue's consumed offset to the first offset not yet
handed out. ``commit`` writes consumed offsets to the offset store; with
``auto_commit`` (the default) every ``auto_commit_interval_ms`` a poll commits
what earlier polls returned, and ``close`` commits everything returned.

Behaviour and numbers follow Apache RocketMQ 4.9.8's ``DefaultLitePullConsumerImpl``
where it has them. Where rmqk differs it says so: ``pause`` also holds back the
batches already fetched for a queue (Java still returns them; Kafka does not),
``close`` with auto commit commits everything handed out (Java persists only the
last poll-time commit), ``commit`` waits for the brokers to confirm, and a queue
taken away by a rebalance first gets the offset of what earlier polls returned
committed when auto commit is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any

import attrs

from rmqk.aioutil import wait_event
from rmqk.contracts import AllocationStrategy, BrokerOffsetStore, OffsetStore, ReadOffsetType
from rmqk.engine.client import ClientInstance
from rmqk.engine.consumer import filter_pulled, stamp_queue_offsets
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.rebalance import Rebalance
from rmqk.engine.startup import client_for, load_offset_store, resolve_namesrv, start_once
from rmqk.errors import BrokerError, ClientError, ConfigError, ConfigProblem, RmqkError
from rmqk.message import MessageExt
from rmqk.model import (
    MASTER_ID,
    ConsumeFromWhere,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    PullStatus,
    ServiceState,
    SubscriptionData,
    build_subscription,
)
from rmqk.options import (
    ConsumerOptions,
    Where,
    check_group,
    check_topic,
    describe_value,
    validate_options,
)
from rmqk.pluginmanager import registries
from rmqk.protocol import PullSysFlag, ResponseCode
from rmqk.transport import ConsumeMessageDirectlyResult, ConsumerData, PullMessageRequest

__all__ = [
    "LITE_PULL_OPTION_NAMES",
    "AsyncLitePullConsumer",
    "LitePullOptions",
    "RebalanceListener",
    "resolve_lite_pull_options",
]

log = logging.getLogger("rmqk.engine.lite_pull")

# DefaultLitePullConsumerImpl's fixed delays (4.9.8).
PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL = 20
PULL_TIME_DELAY_MILLS_WHEN_PAUSE = 1000
PULL_TIME_DELAY_MILLS_ON_EXCEPTION = 3000
# DefaultLitePullConsumer.MIN_AUTOCOMMIT_INTERVAL_MILLIS (Java ignores smaller values).
MIN_AUTO_COMMIT_INTERVAL_MS = 1000
# How long close waits for commits already sent.
CLOSE_WAIT_S = 5.0
# DefaultLitePullConsumer.pullBatchSize: smaller than the push consumer's 32.
DEFAULT_PULL_BATCH_SIZE = 10

NOT_RUNNING_MESSAGE = "The consumer not running, please start it first."
SUBSCRIPTION_CONFLICT_MESSAGE = "Subscribe and assign are mutually exclusive."

# ``listener(topic, all_queues, assigned)``; may be a coroutine function.
RebalanceListener = Callable[[str, frozenset[MessageQueue], list[MessageQueue]], Any]

# Push consumer options that mean nothing to a lite pull consumer: rejected by
# name rather than silently ignored.
PUSH_ONLY_OPTIONS = frozenset(
    {
        "adjust_thread_pool_nums_threshold",
        "await_termination_millis_when_shutdown",
        "consume_concurrently_max_span",
        "consume_message_batch_max_size",
        "consume_service",
        "consume_service_options",
        "consume_thread_max",
        "consume_thread_min",
        "consume_timeout",
        "max_reconsume_times",
        "post_subscription_when_pull",
        "pull_interval",
        "pull_threshold_for_topic",
        "pull_threshold_size_for_topic",
        "suspend_current_queue_time_millis",
    }
)


@attrs.frozen
class LitePullOptions:
    """The settings only a lite pull consumer has (DefaultLitePullConsumer 4.9.8 defaults).

    Java's ``consumerPullTimeoutMillis`` is missing on purpose: it applies only
    to pulls that do not long-poll, and the lite pull consumer always long-polls.
    ``pullThreadNums`` is missing too: fetchers are asyncio tasks, not threads.
    """

    auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    poll_timeout_ms: int = 5_000
    # Fetching pauses while buffered batches times pull_batch_size exceed this.
    pull_threshold_for_all: int = 10_000
    # Fetching a queue pauses while its buffered offsets span more than this.
    consume_max_span: int = 2_000
    broker_suspend_max_time_millis: int = 20_000
    consumer_timeout_millis_when_suspend: int = 30_000


# Each lite pull option: its type (bool or int) and smallest allowed value.
_LITE_SPECS: dict[str, tuple[type, int]] = {
    "auto_commit": (bool, 0),
    "auto_commit_interval_ms": (int, MIN_AUTO_COMMIT_INTERVAL_MS),
    "poll_timeout_ms": (int, 0),
    "pull_threshold_for_all": (int, 1),
    "consume_max_span": (int, 1),
    "broker_suspend_max_time_millis": (int, 1),
    "consumer_timeout_millis_when_suspend": (int, 1),
}
LITE_PULL_OPTION_NAMES = frozenset(_LITE_SPECS)


def resolve_lite_pull_options(
    mapping: Mapping[str, Any], where: Where, options: ConsumerOptions | None = None
) -> tuple[ConsumerOptions, LitePullOptions]:
    """Split ``mapping`` into client/consumer options and lite pull options, checking all.

    Raises :class:`ConfigError` listing every problem. ``pull_batch_size``
    defaults to the lite pull consumer's 10 rather than the push consumer's 32.
    """
    problems: list[ConfigProblem] = []
    lite: dict[str, Any] = {}
    common: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in _LITE_SPECS:
            kind, minimum = _LITE_SPECS[key]
            if kind is bool:
                if not isinstance(value, bool):
                    problems.append(
                        where.problem(key, f"must be true or false, got {describe_value(value)}")
                    )
                    continue
            elif isinstance(value, bool) or not isinstance(value, int):
                problems.append(
                    where.problem(key, f"must be an integer, got {describe_value(value)}")
                )
                continue
            elif value < minimum:
                problems.append(where.problem(key, f"must be at least {minimum}, got {value}"))
                continue
            lite[key] = value
        elif key in PUSH_ONLY_OPTIONS:
            problems.append(
                where.problem(
                    key, "is a push consumer option; the lite pull consumer has no such setting"
                )
            )
        else:
            common[key] = value
    if options is None:
        common.setdefault("pull_batch_size", DEFAULT_PULL_BATCH_SIZE)
        options, more = validate_options(common, where)
        problems.extend(more)
    elif common:
        problems.append(
            where.problem(
                ", ".join(sorted(common)),
                "pass either a ConsumerOptions or these keyword options, not both",
            )
        )
    resolved = LitePullOptions(**lite)
    if resolved.consumer_timeout_millis_when_suspend < resolved.broker_suspend_max_time_millis:
        problems.append(
            where.problem(
                "consumer_timeout_millis_when_suspend",
                "Long polling mode, the consumer consumer_timeout_millis_when_suspend "
                f"({resolved.consumer_timeout_millis_when_suspend}) must be greater than "
                f"broker_suspend_max_time_millis ({resolved.broker_suspend_max_time_millis})",
            )
        )
    if problems:
        raise ConfigError(problems)
    return options, resolved


class _SubscriptionType(enum.Enum):
    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


class _QueueState:
    """One held queue (Java's AssignedMessageQueue.MessageQueueState).

    ``generation`` changes whenever the queue is repositioned (seek, broker
    reset): a fetcher or a buffered batch of an older generation is stale.
    """

    __slots__ = (
        "consume_offset",
        "generation",
        "mq",
        "paused",
        "pq",
        "processed",
        "pull_from_node",
        "pull_offset",
        "task",
        "unpaused",
    )

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, pull_offset: int = -1) -> None:
        self.mq = mq
        self.pq = pq
        self.paused = False
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        # The next offset to pull; -1 until computed from the store.
        self.pull_offset = pull_offset
        # The first offset poll has not handed out yet; -1 until the first poll of it.
        self.consume_offset = -1
        # consume_offset as of the latest poll call: what the application has
        # finished with, since it asks for more only when done.
        self.processed = -1
        self.generation = 0
        self.pull_from_node = MASTER_ID
        self.task: asyncio.Task[None] | None = None


class _Batch:
    """One non-empty pull response waiting for poll (Java's ConsumeRequest)."""

    __slots__ = ("generation", "messages", "state")

    def __init__(self, state: _QueueState, generation: int, messages: list[MessageExt]) -> None:
        self.state = state
        self.generation = generation
        self.messages = messages


class _LitePullRebalance(Rebalance):
    """RebalanceLitePullImpl: no pull-expiry drop, queue changes go to the consumer."""

    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(self, consumer: AsyncLitePullConsumer) -> None:
        super().__init__(consumer)
        self.lite = consumer

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self.lite._release_queue(mq)
        store = self.lite.offset_store
        await store.persist(mq)
        store.remove_offset(mq)
        return True

    async def message_queue_changed(
        self, topic: str, mq_all: Iterable[MessageQueue], assigned: list[MessageQueue]
    ) -> None:
        all_queues = frozenset(mq_all)
        self.lite._keep_only(topic, set(assigned))
        await super().message_queue_changed(topic, all_queues, assigned)


class AsyncLitePullConsumer:
    """A lite pull consumer running in the caller's event loop.

    ``AsyncLitePullConsumer(group, namesrv_addr=..., **options)`` takes the
    client and consumer options of :class:`rmqk.options.ConsumerOptions` that
    apply to pulling (``message_model``, ``consume_from_where``,
    ``allocate_message_queue_strategy``, ``offset_store``, ``pull_batch_size``,
    ``pull_threshold_for_queue``, ...) and those of :class:`LitePullOptions`
    (``auto_commit``, ``auto_commit_interval_ms``, ``poll_timeout_ms``, ...).
    Bad values raise :class:`rmqk.errors.ConfigError` naming each option.

    Network operations are coroutines; the bookkeeping ones (``subscribe``,
    ``assign``, ``pause``, ``resume``, ``assignment``) are plain methods, as in
    aiokafka. Use one consumer from one task at a time, as with Java's and
    Kafka's consumers.
    """

    def __init__(self, group: str, options: ConsumerOptions | None = None, **kwargs: Any) -> None:
        where = Where("<consumer options>", f"lite pull consumer {group!r}")
        problem = check_group(group)
        if problem:
            raise ConfigError([where.problem("group", problem)])
        self.options, self.lite_options = resolve_lite_pull_options(kwargs, where, options)
        self.group = group
        self.message_model: MessageModel = self.options.message_model
        self.state = ServiceState.CREATE_JUST
        self.rebalance = _LitePullRebalance(self)
        self.rebalance_listener: Callable[..., Any] | None = None
        self.consume_orderly = False
        self.client: ClientInstance
        self.client_id = ""
        self.offset_store: OffsetStore
        self.allocation_strategy: AllocationStrategy
        self.start_timestamp = 0
        self._subscription_type = _SubscriptionType.NONE
        self._states: dict[MessageQueue, _QueueState] = {}
        self._assign_subs: dict[str, SubscriptionData] = {}
        self._buffer: deque[_Batch] = deque()
        self._ready = asyncio.Event()
        self._next_auto_commit = 0.0
        self._background: set[asyncio.Future[Any]] = set()
        self._namesrv: tuple[str, ...] = ()

    # -- choosing queues ------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> None:
        """Subscribe to ``topic`` (tags ``"TagA || TagB"`` or SQL92); queues come by rebalance."""
        problem = check_topic(topic) if isinstance(topic, str) else "must be a string"
        if problem:
            raise ClientError(f"subscribe: topic {topic!r}: {problem}")
        try:
            etype = ExpressionType(expression_type)
            sub = build_subscription(topic, expression, etype, int(time.time() * 1000))
        except ValueError as exc:
            raise ClientError(f"subscribe to {topic!r}: {exc}") from None
        self._set_subscription_type(_SubscriptionType.SUBSCRIBE)
        self.rebalance.subscription_inner[topic] = sub
        if self.state is ServiceState.RUNNING:
            self._spawn(self._after_subscribe(topic))

    async def _after_subscribe(self, topic: str) -> None:
        await self.client.send_heartbeat_to_all_brokers()
        await self.client.update_topic_route(topic)
        # Java waits for the next rebalance pass; taking queues at once is what a caller expects.
        self.client.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its buffered messages are discarded."""
        self.rebalance.subscription_inner.pop(topic, None)
        for mq in [mq for mq in self._states if mq.topic == topic]:
            self._drop_state(mq)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues``, with no rebalance and no group coordination.

        Queues no longer listed are dropped with their buffered messages; those
        kept keep their positions.
        """
        wanted = set(queues)
        if not wanted:
            raise ClientError("Message queues can not be null or empty.")
        for mq in wanted:
            if not isinstance(mq, MessageQueue):
                raise ClientError(f"assign: {mq!r} is not a MessageQueue")
        self._set_subscription_type(_SubscriptionType.ASSIGN)
        for mq in [mq for mq in self._states if mq not in wanted]:
            released = self._release_queue(mq)
            if released >= 0 and self.state is ServiceState.RUNNING:
                self._spawn(self._persist_logged({mq: released}, forget=True))
        for mq in sorted(wanted):
            if mq not in self._states:
                state = _QueueState(mq, ProcessQueue())
                self._states[mq] = state
                if self.state is ServiceState.RUNNING:
                    self._start_fetcher(state)

    def _set_subscription_type(self, kind: _SubscriptionType) -> None:
        if self._subscription_type is _SubscriptionType.NONE:
            self._subscription_type = kind
        elif self._subscription_type is not kind:
            raise ClientError(SUBSCRIPTION_CONFLICT_MESSAGE)

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues this consumer holds now (in subscribe mode: its rebalance share)."""
        return frozenset(self._states)

    def register_rebalance_listener(self, listener: RebalanceListener) -> RebalanceListener:
        """``listener(topic, all_queues, assigned)`` after each change of this member's share.

        Usable as a decorator; may be a coroutine function. Called on the event
        loop, after the new queues' fetchers started.
        """
        if not callable(listener):
            raise ClientError("the rebalance listener must be callable")
        self.rebalance_listener = listener
        return listener

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await start_once(self, "PullConsumer", self._start, self._cleanup_failed_start)

    async def _start(self) -> None:
        opts = self.options
        self._namesrv = resolve_namesrv(opts)
        regs = registries()
        self.allocation_strategy = regs.allocation_strategies.create(
            opts.allocate_message_queue_strategy, **dict(opts.allocate_options)
        )
        self.client = client_for(opts, self.message_model, self._namesrv)
        self.client_id = self.client.client_id
        if not self.client.register_consumer(self.group, self):
            self.state = ServiceState.CREATE_JUST
            raise ClientError(
                f"The consumer group[{self.group}] has been created before, "
                "specify another name please."
            )
        self.offset_store = await load_offset_store(
            opts, self.group, self.message_model, self.client
        )
        await self.client.start()
        self.state = ServiceState.RUNNING
        self.start_timestamp = int(time.time() * 1000)
        if self._subscription_type is _SubscriptionType.SUBSCRIBE:
            for topic in list(self.rebalance.subscription_inner):
                await self.client.update_topic_route(topic)
            await self.client.send_heartbeat_to_all_brokers()
            self.client.rebalance_immediately()
        for state in self._states.values():
            self._start_fetcher(state)

    async def _cleanup_failed_start(self) -> None:
        with contextlib.suppress(Exception):
            if hasattr(self, "client") and self.client.consumers.get(self.group) is self:
                await self.client.unregister_consumer(self.group)
                await self.client.shutdown_if_unused()

    async def close(self) -> None:
        """Stop fetching, commit (with auto commit) and persist offsets, leave the group."""
        if self.state is not ServiceState.RUNNING:
            return
        # Polls still waiting return at once and new ones fail from here on.
        self.state = ServiceState.SHUTDOWN_ALREADY
        self._ready.set()
        if self.lite_options.auto_commit:
            self._commit_to_store(None, processed_only=False)
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Commits and heartbeats already under way are short: let them finish.
        pending = [f for f in self._background if f is not asyncio.current_task()]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
            for fut in late:
                fut.cancel()
        owned = set(self._states) | set(self.rebalance.process_queue_table)
        offsets = {
            mq: off for mq, off in self.offset_store.clone_offset_table("").items() if mq in owned
        }
        try:
            await self._persist(offsets)
        except RmqkError as exc:
            log.warning("persisting offsets of group %s at close failed: %s", self.group, exc)
        await self.client.unregister_consumer(self.group)
        await self.client.shutdown_if_unused()
        self.rebalance.destroy()
        self._states.clear()
        self._buffer.clear()

    shutdown = close

    async def __aenter__(self) -> AsyncLitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_running(self) -> None:
        if self.state is not ServiceState.RUNNING:
            raise ClientError(NOT_RUNNING_MESSAGE)

    # -- polling ------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        """The next fetched batch of one queue, or ``[]`` when none came within the timeout.

        ``timeout_ms`` defaults to ``poll_timeout_ms`` (5000). Calling poll also
        means the application is done with what earlier polls returned: with
        auto commit, that is what gets committed.
        """
        self._check_running()
        timeout = self.lite_options.poll_timeout_ms if timeout_ms is None else timeout_ms
        if timeout < 0:
            raise ClientError(f"Timeout must not be negative, got {timeout}")
        for state in self._states.values():
            state.processed = state.consume_offset
        if self.lite_options.auto_commit:
            self._maybe_auto_commit()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000
        while True:
            batch = self._take_batch()
            if batch is not None:
                state = batch.state
                offset = state.pq.remove_messages(batch.messages)
                if offset >= 0:
                    state.consume_offset = offset
                return batch.messages
            remaining = deadline - loop.time()
            if remaining <= 0 or self.state is not ServiceState.RUNNING:
                return []
            self._ready.clear()
            await wait_event(self._ready, remaining)

    def _take_batch(self) -> _Batch | None:
        """Pop the oldest batch of a queue that is held, current and not paused."""
        buffer = self._buffer
        skipped: list[_Batch] = []
        found: _Batch | None = None
        while buffer:
            batch = buffer.popleft()
            if not self._is_current(batch.state, batch.generation):
                continue
            if batch.state.paused:
                skipped.append(batch)
                continue
            found = batch
            break
        buffer.extendleft(reversed(skipped))
        return found

    def _is_current(self, state: _QueueState, generation: int) -> bool:
        return (
            self._states.get(state.mq) is state
            and state.generation == generation
            and not state.pq.dropped
            and self.state is ServiceState.RUNNING
        )

    # -- pause / resume ------------------------------------------------------------------------

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop fetching ``queues`` and hold back their fetched batches; others go on.

        Queues this consumer does not hold are ignored, as in Java: in subscribe
        mode they may be in the middle of a rebalance.
        """
        for mq in queues:
            state = self._states.get(mq)
            if state is not None:
                state.paused = True
                state.unpaused.clear()

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            state = self._states.get(mq)
            if state is not None and state.paused:
                state.paused = False
                state.unpaused.set()
        self._ready.set()  # batches held back may now be polled

    def paused(self) -> frozenset[MessageQueue]:
        return frozenset(mq for mq, s in self._states.items() if s.paused)

    # -- positions --------------------------------------------------------------------------------

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Make the next polls of ``queue`` start at ``offset``; buffered messages are dropped.

        ``offset`` must lie within the queue's [min offset, max offset] on the broker.
        """
        self._check_running()
        self._held(queue)
        low = await self.min_offset(queue)
        high = await self.max_offset(queue)
        if offset < low or offset > high:
            raise ClientError(
                f"Seek offset illegal, seek offset = {offset}, min offset = {low}, "
                f"max offset = {high} ({queue})"
            )
        # Looked up again: a rebalance may have replaced or taken the queue meanwhile.
        self._reposition(self._held(queue), offset)

    async def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Seek to the min offset of each of ``queues`` (all held queues when none given)."""
        self._check_running()
        for mq in queues or tuple(sorted(self._states)):
            await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, *queues: MessageQueue) -> None:
        """Seek to the max offset of each of ``queues``: only new messages will be polled."""
        self._check_running()
        for mq in queues or tuple(sorted(self._states)):
            await self.seek(mq, await self.max_offset(mq))

    async def position(self, queue: MessageQueue) -> int:
        """The offset of the next message poll would hand out for ``queue``."""
        self._check_running()
        state = self._held(queue)
        if state.consume_offset >= 0:
            return state.consume_offset
        first = state.pq.first_offset()
        if first is not None:
            return first
        if state.pull_offset >= 0:
            return state.pull_offset
        offset = await self.rebalance.compute_pull_from_where(queue)
        if offset < 0:
            raise ClientError(f"the position of {queue} cannot be read from the offset store")
        return offset

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue`` (memory first, then the store); -1 if none."""
        self._check_running()
        offset = await self.offset_store.read_offset(queue, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if offset == -2:
            raise ClientError(f"Fetch consume offset from broker exception ({queue})")
        return offset

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the offset the broker finds for a store time in epoch ms.

        The broker's search (Java's offsetForTimestamp): the message stored at
        that time or, failing one, the one stored nearest to it; past the newest
        message, that message's offset.
        """
        self._check_running()
        return {mq: await self.search_offset(mq, ts) for mq, ts in timestamps.items()}

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic``, from the name server, sorted."""
        self._check_running()
        route = await self.client.transport.get_route(topic, self.options.mq_client_api_timeout)
        queues = route.subscribe_queues(topic) if route is not None else frozenset()
        if not queues:
            raise ClientError(f"Can not find Message Queue for this topic, {topic}")
        return sorted(queues)

    async def min_offset(self, queue: MessageQueue) -> int:
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.get_min_offset(
            addr, queue, self.options.mq_client_api_timeout
        )

    async def max_offset(self, queue: MessageQueue) -> int:
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.get_max_offset(
            addr, queue, self.options.mq_client_api_timeout
        )

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.search_offset(
            addr, queue, timestamp_ms, self.options.mq_client_api_timeout
        )

    def _held(self, queue: MessageQueue) -> _QueueState:
        state = self._states.get(queue)
        if state is None:
            if self._subscription_type is _SubscriptionType.SUBSCRIBE:
                raise ClientError(
                    "The message queue is not in assigned list, may be rebalancing, "
                    f"message queue: {queue}"
                )
            raise ClientError(f"The message queue is not in assigned list, message queue: {queue}")
        return state

    def _reposition(self, state: _QueueState, offset: int) -> None:
        """Restart ``state``'s queue at ``offset``: drop what was fetched, refetch from there."""
        state.generation += 1
        if state.task is not None:
            state.task.cancel()
            state.task = None
        state.pq.clear()
        self._buffer = deque(b for b in self._buffer if b.state is not state)
        state.pull_offset = offset
        state.consume_offset = offset
        if self.state is ServiceState.RUNNING:
            self._start_fetcher(state)

    # -- committing ------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit and persist, waiting for the brokers (or the local file) to take it.

        Without ``offsets``: the consumed offset of every held queue, i.e. past
        everything poll has returned. With ``offsets``: exactly those, each the
        next offset to consume (Java's ``commitSync(map, true)``).
        """
        self._check_running()
        await self._persist(self._commit_to_store(offsets, processed_only=False))

    def commit_async(self, offsets: Mapping[MessageQueue, int] | None = None) -> asyncio.Task[None]:
        """Like :meth:`commit`, without waiting: the offsets are taken now, sent in a task.

        Await the returned task to learn the outcome; an unawaited failure is logged.
        """
        self._check_running()
        chosen = self._commit_to_store(offsets, processed_only=False)
        task = asyncio.get_running_loop().create_task(self._persist(chosen), name="rmqk commit")
        self._track(task)
        task.add_done_callback(_log_commit_failure)
        return task

    def _commit_to_store(
        self, offsets: Mapping[MessageQueue, int] | None, *, processed_only: bool
    ) -> dict[MessageQueue, int]:
        if offsets is None:
            chosen = {
                mq: (s.processed if processed_only else s.consume_offset)
                for mq, s in self._states.items()
                if not s.pq.dropped
            }
            chosen = {mq: off for mq, off in chosen.items() if off >= 0}
        else:
            chosen = dict(offsets)
            for mq, off in chosen.items():
                if mq not in self._states:
                    raise ClientError(f"cannot commit {mq}: this consumer does not hold it")
                if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                    raise ClientError(
                        f"cannot commit {mq}: offset must be an int >= 0, got {off!r}"
                    )
        for mq, off in chosen.items():
            self.offset_store.update_offset(mq, off, False)
        return chosen

    async def _persist(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Write ``offsets`` through: confirmed broker updates in CLUSTERING, else the store."""
        if not offsets:
            return
        store = self.offset_store
        if self.message_model is MessageModel.BROADCASTING or not isinstance(
            store, BrokerOffsetStore
        ):
            owned = set(self._states) | set(offsets)
            await store.persist_all(owned)
            return
        results = await asyncio.gather(
            *(
                store.update_consume_offset_to_broker(mq, off, False)
                for mq, off in sorted(offsets.items())
            ),
            return_exceptions=True,
        )
        failed = [
            f"{mq}: {res}"
            for mq, res in zip(sorted(offsets), results, strict=True)
            if isinstance(res, BaseException)
        ]
        if failed:
            raise ClientError(
                f"committing offsets of group {self.group} failed for " + "; ".join(failed)
            )

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.lite_options.auto_commit_interval_ms / 1000
        chosen = self._commit_to_store(None, processed_only=True)
        if chosen:
            self._spawn(self._persist_logged(chosen))

    async def _persist_logged(
        self, offsets: Mapping[MessageQueue, int], *, forget: bool = False
    ) -> None:
        try:
            await self._persist(offsets)
        except RmqkError as exc:
            # The next auto commit, the periodic persist and close all send again.
            log.warning("auto commit of group %s failed: %s", self.group, exc)
        if forget:
            for mq in offsets:
                if mq not in self._states:
                    self.offset_store.remove_offset(mq)

    # -- queue bookkeeping ---------------------------------------------------------------------

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """Rebalance took ``mq`` (and computed where to start): begin fetching it."""
        old = self._states.pop(mq, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        state = _QueueState(mq, pq, next_offset)
        self._states[mq] = state
        self._start_fetcher(state)

    def _keep_only(self, topic: str, assigned: Collection[MessageQueue]) -> None:
        for mq in [mq for mq in self._states if mq.topic == topic and mq not in assigned]:
            self._drop_state(mq)

    def _release_queue(self, mq: MessageQueue) -> int:
        """``mq`` is leaving: with auto commit, commit what earlier polls returned, then drop it.

        Returns the offset committed, or -1.
        """
        state = self._states.get(mq)
        if state is None:
            return -1
        committed = -1
        if self.lite_options.auto_commit and state.processed >= 0:
            committed = state.processed
            self.offset_store.update_offset(mq, committed, False)
        self._drop_state(mq)
        return committed

    def _drop_state(self, mq: MessageQueue) -> None:
        state = self._states.pop(mq, None)
        if state is None:
            return
        state.pq.dropped = True
        state.generation += 1
        if state.task is not None:
            state.task.cancel()
            state.task = None
        self._buffer = deque(b for b in self._buffer if b.state is not state)

    def apply_topic_flow_control(self) -> None:
        """The lite pull consumer has no topic-wide thresholds."""

    # -- fetching ------------------------------------------------------------------------------

    def _start_fetcher(self, state: _QueueState) -> None:
        if state.task is not None and not state.task.done():
            return
        state.task = asyncio.get_running_loop().create_task(
            self._fetch_loop(state, state.generation), name=f"rmqk fetch {state.mq}"
        )

    async def _fetch_loop(self, state: _QueueState, generation: int) -> None:
        """The one circulating pull of a queue (Java's PullTaskImpl); ends when it goes stale."""
        while self._is_current(state, generation):
            if state.paused:
                await wait_event(state.unpaused, PULL_TIME_DELAY_MILLS_WHEN_PAUSE / 1000)
                continue
            try:
                delay = await self._fetch_once(state, generation)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetching %s failed unexpectedly", state.mq)
                delay = self.options.pull_time_delay_mills_when_exception
            if delay > 0:
                await asyncio.sleep(delay / 1000)

    def _flow_controlled(self, state: _QueueState) -> bool:
        lite, opts, pq = self.lite_options, self.options, state.pq
        if len(self._buffer) * opts.pull_batch_size > lite.pull_threshold_for_all:
            return True
        if pq.msg_count > opts.pull_threshold_for_queue:
            pq.flow_control_times += 1
            if pq.flow_control_times % 1000 == 1:
                log.warning(
                    "the cached message count exceeds the threshold %d, so do flow control, "
                    "%s, count=%d",
                    opts.pull_threshold_for_queue,
                    state.mq,
                    pq.msg_count,
                )
            return True
        if pq.msg_size // (1024 * 1024) > opts.pull_threshold_size_for_queue:
            pq.flow_control_times += 1
            return True
        if pq.max_span() > lite.consume_max_span:
            pq.span_control_times += 1
            return True
        return False

    async def _fetch_once(self, state: _QueueState, generation: int) -> int:
        """One pull of ``state``'s queue; returns the delay before the next one."""
        mq, opts, lite = state.mq, self.options, self.lite_options
        if self._flow_controlled(state):
            return PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL
        offset = state.pull_offset
        if offset < 0:
            try:
                offset = await self.rebalance.compute_pull_from_where(mq)
            except RmqkError as exc:
                log.warning("computing the pull offset of %s failed: %s", mq, exc)
                return PULL_TIME_DELAY_MILLS_ON_EXCEPTION
            if not self._is_current(state, generation):
                return 0
            if offset < 0:
                log.warning("the pull offset of %s is not known yet; retrying", mq)
                return opts.pull_time_delay_mills_when_exception
            state.pull_offset = offset
        sub = self._subscription_for(mq.topic)
        if sub is None:
            return opts.pull_time_delay_mills_when_exception
        found = self.client.find_broker_address_in_subscribe(
            mq.broker_name, state.pull_from_node, False
        )
        if found is None:
            await self.client.update_topic_route(mq.topic)
            found = self.client.find_broker_address_in_subscribe(
                mq.broker_name, state.pull_from_node, False
            )
        if found is None:
            log.warning("The broker[%s] not exist", mq.broker_name)
            return opts.pull_time_delay_mills_when_exception
        tag_type = sub.expression_type is ExpressionType.TAG
        header = PullMessageRequest(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=opts.pull_batch_size,
            sys_flag=int(
                PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION | PullSysFlag.LITE_PULL_MESSAGE
            ),
            commit_offset=0,
            suspend_timeout_millis=lite.broker_suspend_max_time_millis,
            subscription=sub.sub_string,
            sub_version=0 if tag_type else sub.sub_version,
            expression_type=sub.expression_type.value,
            broker_name=mq.broker_name,
        )
        state.pq.last_pull_timestamp = int(time.time() * 1000)
        try:
            result = await self.client.transport.pull_message(
                found.broker_addr, header, lite.consumer_timeout_millis_when_suspend
            )
        except BrokerError as exc:
            log.warning("pulling %s failed: %s", mq, exc)
            if exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL
            return opts.pull_time_delay_mills_when_exception
        except RmqkError as exc:
            log.warning("pulling %s failed: %s", mq, exc)
            return opts.pull_time_delay_mills_when_exception
        if not self._is_current(state, generation):
            return 0
        state.pull_from_node = result.suggest_which_broker_id
        if result.status is PullStatus.FOUND and result.messages:
            msgs = await filter_pulled(self.group, mq, sub, list(result.messages), opts.unit_mode)
            if not self._is_current(state, generation):
                return 0
            if msgs:
                stamp_queue_offsets(msgs, result.min_offset, result.max_offset)
                state.pq.put_messages(msgs)
                self._buffer.append(_Batch(state, generation, msgs))
                self._ready.set()
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "the pull request offset illegal, %s offset=%d next=%d",
                mq,
                offset,
                result.next_begin_offset,
            )
            if result.next_begin_offset == offset:
                # Java re-pulls at once; a broker that keeps refusing must not make that a spin.
                return opts.pull_time_delay_mills_when_exception
        state.pull_offset = result.next_begin_offset
        return 0

    def _subscription_for(self, topic: str) -> SubscriptionData | None:
        if self._subscription_type is _SubscriptionType.SUBSCRIBE:
            return self.rebalance.subscription_inner.get(topic)
        sub = self._assign_subs.get(topic)
        if sub is None:
            sub = build_subscription(topic, "*")
            self._assign_subs[topic] = sub
        return sub

    # -- MemberInner (what the client instance calls) ------------------------------------------

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self.rebalance.subscription_inner.values())

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=self.message_model,
            # Java's lite pull consumer always reports CONSUME_FROM_LAST_OFFSET here.
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscriptions=self.subscriptions(),
            unit_mode=self.options.unit_mode,
        )

    def update_topic_subscribe_info(self, topic: str, mqs: frozenset[MessageQueue]) -> None:
        self.rebalance.update_topic_subscribe_info(topic, mqs)

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        return self.rebalance.is_subscribe_topic_need_update(topic)

    async def do_rebalance(self) -> None:
        if (
            self.state is ServiceState.RUNNING
            and self._subscription_type is _SubscriptionType.SUBSCRIBE
        ):
            await self.rebalance.do_rebalance(False)

    async def persist_consumer_offset(self) -> None:
        if self.state is not ServiceState.RUNNING:
            return
        owned = set(self._states) | set(self.rebalance.process_queue_table)
        try:
            await self.offset_store.persist_all(owned)
        except Exception:
            log.exception("group %s persistConsumerOffset exception", self.group)

    async def reset_offset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from the broker: reposition the queues held, persist."""
        chosen = {mq: off for mq, off in offsets.items() if mq.topic == topic}
        for mq, off in chosen.items():
            self.offset_store.update_offset(mq, off, False)
            state = self._states.get(mq)
            if state is not None:
                self._reposition(state, off)
        await self._persist(chosen)

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.clone_offset_table(topic)

    def running_info(self) -> dict[str, Any]:
        props = {
            name: str(getattr(self.options, name))
            for name in (
                "pull_batch_size",
                "pull_threshold_for_queue",
                "pull_threshold_size_for_queue",
                "message_model",
                "consume_from_where",
            )
        }
        for field in attrs.fields(LitePullOptions):
            props[field.name] = str(getattr(self.lite_options, field.name))
        props["PROP_CONSUMER_START_TIMESTAMP"] = str(self.start_timestamp)
        mq_table = {}
        for mq, state in self._states.items():
            info = state.pq.info()
            info["commitOffset"] = self.offset_store.clone_offset_table(mq.topic).get(mq, -1)
            mq_table[f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"] = info
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
        }

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        # No listener to hand the message to; the transport answers "not supported".
        raise NotImplementedError("a lite pull consumer cannot consume a message directly")

    # -- background work ----------------------------------------------------------------------

    def _spawn(self, aw: Awaitable[Any]) -> None:
        self._track(asyncio.ensure_future(aw))

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)


def _log_commit_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("asynchronous commit failed: %s", exc)
