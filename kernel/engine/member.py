"""What both consumers are to their client instance and brokers (Java's MQConsumerInner).

The push and lite pull consumers report themselves the same way: the consumer
data of a heartbeat, the running info and consumer status an admin tool asks
for, the offsets their queues have on the brokers. They also join a client
instance the same way. :class:`ConsumerMember` holds those parts once; each
consumer says only what differs (its consume type, the properties it reports,
the queues it holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Self

from rmqk.engine.client import ClientInstance
from rmqk.engine.client_check import check_client_in_broker
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.rebalance import Rebalance
from rmqk.engine.startup import client_for, resolve_namesrv
from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    ServiceState,
    SubscriptionData,
)
from rmqk.model.errors import ClientError, ConfigError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.model.namespace import resolve_namespace, unwrap, unwrap_queue, wrap, wrap_queue
from rmqk.model.offsets_reset import OffsetsReset, OffsetsWentBackwardsError
from rmqk.options import ConsumerOptions, Where, check_group
from rmqk.pluginmanager import call_event_hook, check_hook_plugins, registries
from rmqk.spi.contexts import ClientContext, ClientRole
from rmqk.spi.contracts import AllocationStrategy, AllocationStrategyContext, OffsetStore
from rmqk.spi.options import option_specs
from rmqk.spi.transport import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
)

__all__ = ["ConsumerMember", "options_where"]

# A broker that forgot this client is told again at most this often.
_HEARTBEAT_NOW_MIN_INTERVAL_S = 1.0


def options_where(group: str, kind: str) -> Where:
    """Where a consumer's option problems are told; a bad group name is refused at once."""
    where = Where("<consumer options>", f"{kind} {group!r}")
    problem = check_group(group)
    if problem:
        raise ConfigError([where.problem("group", problem)])
    return where


def _java_text(value: Any) -> str:
    """Java's ``toString()`` of an option value, as a Properties value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)


class ConsumerMember:
    """The base of both consumers: group membership, reporting, broker offsets."""

    # Java's consumeType(): PASSIVELY for push, ACTIVELY for lite pull.
    consume_type: ClassVar[ConsumeType]
    # The options a running-info report lists under their own names; a consumer kind adds its own.
    reported_options: ClassVar[tuple[str, ...]] = (
        "pull_batch_size",
        "pull_threshold_for_queue",
        "message_model",
        "consume_from_where",
    )
    # The consumer kind's logger, also for its pulls' notices (operators filter by it).
    log: ClassVar[logging.Logger]
    # What the client lifecycle hooks call this consumer.
    client_role: ClassVar[ClientRole]

    rebalance: Rebalance
    client: ClientInstance
    offset_store: OffsetStore
    allocation_strategy: AllocationStrategy

    def __init__(self, group: str, options: ConsumerOptions) -> None:
        addrs = options.namesrv_addr or tuple(os.environ.get("NAMESRV_ADDR", "").split(";"))
        # The namespace this consumer names things in; every name inside the client and on
        # the wire is wrapped in it, the public methods convert at their boundary.
        self.namespace = resolve_namespace(options.namespace, addrs, f"consumer {group!r}")
        # The wire group, as Java's start() sets it (setConsumerGroup(wrapNamespace(...))).
        self.group = wrap(self.namespace, group)
        if self.group != group:
            problem = check_group(self.group)
            if problem:
                where = Where("<consumer options>", f"consumer {group!r}")
                raise ConfigError([where.problem("namespace", problem)])
        self.options = options
        # Whose consume and filter hooks apply to this consumer (None: every plugin's).
        self.hook_plugins = check_hook_plugins(options.hook_plugins, f"consumer {group!r}")
        self.message_model: MessageModel = options.message_model
        self.state = ServiceState.CREATE_JUST
        self.client_id = ""
        self.start_timestamp = 0
        self._namesrv: tuple[str, ...] = ()
        self._background: set[asyncio.Future[Any]] = set()
        self._heartbeat_requested_at = 0.0
        # Issue 25: what stopped this consumer (on_offsets_reset = "fail"), who is told,
        # and who must forget a queue before it starts afresh ("resume").
        self.failure: RmqkError | None = None
        self._failure_listeners: list[Callable[[RmqkError], None]] = []
        self._reset_listeners: list[Callable[[MessageQueue], Awaitable[None]]] = []
        # Queues started afresh because their offsets went backwards, per topic.
        self.offsets_resets: dict[str, int] = {}
        # This consumer's own filter hooks; the pull path keeps this very list.
        self._filter_hooks: list[Any] = []

    def register_filter_message_hook(self, hook: Any) -> Any:
        """Add a filter hook of this consumer only (Java's registerFilterMessageHook).

        ``hook.filter_message(context)`` (plain or ``async def``) runs on each FOUND
        pull of this consumer after the exact-tag re-filter and the process's
        ``rmqk_filter_message`` plugin hooks, with the same
        :class:`~rmqk.spi.contexts.FilterMessageContext`; it removes messages from
        ``context.messages``. Other clients of the process never reach it. One that
        raises is logged; pulling goes on.
        """
        if not callable(getattr(hook, "filter_message", None)):
            raise ClientError(f"filter hook {hook!r} has no filter_message(context)")
        self._filter_hooks.append(hook)
        return hook

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- offsets that went backwards (issue 25) ----------------------------------------------

    def add_failure_listener(self, listener: Callable[[RmqkError], None]) -> None:
        """``listener(error)`` once, on the event loop, when the consumer stops on an error.

        The consumer has stopped pulling by then; :attr:`failure` holds the error
        and the caller should still :meth:`shutdown` it.
        """
        self._failure_listeners.append(listener)
        if self.failure is not None:
            listener(self.failure)

    def add_offsets_reset_listener(
        self, listener: Callable[[MessageQueue], Awaitable[None]]
    ) -> None:
        """``await listener(queue)`` before a queue whose offsets went backwards starts afresh.

        For whatever recorded the queue's old offsets beside the consumer (an
        exactly-once sink's commit records): the queue's offset moves back only
        once every listener returned, so nothing is skipped as already written.
        """
        self._reset_listeners.append(listener)

    def offsets_went_backwards(self, reset: OffsetsReset) -> bool:
        """Apply ``on_offsets_reset`` to ``reset``: True to start the queue afresh.

        ``resume``: a WARNING and the ``offsets_reset`` counter. ``fail``: the
        consumer stops with :class:`OffsetsWentBackwardsError` (see :meth:`fail`).
        """
        if self.options.on_offsets_reset == "resume":
            self.log.warning(
                '%s; on_offsets_reset = "resume": the queue starts afresh from offset %d',
                reset.describe(),
                reset.first,
            )
            self.offsets_resets[reset.topic] = self.offsets_resets.get(reset.topic, 0) + 1
            return True
        self.fail(OffsetsWentBackwardsError(reset))
        return False

    def fail(self, error: RmqkError) -> None:
        """Stop pulling every queue, log ``error`` once and tell the failure listeners."""
        if self.failure is not None:
            return
        self.failure = error
        self.log.error("%s", error)
        self._stop_pulling()
        for listener in list(self._failure_listeners):
            try:
                listener(error)
            except Exception:
                self.log.exception("a failure listener of group %s failed", self.group)

    def _stop_pulling(self) -> None:
        """Pull no queue any more (the consumer kind knows how)."""
        raise NotImplementedError

    async def _forget_queue(self, mq: MessageQueue) -> None:
        """Await the offsets-reset listeners for ``mq`` (see :meth:`add_offsets_reset_listener`)."""
        for listener in list(self._reset_listeners):
            await listener(mq)

    # -- joining a client instance ---------------------------------------------------------

    def _join_client(self) -> None:
        """Resolve the name servers, the allocation strategy and the shared client instance."""
        opts = self.options
        self._namesrv = resolve_namesrv(opts)
        self.allocation_strategy = registries().allocation_strategies.create(
            opts.allocate_message_queue_strategy,
            AllocationStrategyContext(self.group),
            opts.allocate_options,
        )
        self.client = client_for(opts, self.message_model, self._namesrv)
        self.client_id = self.client.client_id

    def _group_taken(self) -> ClientError:
        """The error of a start whose group this process already runs (state reset first)."""
        self.state = ServiceState.CREATE_JUST
        return ClientError(
            f"The consumer group[{self.group}] has been created before, "
            "specify another name please."
        )

    async def _announce(self) -> None:
        """Running now: fetch the subscribed routes, tell the brokers, rebalance at once."""
        self.state = ServiceState.RUNNING
        self.start_timestamp = int(time.time() * 1000)
        for topic in list(self.rebalance.subscription_inner):
            await self.client.update_topic_route(topic)
        try:
            await check_client_in_broker(
                self.client, self.group, self.rebalance.subscription_inner.values()
            )
        except RmqkError:
            # Java leaves the consumer running; here nothing pulls under a refused subscription.
            await self.shutdown()
            self.state = ServiceState.START_FAILED
            raise
        await self.client.send_heartbeat_to_all_brokers()
        self.client.rebalance_immediately()

    async def _lifecycle_hook(self, hook: str) -> None:
        """``rmqk_client_started`` or ``rmqk_client_shutdown`` for this consumer."""
        opts = self.options
        context = ClientContext(
            role=self.client_role,
            group=self.group,
            namespace=self.namespace,
            namesrv_addrs=self._namesrv,
            options=opts,
            client=self,
            transport=opts.transport,
            transport_options=dict(opts.transport_options),
            use_tls=opts.use_tls,
            client_options=opts.client_options,
        )
        await call_event_hook(hook, context=context)

    async def _leave_client_quietly(self) -> None:
        """Undo :meth:`_join_client`'s registration after a failed start."""
        with contextlib.suppress(Exception):
            if hasattr(self, "client") and self.client.consumers.get(self.group) is self:
                await self.client.unregister_consumer(self.group)
                await self.client.shutdown_if_unused()

    # -- MemberInner (what the client instance calls) ------------------------------------------

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self.rebalance.subscription_inner.values())

    def _reported_consume_from_where(self) -> ConsumeFromWhere:
        return self.options.consume_from_where

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            message_model=self.message_model,
            consume_from_where=self._reported_consume_from_where(),
            subscriptions=self.subscriptions(),
            unit_mode=self.options.unit_mode,
        )

    def update_topic_subscribe_info(self, topic: str, mqs: frozenset[MessageQueue]) -> None:
        self.rebalance.update_topic_subscribe_info(topic, mqs)

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        return self.rebalance.is_subscribe_topic_need_update(topic)

    async def do_rebalance(self) -> None:
        raise NotImplementedError

    async def reset_offset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        raise NotImplementedError

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        raise NotImplementedError

    def _queues_to_persist(self) -> set[MessageQueue] | None:
        """The queues whose offsets the periodic persist writes; None: not now."""
        raise NotImplementedError

    async def persist_consumer_offset(self) -> None:
        owned = self._queues_to_persist()
        if owned is None:
            return
        try:
            await self.offset_store.persist_all(owned)
        except Exception:
            self.log.exception("group %s persistConsumerOffset exception", self.group)

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return self.offset_store.clone_offset_table(topic)

    def _running_properties(self) -> dict[str, str]:
        """The properties of a running-info report besides :attr:`reported_options`."""
        return {"PROP_CONSUMER_START_TIMESTAMP": str(self.start_timestamp)}

    def _held_queues(self) -> Iterable[tuple[MessageQueue, ProcessQueue]]:
        raise NotImplementedError

    def _status_table(self) -> dict[str, ConsumeStatus]:
        """Consume statistics per topic, for consumers that keep them."""
        return {}

    def running_info(self) -> ConsumerRunningInfo:
        """consumerRunningInfo: what GET_CONSUMER_RUNNING_INFO reports of this member."""
        # MixAll.object2Properties: the consumer's fields under their Java names, each
        # value's toString() (an enum's name, a boolean's "true").
        specs = option_specs(type(self.options))
        props = {}
        for name in self.reported_options:
            spec = specs.get(name)
            key = spec.java_name if spec is not None and spec.java_name else name
            props[key] = _java_text(getattr(self.options, name))
        props.update(self._running_properties())
        mq_table = {
            mq: pq.info(self.offset_store.clone_offset_table(mq.topic).get(mq, -1))
            for mq, pq in self._held_queues()
        }
        return ConsumerRunningInfo(
            properties=props,
            subscriptions=tuple(self.subscriptions()),
            mq_table=mq_table,
            status_table=self._status_table(),
        )

    # -- the brokers' view of a queue ----------------------------------------------------------

    def _admin_timeout_ms(self) -> int:
        return self.options.mq_client_api_timeout

    async def min_offset(self, queue: MessageQueue) -> int:
        queue = self.wire_queue(queue)
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.get_min_offset(addr, queue, self._admin_timeout_ms())

    async def max_offset(self, queue: MessageQueue) -> int:
        queue = self.wire_queue(queue)
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.get_max_offset(addr, queue, self._admin_timeout_ms())

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        queue = self.wire_queue(queue)
        addr = await self.client.find_broker_addr_for_admin(queue.broker_name, queue.topic)
        return await self.client.transport.search_offset(
            addr, queue, timestamp_ms, self._admin_timeout_ms()
        )

    # -- names: the user's at the public methods, the wire's inside --------------------------

    def wire_topic(self, topic: str) -> str:
        return wrap(self.namespace, topic)

    def user_topic(self, topic: str) -> str:
        return unwrap(self.namespace, topic)

    def wire_queue(self, queue: MessageQueue) -> MessageQueue:
        return wrap_queue(self.namespace, queue)

    def user_queue(self, queue: MessageQueue) -> MessageQueue:
        return unwrap_queue(self.namespace, queue)

    def unwrap_messages(self, msgs: Iterable[MessageExt]) -> None:
        """Show ``msgs`` under the user's topic names (half of Java's resetRetryAndNamespace)."""
        namespace = self.namespace
        if namespace:
            for msg in msgs:
                msg.topic = unwrap(namespace, msg.topic)

    # -- background work -----------------------------------------------------------------------

    def _spawn(self, aw: Awaitable[Any]) -> asyncio.Future[Any]:
        fut = asyncio.ensure_future(aw)
        self._track(fut)
        return fut

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)

    def heartbeat_now(self) -> None:
        """Register with the brokers again now, at most once a second.

        A broker forgets a client when its connection closes or the broker restarts,
        and then refuses every pull until the client's next heartbeat, up to
        ``heartbeat_broker_interval`` (30 s) away. Java 4.9.8 waits for it; rmqk
        sends one at once (docs/reliability.md has the measurements).
        """
        now = time.monotonic()
        if now - self._heartbeat_requested_at < _HEARTBEAT_NOW_MIN_INTERVAL_S:
            return
        self._heartbeat_requested_at = now
        self._spawn(self.client.send_heartbeat_to_all_brokers())
