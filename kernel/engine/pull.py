"""The pull path both consumers share (Java's PullAPIWrapper, rocketmq-client-go's pull).

One place holds what a pull is, whichever consumer sends it: the per-queue flow
control checks, the broker choice (with a route refresh when the broker is not
known yet, and the broker's own suggestion of master or slave for the next pull),
the request header, the mapping of failures to a delay, and the processing of a
FOUND response: the exact-tag re-filter, the ``rmqk_filter_message`` hooks and
the queue's offset bounds stamped on each message. Records the transport could
not decode were skipped (see ``rmqk.plugins.remoting.pull_body``); each is
logged once as an error and counted in the consumer's stats.

What each consumer does with the processed messages (a process queue and a
consume service, or a poll buffer) stays with the consumer.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rmqk.engine.client import ClientInstance, FindBrokerResult
from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.stats import ConsumerStats
from rmqk.model import (
    MASTER_ID,
    RETRY_GROUP_TOPIC_PREFIX,
    ExpressionType,
    MessageQueue,
    PullResult,
    PullStatus,
    ServiceState,
    SubscriptionData,
)
from rmqk.model.errors import BrokerError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsReset
from rmqk.pluginmanager import call_event_hook, get_plugin_manager, hook_has_impls
from rmqk.spi.contexts import FilterMessageContext
from rmqk.spi.transport import DEFAULT_MAX_DECOMPRESSED_BODY_SIZE, PullMessageRequest
from rmqk.wire.protocol import PullSysFlag, ResponseCode

__all__ = [
    "PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL",
    "PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL",
    "FlowControl",
    "PullAPI",
    "filter_pulled",
    "offsets_went_backwards",
    "stamp_queue_offsets",
]

# PULL_TIME_DELAY_MILLS_WHEN_(CACHE_)FLOW_CONTROL: a queue over its thresholds waits this long.
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
# The broker answered FLOW_CONTROL: it is busy, ask again soon.
PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL = 20
_MIB = 1024 * 1024
_SUSPEND = int(PullSysFlag.SUSPEND)
_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_LITE_PULL_MESSAGE = int(PullSysFlag.LITE_PULL_MESSAGE)
# Java logs a flow-control notice on the 1st, 1001st, ... time the consumer holds a
# queue back (one counter per consumer, not per queue: queueFlowControlTimes). Java
# logs it at WARN; here it is INFO: holding queues back is how a consumer works through
# a backlog (the thresholds doing their job), not something a person must act on. The
# counts stay, for the summary line and ``rmqk status``.
_NOTICE_EVERY = 1000


class FlowControl:
    """The thresholds a queue must be under before it is pulled again.

    The checks and their order are DefaultMQPushConsumerImpl.pullMessage's (and
    DefaultLitePullConsumerImpl's): messages cached across all queues (lite pull
    only), messages cached for the queue, their size in whole MiB (Java's long
    division), and the span of queue offsets cached (not for orderly consumption).
    The push consumer changes ``count`` and ``size_mib`` when topic-wide
    thresholds are divided across the queues it holds.
    """

    __slots__ = (
        "all_messages",
        "batch_size",
        "count",
        "log",
        "size_mib",
        "span",
        "span_times",
        "times",
    )

    def __init__(
        self,
        log: logging.Logger,
        *,
        count: int,
        size_mib: int,
        span: int | None,
        all_messages: int | None = None,
        batch_size: int = 0,
    ) -> None:
        # The owner's logger, so that operators filter these notices by consumer kind.
        self.log = log
        self.count = count
        self.size_mib = size_mib
        self.span = span
        self.all_messages = all_messages
        self.batch_size = batch_size
        # Queues held back for their count or size, and for their span, over the
        # consumer's life: the notices are rate-limited on these, the summary shows them.
        self.times = 0
        self.span_times = 0

    @property
    def events(self) -> int:
        """Every time a queue was held back so far."""
        return self.times + self.span_times

    def blocks(self, pq: ProcessQueue, mq: MessageQueue, buffered_batches: int = 0) -> bool:
        """True when ``mq`` must wait :data:`PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL`.

        Each time is counted; one in :data:`_NOTICE_EVERY` is logged, at INFO.
        """
        if self.all_messages is not None and (
            buffered_batches * self.batch_size > self.all_messages
        ):
            return True
        if pq.msg_count > self.count:
            pq.flow_control_times += 1
            self.times += 1
            if self.times % _NOTICE_EVERY == 1:
                self.log.info(
                    "the cached message count exceeds the threshold %d, so do flow control, "
                    "%s, count=%d",
                    self.count,
                    mq,
                    pq.msg_count,
                )
            return True
        if pq.msg_size // _MIB > self.size_mib:
            pq.flow_control_times += 1
            self.times += 1
            if self.times % _NOTICE_EVERY == 1:
                self.log.info(
                    "the cached message size exceeds the threshold %d MiB, so do flow control, "
                    "%s, size=%d MiB",
                    self.size_mib,
                    mq,
                    pq.msg_size // _MIB,
                )
            return True
        if self.span is not None and pq.max_span() > self.span:
            pq.span_control_times += 1
            self.span_times += 1
            if self.span_times % _NOTICE_EVERY == 1:
                self.log.info(
                    "the queue's messages span too long, so do flow control, %s, span=%d",
                    mq,
                    pq.max_span(),
                )
            return True
        return False


class PullAPI:
    """Sends a consumer's pulls and processes their responses (Java's PullAPIWrapper).

    ``lite`` marks the lite pull consumer's requests (the LITE_PULL_MESSAGE flag,
    and sub version 0 for TAG subscriptions, as DefaultLitePullConsumerImpl
    sends them). ``block=False`` sends pulls the broker answers at once, as
    DefaultMQPullConsumer.pull does (no SUSPEND flag, sub version 0): the range
    reader's (``rmqk.engine.reader``). ``skip_bad_records=False`` fails a pull
    with a record that cannot be decoded instead of skipping it.
    ``on_subscription_missing`` runs when a broker answers that it does not know
    the subscription, i.e. has forgotten this client.
    """

    __slots__ = (
        "_filter",
        "_flag",
        "batch_size",
        "block",
        "client",
        "exception_delay_ms",
        "filter_hooks",
        "group",
        "hook_plugins",
        "lite",
        "log",
        "max_body_size",
        "on_subscription_missing",
        "pull_from_which_node",
        "skip_bad_records",
        "stats",
        "suspend_ms",
        "timeout_ms",
        "unit_mode",
    )

    def __init__(
        self,
        client: ClientInstance,
        group: str,
        log: logging.Logger,
        *,
        batch_size: int,
        suspend_ms: int,
        timeout_ms: int,
        exception_delay_ms: int,
        unit_mode: bool,
        lite: bool,
        on_subscription_missing: Callable[[], None],
        max_body_size: int = DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
        stats: ConsumerStats | None = None,
        filter_hooks: list[Any] | None = None,
        block: bool = True,
        skip_bad_records: bool = True,
        hook_plugins: frozenset[str] | None = None,
    ) -> None:
        self.client = client
        # The client's hook_plugins: whose rmqk_filter_message hooks run (None: all).
        self.hook_plugins = hook_plugins
        # The consumer's own filter hooks (register_filter_message_hook), its list.
        self.filter_hooks: list[Any] = filter_hooks if filter_hooks is not None else []
        self.group = group
        self.log = log
        self.batch_size = batch_size
        self.suspend_ms = suspend_ms
        self.timeout_ms = timeout_ms
        self.exception_delay_ms = exception_delay_ms
        self.unit_mode = unit_mode
        self.lite = lite
        self.on_subscription_missing = on_subscription_missing
        self.max_body_size = max_body_size
        self.stats = stats
        self.block = block
        self.skip_bad_records = skip_bad_records
        # The flags every request carries: the broker holds a blocking pull that finds
        # nothing (SUSPEND) until a message arrives or suspend_ms passes.
        self._flag = (_SUSPEND if block else 0) | (_LITE_PULL_MESSAGE if lite else 0)
        # The broker id each queue's broker suggested for its next pull.
        self.pull_from_which_node: dict[MessageQueue, int] = {}
        # Looked up once: checked for implementations at every pull.
        self._filter = get_plugin_manager().hook.rmqk_filter_message

    async def find_broker(self, mq: MessageQueue) -> FindBrokerResult | None:
        """The address to pull ``mq`` from, refreshing the topic's route once if unknown."""
        node = self.pull_from_which_node.get(mq, MASTER_ID)
        found = self.client.find_broker_address_in_subscribe(mq.broker_name, node, False)
        if found is None:
            await self.client.update_topic_route(mq.topic)
            node = self.pull_from_which_node.get(mq, MASTER_ID)
            found = self.client.find_broker_address_in_subscribe(mq.broker_name, node, False)
        return found

    async def pull(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        *,
        commit_offset: int = 0,
        post_subscription: bool = True,
    ) -> PullResult | int:
        """Pull ``mq`` from ``offset``: the broker's result, or the delay in ms before retrying."""
        # The broker is known but for a queue's first pull: no coroutine for the lookup.
        found = self.client.find_broker_address_in_subscribe(
            mq.broker_name, self.pull_from_which_node.get(mq, MASTER_ID), False
        )
        if found is None:
            found = await self.find_broker(mq)
        if found is None:
            self.log.warning("The broker[%s] not exist", mq.broker_name)
            return self.exception_delay_ms
        try:
            return await self._send(found, mq, sub, offset, commit_offset, post_subscription)
        except RmqkError as exc:
            return self.delay_after(mq, exc)

    def start(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        *,
        commit_offset: int = 0,
        post_subscription: bool = True,
    ) -> Awaitable[PullResult] | None:
        """:meth:`pull` without a coroutine of its own, for a caller on the hot path:
        the transport's call to await (map an :class:`RmqkError` it raises with
        :meth:`delay_after`), or None when the broker is not known yet (then
        :meth:`pull` looks it up)."""
        found = self.client.find_broker_address_in_subscribe(
            mq.broker_name, self.pull_from_which_node.get(mq, MASTER_ID), False
        )
        if found is None:
            return None
        return self._send(found, mq, sub, offset, commit_offset, post_subscription)

    def _send(
        self,
        found: FindBrokerResult,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        commit_offset: int,
        post_subscription: bool,
    ) -> Awaitable[PullResult]:
        header = self.request(mq, sub, offset, found.slave, commit_offset, post_subscription)
        return self.client.transport.pull_message(found.broker_addr, header, self.timeout_ms)

    def request(
        self,
        mq: MessageQueue,
        sub: SubscriptionData,
        offset: int,
        slave: bool = False,
        commit_offset: int = 0,
        post_subscription: bool = True,
        max_msgs: int = 0,
    ) -> PullMessageRequest:
        """The header of a pull of ``mq`` from ``offset`` (at most ``max_msgs`` messages,
        else ``batch_size``), sent to a slave when ``slave``.

        The only place that builds a :class:`PullMessageRequest` (``tests/test_one_reader.py``
        checks the tree), so a transport sees the same header from every caller.
        """
        # Plain ints: IntFlag arithmetic costs a few us per pull.
        sys_flag = self._flag
        # A slave must never commit offsets.
        if commit_offset > 0 and not slave:
            sys_flag |= _COMMIT_OFFSET
        if post_subscription:
            sys_flag |= _SUBSCRIPTION
        sub_version = sub.sub_version
        if self.lite:
            if sub.expression_type is ExpressionType.TAG:
                sub_version = 0
        elif not self.block:
            # DefaultMQPullConsumer.pull sends version 0: the subscription is the header's.
            sub_version = 0
        return PullMessageRequest(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_msgs or self.batch_size,
            sys_flag=sys_flag,
            commit_offset=max(commit_offset, 0),
            suspend_timeout_millis=self.suspend_ms,
            subscription=sub.sub_string if post_subscription else None,
            sub_version=sub_version,
            expression_type=sub.expression_type.value,
            broker_name=mq.broker_name,
            max_body_size=self.max_body_size,
            skip_bad_records=self.skip_bad_records,
        )

    def delay_after(self, mq: MessageQueue, exc: RmqkError) -> int:
        """The delay before pulling ``mq`` again after ``exc`` (logged).

        A WARNING while the client runs; DEBUG once the client is shutting down,
        when a pull still under way fails because its transport was closed: that
        is the stop itself, not a fault.
        """
        if not mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            if self.client.state is ServiceState.RUNNING:
                self.log.warning("execute the pull request exception for %s: %s", mq, exc)
            else:
                self.log.debug("a pull of %s ended by the client's shutdown: %s", mq, exc)
        if isinstance(exc, BrokerError):
            if exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL
            if exc.code == ResponseCode.SUBSCRIPTION_NOT_EXIST:
                self.on_subscription_missing()
        return self.exception_delay_ms

    async def process(
        self, mq: MessageQueue, sub: SubscriptionData, result: PullResult
    ) -> list[MessageExt]:
        """Remember the suggested broker; for FOUND, the messages that pass every filter.

        Each message returned carries the queue's min and max offset of this pull.
        """
        msgs = self.process_now(mq, sub, result)
        if msgs is None:
            msgs = await self.process_hooked(mq, sub, result)
        return msgs

    async def process_hooked(
        self, mq: MessageQueue, sub: SubscriptionData, result: PullResult
    ) -> list[MessageExt]:
        """The rest of :meth:`process` after :meth:`process_now` returned None."""
        msgs = await filter_pulled(
            self.group,
            mq,
            sub,
            list(result.messages),
            self.unit_mode,
            self.filter_hooks,
            self.hook_plugins,
        )
        if msgs:
            stamp_queue_offsets(msgs, result.min_offset, result.max_offset)
        return msgs

    def _filter_plugins(self) -> bool:
        impls = self._filter.get_hookimpls()
        if self.hook_plugins is None or not impls:
            return bool(impls)
        return any(impl.plugin_name in self.hook_plugins for impl in impls)

    def process_now(
        self, mq: MessageQueue, sub: SubscriptionData, result: PullResult
    ) -> list[MessageExt] | None:
        """:meth:`process` without awaiting: None when ``rmqk_filter_message`` hooks must
        run (then await :meth:`process_hooked` for the messages)."""
        self.pull_from_which_node[mq] = result.suggest_which_broker_id
        if result.skipped:
            self._report_skipped(mq, result)
        if result.status is not PullStatus.FOUND or not result.messages:
            return []
        if self.filter_hooks or self._filter_plugins():
            return None
        msgs = _by_tag(sub, list(result.messages))
        if msgs:
            stamp_queue_offsets(msgs, result.min_offset, result.max_offset)
        return msgs

    def _report_skipped(self, mq: MessageQueue, result: PullResult) -> None:
        # The transport already stepped past these records: each is reported here,
        # once, since the queue never pulls it again.
        for record in result.skipped:
            self.log.error(
                "skipped a message record that cannot be decoded, group %s, %s, queue offset "
                "%d: %s",
                self.group,
                mq,
                record.queue_offset,
                record.reason,
            )
        if self.stats is not None:
            self.stats.skipped_records(mq.topic, len(result.skipped))


async def filter_pulled(
    group: str,
    mq: MessageQueue,
    sub: SubscriptionData,
    msgs: list[MessageExt],
    unit_mode: bool,
    own_hooks: Sequence[Any] = (),
    hook_plugins: frozenset[str] | None = None,
) -> list[MessageExt]:
    """The messages of one FOUND response the subscription really wants.

    The broker filters tags by their hash codes only, so two tags with the same
    Java ``hashCode`` both pass it: keep only messages whose tag is one of the
    subscription's (PullAPIWrapper.processPullResult). This step always runs.
    Then the ``rmqk_filter_message`` hooks, only when some plugin implements one,
    and the consumer's own filter hooks (``own_hooks``), each ``filter_message(context)``.
    """
    msgs = _by_tag(sub, msgs)
    plugins = hook_has_impls("rmqk_filter_message", only=hook_plugins)
    if not plugins and not own_hooks:
        return msgs
    ctx = FilterMessageContext(group, mq, msgs, sub, unit_mode)
    if plugins:
        await call_event_hook("rmqk_filter_message", context=ctx, only=hook_plugins)
    for hook in list(own_hooks):
        # Logged and swallowed as the plugins' filter hooks are (a broken hook must not
        # stop the pulls); what it removed before raising stays removed.
        try:
            result = hook.filter_message(ctx)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            logging.getLogger("rmqk.engine.pull").exception(
                "filter hook %r of group %s failed", hook, group
            )
    return ctx.messages


def _by_tag(sub: SubscriptionData, msgs: list[MessageExt]) -> list[MessageExt]:
    if sub.expression_type is ExpressionType.TAG and sub.tags_set and not sub.class_filter_mode:
        tags = sub.tags_set
        return [m for m in msgs if m.tags in tags]
    return msgs


def offsets_went_backwards(
    mq: MessageQueue, offset: int, result: PullResult
) -> OffsetsReset | None:
    """The queue's offsets went backwards, if the pull of ``mq`` at ``offset`` says so.

    An OFFSET_ILLEGAL answer (PULL_OFFSET_MOVED) whose max offset is below the
    offset pulled: the queue holds fewer messages than this consumer already
    went past, which only a store rebuilt empty or a topic created again does
    (the broker answers OFFSET_OVERFLOW_BADLY, or NO_MESSAGE_IN_QUEUE for an
    empty queue, both as PULL_OFFSET_MOVED). Other answers with a smaller max
    offset (a lagging slave's PULL_RETRY_IMMEDIATELY) move nothing and are not it.
    """
    if result.status is not PullStatus.OFFSET_ILLEGAL or result.max_offset >= offset:
        return None
    return OffsetsReset(
        mq.topic,
        mq.broker_name,
        mq.queue_id,
        offset,
        result.max_offset,
        "the consumer group",
        first=result.min_offset,
    )


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
