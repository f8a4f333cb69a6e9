"""Reading offsets ``[start, end)`` of one queue: the one range reader of rmqk.

The Spark source, the trace lookup and the benchmarks read queues through it;
nothing else sends pulls but the consumers. It pulls through a client
instance, with the engine's one pull path (:class:`rmqk.engine.pull.PullAPI`)
in its non-blocking mode, as Java's ``DefaultMQPullConsumer.pull`` does. So
what applies to a consumer's pulls applies to a reader's: the transport plugin
the client was built with (and its ``transport_options``), its TLS settings,
the request hooks that sign requests with credentials, and for every FOUND
answer the exact-tag re-filter and the ``rmqk_filter_message`` hooks.

A reader joins no group: each pull carries its subscription, which a broker
serves without a heartbeat, and no offset is committed. Names given to it are
wire names (in the namespace, if any, as everything inside a client is); with
``namespace`` the messages it returns carry their topics without it, as a
consumer delivers them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from rmqk.engine.client import ClientConfig, ClientInstance, build_client_id
from rmqk.engine.client_check import check_client_in_broker
from rmqk.engine.pull import PullAPI
from rmqk.engine.startup import client_config
from rmqk.model import (
    MessageQueue,
    PullResult,
    PullStatus,
    SubscriptionData,
    build_subscription,
)
from rmqk.model.errors import ClientError, ConfigError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.model.namespace import unwrap
from rmqk.pluginmanager import check_hook_plugins
from rmqk.spi.client_options import CLIENT_OPTIONS, ClientOptions
from rmqk.spi.options import Where
from rmqk.spi.transport import Credentials, PullMessageRequest, TlsConfig

__all__ = [
    "MAX_PULL",
    "READER_REFUSES",
    "OffsetsGoneError",
    "RangeGap",
    "RangeReader",
    "ReaderSettings",
]

log = logging.getLogger("rmqk.engine.reader")

# A broker answers at most 32 messages per pull (its default maxMsgNums cap).
MAX_PULL = 32


def _str_tuple(values: Any) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class ReaderSettings:
    """What :meth:`RangeReader.open` builds a client of its own from."""

    namesrv_addrs: tuple[str, ...] = attrs.field(converter=_str_tuple)
    # The group named in pull requests; nothing is committed to it.
    group: str = "rmqk-reader"
    transport: str = "tcp"
    transport_options: Mapping[str, Any] = attrs.field(factory=dict)
    use_tls: bool = False
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    # The reader's own ACL credentials; None: the process defaults sign.
    credentials: Credentials | None = None
    namespace: str | None = None
    timeout_ms: int = 10_000
    # The client id is ``<ip>@<instance_name>#<pid>#<nanos>``: one client per reader.
    instance_name: str = "rmqk-reader"
    # Every client option at once (as a consumer takes them); then the TLS settings,
    # the account, the client id's parts, the VIP channel, the API timeout of route
    # and offset requests, hook_plugins and unit_mode all come from here (use_tls, tls and
    # credentials above must be left unset). An option a reader has no use for is
    # refused, with why (READER_REFUSES).
    client_options: ClientOptions | None = None

    def __attrs_post_init__(self) -> None:
        opts = self.client_options
        if opts is None:
            return
        where = Where("<reader settings>", "client_options")
        defaults = ClientOptions()
        problems = [
            where.problem(spec.name, f"a range reader does not take {spec.name}: {why}")
            for spec in CLIENT_OPTIONS
            if (why := READER_REFUSES.get(spec.name))
            and getattr(opts, spec.attr) != getattr(defaults, spec.attr)
        ]
        if self.use_tls or self.tls != TlsConfig() or self.credentials is not None:
            problems.append(
                where.problem(
                    None,
                    "give TLS and the account in client_options, not also as use_tls, tls "
                    "or credentials",
                )
            )
        if problems:
            raise ConfigError(problems)


# The client options a range reader has no use for, and why: given, they are refused.
# Every other client option applies to a reader as to a consumer (tests/test_one_reader.py).
READER_REFUSES: Mapping[str, str] = {
    "namesrv_addr": "the reader's name servers are its namesrv_addrs",
    "namespace": "the reader's namespace is its namespace setting",
    "access_channel": "only the message trace reads it, and a reader traces nothing",
    "enable_msg_trace": "a reader runs no consume hooks, so there is nothing to trace",
    "customized_trace_topic": "a reader runs no consume hooks, so there is nothing to trace",
    "client_callback_executor_threads": "a reader makes no asynchronous sends to call back",
    "poll_name_server_interval": "a reader looks a topic's route up when asked; it polls none",
    "heartbeat_broker_interval": "a reader sends no heartbeats",
}


@attrs.frozen
class RangeGap:
    """Offsets of a planned range that the broker does not hold.

    ``deleted``: offsets ``first`` to ``end - 1`` were removed (retention) and
    reading goes on at ``end``. Otherwise the queue ends at ``first``, before
    the planned end ``end``: only a broker that lost data answers so.
    """

    queue: MessageQueue
    first: int
    end: int
    deleted: bool
    status: PullStatus

    def describe(self) -> str:
        if self.deleted:
            return (
                f"offsets {self.first}..{self.end - 1} of {self.queue} are gone from the "
                "broker (deleted by retention)"
            )
        return (
            f"{self.queue} ends at {self.first}, before the planned end {self.end} "
            f"(status {self.status.value})"
        )


class OffsetsGoneError(RmqkError):
    """A range read met a :class:`RangeGap` and was not asked to skip it."""

    def __init__(self, gap: RangeGap) -> None:
        super().__init__(gap.describe())
        self.gap = gap


class RangeReader:
    """Reads ranges of queues through ``client`` (see the module doc).

    Built on a running client instance (a consumer's or producer's, to share its
    connections), or with :meth:`open`, which builds and starts one of its own.
    Gaps skipped so far are counted in :attr:`skipped_gaps` and
    :attr:`skipped_offsets`.
    """

    def __init__(
        self,
        client: ClientInstance,
        group: str,
        *,
        namespace: str | None = None,
        timeout_ms: int = 10_000,
        batch_size: int = MAX_PULL,
        filter_hooks: list[Any] | None = None,
        hook_plugins: frozenset[str] | None = None,
        unit_mode: bool = False,
    ) -> None:
        self.client = client
        self.group = group
        self.namespace = namespace or None
        self.timeout_ms = timeout_ms
        self.batch_size = max(1, min(batch_size, MAX_PULL))
        self.skipped_gaps = 0
        self.skipped_offsets = 0
        self._pull = PullAPI(
            client,
            group,
            log,
            batch_size=self.batch_size,
            suspend_ms=0,
            timeout_ms=timeout_ms,
            exception_delay_ms=0,
            # What the filter hooks' context says (Java's FilterMessageContext.unitMode).
            unit_mode=unit_mode,
            lite=False,
            # A reader has no membership for a broker to forget.
            on_subscription_missing=lambda: None,
            block=False,
            # A record that cannot be decoded fails the read: a range promises every offset.
            skip_bad_records=False,
            # A consumer's own filter hooks (its pull runs them as its polls do).
            filter_hooks=filter_hooks,
            # Whose rmqk_filter_message hooks run (the client option; None: all).
            hook_plugins=hook_plugins,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: ReaderSettings) -> AsyncIterator[RangeReader]:
        """A reader on a client instance of its own, started, and shut down on exit."""
        opts = settings.client_options
        name = settings.instance_name
        if opts is not None and opts.instance_name != "DEFAULT":
            name = opts.instance_name
        # One client instance per reader, even under a named instance: readers of one
        # process may run on different event loops (Spark's partition threads).
        instance = f"{name}#{os.getpid()}#{time.monotonic_ns()}"
        hook_plugins, unit_mode = None, False
        if opts is None:
            client_id = build_client_id(instance)
            config = ClientConfig(
                namesrv_addrs=settings.namesrv_addrs,
                transport=settings.transport,
                transport_options=settings.transport_options,
                request_timeout_ms=settings.timeout_ms,
                use_tls=settings.use_tls,
                tls=settings.tls,
                credentials=settings.credentials,
            )
        else:
            client_id = build_client_id(instance, opts.unit_name, opts.client_ip)
            config = client_config(
                opts, settings.namesrv_addrs, settings.transport, settings.transport_options
            )
            hook_plugins = check_hook_plugins(opts.hook_plugins, "client_options")
            unit_mode = opts.unit_mode
        client = ClientInstance.get_or_create(client_id, config)
        await client.start()
        try:
            yield cls(
                client,
                settings.group,
                namespace=settings.namespace,
                timeout_ms=settings.timeout_ms,
                hook_plugins=hook_plugins,
                unit_mode=unit_mode,
            )
        finally:
            await client.shutdown_if_unused()

    # -- queues and offsets -------------------------------------------------------------

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted, from a fresh route."""
        await self.client.update_topic_route(topic)
        route = self.client.route_table.get(topic)
        if route is None:
            if self.client.namesrv_error is not None:
                raise ClientError(f"no name server answers: {self.client.namesrv_error}")
            raise ClientError(
                f"topic {topic!r} does not exist on the name server(s) {self.client.namesrv_text}"
            )
        return sorted(route.subscribe_queues(topic))

    async def broker_addr(self, mq: MessageQueue) -> str:
        """The address offsets of ``mq`` are asked at: the master, else any replica."""
        return await self.client.find_broker_addr_for_admin(mq.broker_name, mq.topic)

    async def min_offset(self, mq: MessageQueue) -> int:
        addr = await self.broker_addr(mq)
        return await self.client.transport.get_min_offset(addr, mq, self.timeout_ms)

    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self.broker_addr(mq)
        return await self.client.transport.get_max_offset(addr, mq, self.timeout_ms)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self.broker_addr(mq)
        return await self.client.transport.search_offset(addr, mq, timestamp_ms, self.timeout_ms)

    async def check_subscription(self, sub: SubscriptionData) -> None:
        """Ask a broker of the topic whether it filters by ``sub``, as a consumer does for a
        non-TAG subscription (Java's checkClientInBroker): SubscriptionRefusedError names
        the broker's reason, where otherwise each pull would be refused or match nothing."""
        await self.client.update_topic_route(sub.topic)
        await check_client_in_broker(self.client, self.group, [sub])

    # -- reading ----------------------------------------------------------------------------

    def request(
        self, mq: MessageQueue, offset: int, max_msgs: int = 0, subscription: str = "*"
    ) -> PullMessageRequest:
        """The header this reader sends to pull ``mq`` from ``offset`` (for tools that
        send it themselves, such as the benchmarks' undecoded pulls)."""
        sub = build_subscription(mq.topic, subscription)
        return self._pull.request(mq, sub, offset, max_msgs=max_msgs)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        subscription: str | SubscriptionData = "*",
        *,
        timeout_ms: int | None = None,
    ) -> PullResult:
        """One non-blocking pull of ``mq`` at ``offset``, as Java's
        ``DefaultMQPullConsumer.pull``: the broker's answer, its FOUND messages
        re-filtered by tag and the filter hooks (so FOUND may carry none), and its
        offsets as they are (NO_NEW_MSG at the max offset, OFFSET_ILLEGAL outside
        [min, max]). A broker answers at most 32 messages whatever ``max_nums``.
        """
        if offset < 0:
            raise ClientError(f"offset < 0: {offset}")
        if max_nums <= 0:
            raise ClientError(f"maxNums <= 0: {max_nums}")
        sub = (
            subscription
            if isinstance(subscription, SubscriptionData)
            else build_subscription(mq.topic, subscription)
        )
        found = await self._pull.find_broker(mq)
        if found is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        header = self._pull.request(mq, sub, offset, found.slave, 0, True, max_nums)
        result = await self.client.transport.pull_message(
            found.broker_addr, header, timeout_ms if timeout_ms is not None else self.timeout_ms
        )
        msgs = await self._pull.process(mq, sub, result)
        if self.namespace:
            for m in msgs:
                m.topic = unwrap(self.namespace, m.topic)
        return attrs.evolve(result, messages=tuple(msgs))

    async def read(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        subscription: str | SubscriptionData = "*",
        *,
        skip_gaps: bool = False,
    ) -> AsyncIterator[list[MessageExt]]:
        """The messages of ``mq`` at offsets ``start`` (included) to ``end`` (excluded)
        that pass ``subscription`` and the filters, in order, one list per pull.

        A :class:`RangeGap` raises :class:`OffsetsGoneError`; with ``skip_gaps`` it is
        logged as a WARNING, counted, and reading goes on past it (or ends, when the
        queue ends early).
        """
        sub = (
            subscription
            if isinstance(subscription, SubscriptionData)
            else build_subscription(mq.topic, subscription)
        )
        pull = self._pull
        transport = self.client.transport
        namespace = self.namespace
        offset = start
        while offset < end:
            found = await pull.find_broker(mq)
            if found is None:
                raise ClientError(f"The broker[{mq.broker_name}] not exist")
            header = pull.request(mq, sub, offset, found.slave, 0, True, end - offset)
            result = await transport.pull_message(found.broker_addr, header, self.timeout_ms)
            # The broker's suggestion for the next pull, the re-filter and the hooks.
            msgs = await pull.process(mq, sub, result)
            status = result.status
            if status is PullStatus.FOUND:
                if msgs and (msgs[0].queue_offset < start or msgs[-1].queue_offset >= end):
                    msgs = [m for m in msgs if start <= m.queue_offset < end]
                if msgs:
                    if namespace:
                        for m in msgs:
                            m.topic = unwrap(namespace, m.topic)
                    yield msgs
                last = max((m.queue_offset for m in result.messages), default=offset - 1)
                offset = max(result.next_begin_offset, last + 1, offset + 1)
            elif status is PullStatus.NO_MATCHED_MSG:
                offset = max(result.next_begin_offset, offset + 1)
            elif status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                self._gap(RangeGap(mq, offset, result.min_offset, True, status), skip_gaps)
                offset = result.min_offset
            else:
                # NO_NEW_MSG, or an offset past the queue's end.
                self._gap(RangeGap(mq, offset, end, False, status), skip_gaps)
                return

    def _gap(self, gap: RangeGap, skip: bool) -> None:
        if not skip:
            raise OffsetsGoneError(gap)
        self.skipped_gaps += 1
        self.skipped_offsets += gap.end - gap.first
        log.warning("%s; skipping them (group %s)", gap.describe(), self.group)
