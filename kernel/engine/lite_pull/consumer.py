"""The asyncio lite pull consumer (Java's DefaultLitePullConsumer and its Impl).

This module holds the public API, the lifecycle and ``poll``; the queue table,
poll buffer, fetchers, commits and seeks each have their own module beside it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs

from rmqk.engine.client_check import check_client_in_broker
from rmqk.engine.lite_pull import seek as seeking
from rmqk.engine.lite_pull.buffer import PollBuffer
from rmqk.engine.lite_pull.commit import Committer
from rmqk.engine.lite_pull.fetch import Fetcher
from rmqk.engine.lite_pull.queues import QueueState, QueueTable, SubscriptionType
from rmqk.engine.lite_pull.rebalance import LitePullRebalance
from rmqk.engine.member import ConsumerMember, options_where
from rmqk.engine.namespace_boundary import unwrapping_rebalance_listener
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.pull import FlowControl, PullAPI
from rmqk.engine.reader import RangeReader
from rmqk.engine.startup import load_offset_store, start_once
from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    ExpressionType,
    MessageQueue,
    PullResult,
    ServiceState,
    SubscriptionData,
    build_subscription,
)
from rmqk.model.errors import ClientError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions, check_topic
from rmqk.options.lite_pull import LitePullOptions, resolve_lite_pull_options
from rmqk.spi.contexts import ClientRole
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = ["AsyncLitePullConsumer", "RebalanceListener"]

log = logging.getLogger("rmqk.engine.lite_pull")

# How long close waits for commits already sent.
CLOSE_WAIT_S = 5.0

NOT_RUNNING_MESSAGE = "The consumer not running, please start it first."

# ``listener(topic, all_queues, assigned)``; may be a coroutine function.
RebalanceListener = Callable[[str, frozenset[MessageQueue], list[MessageQueue]], Any]


class AsyncLitePullConsumer(ConsumerMember):
    """A lite pull consumer running in the caller's event loop.

    ``AsyncLitePullConsumer(group, namesrv_addr=..., **options)`` takes the
    client and consumer options of :class:`rmqk.options.ConsumerOptions` that
    apply to pulling (``message_model``, ``consume_from_where``,
    ``allocate_message_queue_strategy``, ``offset_store``, ``pull_batch_size``,
    ``pull_threshold_for_queue``, ...) and those of :class:`LitePullOptions`
    (``auto_commit``, ``auto_commit_interval_ms``, ``poll_timeout_ms``, ...).
    Bad values raise :class:`rmqk.model.errors.ConfigError` naming each option.

    Network operations are coroutines; the bookkeeping ones (``subscribe``,
    ``assign``, ``pause``, ``resume``, ``assignment``) are plain methods, as in
    aiokafka. Use one consumer from one task at a time, as with Java's and
    Kafka's consumers.
    """

    consume_type = ConsumeType.CONSUME_ACTIVELY
    client_role = ClientRole.LITE_PULL_CONSUMER
    reported_options = (*ConsumerMember.reported_options, "pull_threshold_size_for_queue")
    log = log

    def __init__(self, group: str, options: ConsumerOptions | None = None, **kwargs: Any) -> None:
        where = options_where(group, "lite pull consumer")
        resolved, self.lite_options = resolve_lite_pull_options(kwargs, where, options)
        super().__init__(group, resolved)
        self.rebalance = LitePullRebalance(self)
        self.rebalance_listener: Callable[..., Any] | None = None
        self.consume_orderly = False
        self.queues = QueueTable()
        self.buffer = PollBuffer()
        self.committer = Committer(self)
        self.fetcher: Fetcher
        # What pull() sends with, made on its first call.
        self._reader: RangeReader | None = None
        # The non-TAG expressions a broker accepted for pull().
        self._checked_expressions: set[tuple[str, str, ExpressionType]] = set()

    # -- choosing queues ------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> asyncio.Future[None] | None:
        """Subscribe to ``topic`` (tags ``"TagA || TagB"`` or SQL92); queues come by rebalance.

        On a running consumer the returned future ends once the brokers know the
        subscription; for SQL92 it raises SubscriptionRefusedError, with the
        broker's reason, when a broker of the topic cannot filter by it.
        """
        problem = check_topic(topic) if isinstance(topic, str) else "must be a string"
        if problem:
            raise ClientError(f"subscribe: topic {topic!r}: {problem}")
        topic = self.wire_topic(topic)
        try:
            sub = build_subscription(topic, expression, expression_type, int(time.time() * 1000))
        except ValueError as exc:
            raise ClientError(f"subscribe to {topic!r}: {exc}") from None
        etype = sub.expression_type
        self.queues.set_kind(SubscriptionType.SUBSCRIBE)
        if self.state is not ServiceState.RUNNING:
            self.rebalance.subscription_inner[topic] = sub
            return None
        if etype is ExpressionType.TAG:
            self.rebalance.subscription_inner[topic] = sub
            return self._spawn(self._after_subscribe(topic))
        return self._spawn(self._subscribe_checked(sub))

    async def _subscribe_checked(self, sub: SubscriptionData) -> None:
        # SQL92 on a running consumer: taken only once a broker of the topic accepts it.
        await self.client.update_topic_route(sub.topic)
        await check_client_in_broker(self.client, self.group, [sub])
        self.rebalance.subscription_inner[sub.topic] = sub
        await self._after_subscribe(sub.topic)

    async def _after_subscribe(self, topic: str) -> None:
        await self.client.send_heartbeat_to_all_brokers()
        await self.client.update_topic_route(topic)
        # Java waits for the next rebalance pass; taking queues at once is what a caller expects.
        self.client.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its buffered messages are discarded."""
        topic = self.wire_topic(topic)
        self.rebalance.subscription_inner.pop(topic, None)
        for mq in [mq for mq in self.queues.states if mq.topic == topic]:
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
        wanted = {self.wire_queue(mq) for mq in wanted}
        self.queues.set_kind(SubscriptionType.ASSIGN)
        states = self.queues.states
        for mq in [mq for mq in states if mq not in wanted]:
            released = self.release_queue(mq)
            if released >= 0 and self.state is ServiceState.RUNNING:
                self._spawn(self.committer.persist_logged({mq: released}, forget=True))
        for mq in sorted(wanted):
            if mq not in states:
                state = QueueState(mq, ProcessQueue())
                states[mq] = state
                if self.state is ServiceState.RUNNING:
                    self.fetcher.start(state)

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues this consumer holds now (in subscribe mode: its rebalance share)."""
        return frozenset(self.user_queue(mq) for mq in self.queues.states)

    def register_rebalance_listener(self, listener: RebalanceListener) -> RebalanceListener:
        """``listener(topic, all_queues, assigned)`` after each change of this member's share.

        Usable as a decorator; may be a coroutine function. Called on the event
        loop, after the new queues' fetchers started.
        """
        if not callable(listener):
            raise ClientError("the rebalance listener must be callable")
        self.rebalance_listener = unwrapping_rebalance_listener(self.namespace, listener)
        return listener

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await start_once(self, "PullConsumer", self._start, self._leave_client_quietly)

    async def _start(self) -> None:
        opts, lite = self.options, self.lite_options
        self._join_client()
        if not self.client.register_consumer(self.group, self):
            raise self._group_taken()
        self.offset_store = await load_offset_store(
            opts, self.group, self.message_model, self.client
        )
        pull_api = PullAPI(
            self.client,
            self.group,
            log,
            batch_size=opts.pull_batch_size,
            suspend_ms=lite.broker_suspend_max_time_millis,
            timeout_ms=lite.consumer_timeout_millis_when_suspend,
            exception_delay_ms=opts.pull_time_delay_mills_when_exception,
            unit_mode=opts.unit_mode,
            lite=True,
            on_subscription_missing=self.heartbeat_now,
            max_body_size=opts.max_decompressed_body_size,
            filter_hooks=self._filter_hooks,
            hook_plugins=self.hook_plugins,
        )
        flow = FlowControl(
            log,
            count=opts.pull_threshold_for_queue,
            size_mib=opts.pull_threshold_size_for_queue,
            span=lite.consume_max_span,
            all_messages=lite.pull_threshold_for_all,
            batch_size=opts.pull_batch_size,
        )
        self.fetcher = Fetcher(self, pull_api, flow)
        await self.client.start()
        await self._lifecycle_hook("rmqk_client_started")
        if self.queues.kind is SubscriptionType.SUBSCRIBE:
            await self._announce()
        else:
            self.state = ServiceState.RUNNING
            self.start_timestamp = int(time.time() * 1000)
        for state in self.queues.states.values():
            self.fetcher.start(state)

    async def close(self) -> None:
        """Stop fetching, commit (with auto commit) and persist offsets, leave the group."""
        if self.state is not ServiceState.RUNNING:
            return
        # Polls still waiting return at once and new ones fail from here on.
        self.state = ServiceState.SHUTDOWN_ALREADY
        self.buffer.wake()
        if self.lite_options.auto_commit:
            self.committer.to_store(None, processed_only=False)
        states = self.queues.states
        tasks = [s.task for s in states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Commits and heartbeats already under way are short: let them finish.
        pending = [f for f in self._background if f is not asyncio.current_task()]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
            for fut in late:
                fut.cancel()
        owned = set(states) | set(self.rebalance.process_queue_table)
        offsets = {
            mq: off for mq, off in self.offset_store.clone_offset_table("").items() if mq in owned
        }
        try:
            await self.committer.persist(offsets)
        except RmqkError as exc:
            log.warning("persisting offsets of group %s at close failed: %s", self.group, exc)
        await self.client.unregister_consumer(self.group)
        await self.client.shutdown_if_unused()
        self.rebalance.destroy()
        states.clear()
        self.buffer.clear()
        self._reader = None  # bound to the client just shut down
        self._checked_expressions.clear()
        await self._lifecycle_hook("rmqk_client_shutdown")

    shutdown = close

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
        if self.failure is not None:
            # on_offsets_reset = "fail": every poll says why this consumer stopped.
            raise self.failure
        timeout = self.lite_options.poll_timeout_ms if timeout_ms is None else timeout_ms
        if timeout < 0:
            raise ClientError(f"Timeout must not be negative, got {timeout}")
        for state in self.queues.states.values():
            state.processed = state.consume_offset
        if self.lite_options.auto_commit:
            self.committer.maybe_auto_commit()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000
        while True:
            batch = self.buffer.take(self.is_current)
            if batch is not None:
                state = batch.state
                offset = state.pq.remove_messages(batch.messages)
                if offset >= 0:
                    state.consume_offset = offset
                self.unwrap_messages(batch.messages)
                return batch.messages
            if self.failure is not None:
                raise self.failure
            remaining = deadline - loop.time()
            if remaining <= 0 or self.state is not ServiceState.RUNNING:
                return []
            await self.buffer.wait(remaining)

    def is_current(self, state: QueueState, generation: int) -> bool:
        """``state`` is held, not repositioned since ``generation``, and the consumer runs."""
        return (
            self.queues.states.get(state.mq) is state
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
        self.queues.pause(self.wire_queue(mq) for mq in queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self.queues.resume(self.wire_queue(mq) for mq in queues)
        self.buffer.wake()  # batches held back may now be polled

    def paused(self) -> frozenset[MessageQueue]:
        return frozenset(self.user_queue(mq) for mq in self.queues.paused())

    # -- positions --------------------------------------------------------------------------------

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Make the next polls of ``queue`` start at ``offset``; buffered messages are dropped.

        ``offset`` must lie within the queue's [min offset, max offset] on the broker.
        """
        self._check_running()
        await seeking.seek(self, self.wire_queue(queue), offset)

    async def seek_to_beginning(self, *queues: MessageQueue) -> None:
        """Seek to the min offset of each of ``queues`` (all held queues when none given)."""
        self._check_running()
        for mq in queues or tuple(sorted(self.queues.states)):
            await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, *queues: MessageQueue) -> None:
        """Seek to the max offset of each of ``queues``: only new messages will be polled."""
        self._check_running()
        for mq in queues or tuple(sorted(self.queues.states)):
            await self.seek(mq, await self.max_offset(mq))

    async def position(self, queue: MessageQueue) -> int:
        """The offset of the next message poll would hand out for ``queue``."""
        self._check_running()
        return await seeking.position(self, self.wire_queue(queue))

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue`` (memory first, then the store); -1 if none."""
        self._check_running()
        return await seeking.committed(self, self.wire_queue(queue))

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the offset the broker finds for a store time in epoch ms.

        The broker's search (Java's offsetForTimestamp): the message stored at
        that time or, failing one, the one stored nearest to it; past the newest
        message, that message's offset.
        """
        self._check_running()
        found = await seeking.offsets_for_times(
            self, {self.wire_queue(mq): ts for mq, ts in timestamps.items()}
        )
        return {self.user_queue(mq): offset for mq, offset in found.items()}

    async def pull(
        self,
        queue: MessageQueue,
        expression: str | None,
        offset: int,
        max_nums: int,
        *,
        expression_type: str = "TAG",
        timeout_ms: int | None = None,
    ) -> PullResult:
        """One pull of ``queue`` at ``offset``, as Java's ``DefaultMQPullConsumer.pull``.

        For callers who keep offsets themselves: it does not block on the broker
        (an offset at the queue's end answers NO_NEW_MSG at once), commits
        nothing, and leaves the queues ``poll`` reads alone. FOUND messages pass
        the tag re-filter and the filter hooks, so FOUND may carry none; go on
        from ``next_begin_offset``. OFFSET_ILLEGAL: ``offset`` is outside the
        queue's [``min_offset``, ``max_offset``]. ``expression`` is checked as
        :meth:`subscribe` checks it; an SQL92 one is first put to a broker of the
        topic (once per expression), whose refusal raises SubscriptionRefusedError
        with its reason. ``timeout_ms`` defaults to the ``mq_client_api_timeout``
        option.
        """
        self._check_running()
        if not isinstance(queue, MessageQueue):
            raise ClientError(f"pull: {queue!r} is not a MessageQueue")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ClientError(f"pull: offset must be an integer >= 0, got {offset!r}")
        if isinstance(max_nums, bool) or not isinstance(max_nums, int) or max_nums <= 0:
            raise ClientError(f"pull: max_nums must be an integer > 0, got {max_nums!r}")
        mq = self.wire_queue(queue)
        try:
            sub = build_subscription(mq.topic, expression, expression_type)
        except ValueError as exc:
            raise ClientError(f"pull {queue}: {exc}") from None
        if self._reader is None:
            # The engine's range reader on this consumer's client: the same pull path,
            # transport and filters as its polls, in the non-blocking mode.
            self._reader = RangeReader(
                self.client,
                self.group,
                namespace=self.namespace,
                timeout_ms=self.options.mq_client_api_timeout,
                filter_hooks=self._filter_hooks,
            )
        if sub.expression_type is not ExpressionType.TAG:
            checked = (sub.topic, sub.sub_string, sub.expression_type)
            if checked not in self._checked_expressions:
                # A broker logs an SQL92 expression it cannot parse and answers the pull
                # anyway (as Java's): ask first, as subscribe does, once per expression.
                await self._reader.check_subscription(sub)
                self._checked_expressions.add(checked)
        return await self._reader.pull(mq, offset, max_nums, sub, timeout_ms=timeout_ms)

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic``, from the name server, sorted."""
        self._check_running()
        wire = self.wire_topic(topic)
        route = await self.client.transport.get_route(wire, self.options.mq_client_api_timeout)
        queues = route.subscribe_queues(wire) if route is not None else frozenset()
        if not queues:
            raise ClientError(f"Can not find Message Queue for this topic, {topic}")
        return sorted(self.user_queue(mq) for mq in queues)

    # -- committing ------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit and persist, waiting for the brokers (or the local file) to take it.

        Without ``offsets``: the consumed offset of every held queue, i.e. past
        everything poll has returned. With ``offsets``: exactly those, each the
        next offset to consume (Java's ``commitSync(map, true)``).
        """
        self._check_running()
        await self.committer.persist(
            self.committer.to_store(self._wire_offsets(offsets), processed_only=False)
        )

    def commit_async(self, offsets: Mapping[MessageQueue, int] | None = None) -> asyncio.Task[None]:
        """Like :meth:`commit`, without waiting: the offsets are taken now, sent in a task.

        Await the returned task to learn the outcome; an unawaited failure is logged.
        """
        self._check_running()
        return self.committer.commit_async(self._wire_offsets(offsets))

    def _wire_offsets(
        self, offsets: Mapping[MessageQueue, int] | None
    ) -> Mapping[MessageQueue, int] | None:
        if offsets is None or not self.namespace:
            return offsets
        return {self.wire_queue(mq): offset for mq, offset in offsets.items()}

    # -- queue bookkeeping (what the rebalance calls) --------------------------------------------

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """Rebalance took ``mq`` (and computed where to start): begin fetching it."""
        old = self.queues.states.pop(mq, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        state = QueueState(mq, pq, next_offset)
        self.queues.states[mq] = state
        self.fetcher.start(state)

    def keep_only(self, topic: str, assigned: Collection[MessageQueue]) -> None:
        """Drop the queues of ``topic`` not in ``assigned``."""
        for mq in [mq for mq in self.queues.states if mq.topic == topic and mq not in assigned]:
            self._drop_state(mq)

    def release_queue(self, mq: MessageQueue) -> int:
        """``mq`` is leaving: with auto commit, commit what earlier polls returned, then drop it.

        Returns the offset committed, or -1.
        """
        state = self.queues.states.get(mq)
        if state is None:
            return -1
        committed = -1
        if self.lite_options.auto_commit and state.processed >= 0:
            committed = state.processed
            self.offset_store.update_offset(mq, committed, False)
        self._drop_state(mq)
        return committed

    def _drop_state(self, mq: MessageQueue) -> None:
        state = self.queues.states.pop(mq, None)
        if state is None:
            return
        state.pq.dropped = True
        state.generation += 1
        if state.task is not None:
            state.task.cancel()
            state.task = None
        self.buffer.discard(state)

    def apply_topic_flow_control(self) -> None:
        """The lite pull consumer has no topic-wide thresholds."""

    def _stop_pulling(self) -> None:
        # Every fetcher ends (its queue is dropped) and a waiting poll wakes to raise.
        for state in self.queues.states.values():
            state.pq.dropped = True
        self.buffer.wake()

    # -- MemberInner (what the client instance calls) ------------------------------------------

    def _reported_consume_from_where(self) -> ConsumeFromWhere:
        # Java's lite pull consumer always reports CONSUME_FROM_LAST_OFFSET here.
        return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET

    async def do_rebalance(self) -> None:
        if (
            self.state is ServiceState.RUNNING
            and self.failure is None
            and self.queues.kind is SubscriptionType.SUBSCRIBE
        ):
            await self.rebalance.do_rebalance(False)

    def _queues_to_persist(self) -> set[MessageQueue] | None:
        if self.state is not ServiceState.RUNNING:
            return None
        return set(self.queues.states) | set(self.rebalance.process_queue_table)

    async def reset_offset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from the broker: reposition the queues held, persist."""
        chosen = {mq: off for mq, off in offsets.items() if mq.topic == topic}
        for mq, off in chosen.items():
            self.offset_store.update_offset(mq, off, False)
            state = self.queues.states.get(mq)
            if state is not None:
                seeking.reposition(self, state, off)
        await self.committer.persist(chosen)

    def _running_properties(self) -> dict[str, str]:
        props = {
            field.name: str(getattr(self.lite_options, field.name))
            for field in attrs.fields(LitePullOptions)
        }
        props.update(super()._running_properties())
        return props

    def _held_queues(self) -> Iterable[tuple[MessageQueue, ProcessQueue]]:
        return ((mq, state.pq) for mq, state in self.queues.states.items())

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        # No listener to hand the message to; the transport answers "not supported".
        raise NotImplementedError("a lite pull consumer cannot consume a message directly")
