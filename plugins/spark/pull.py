"""What the ``rocketmq`` source asks brokers: queues, offsets, and message ranges.

Used on the driver (planning) and on executors (reading), each time inside an
event loop of its own. It pulls with the subscription flag and no consumer
group membership: a broker answers such a pull without a heartbeat, so Spark
readers never join, or disturb, a consumer group.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable

import attrs

from rmqk.errors import ClientError, RmqkError
from rmqk.message import MessageExt
from rmqk.model import MessageQueue, PullStatus, SubscriptionData, build_subscription
from rmqk.plugins.spark.offsets import EARLIEST, LATEST, OffsetSpec, QueueKey
from rmqk.protocol import PullSysFlag
from rmqk.transport import (
    Credentials,
    PullMessageRequest,
    TlsConfig,
    Transport,
    TransportConfig,
)

__all__ = ["BrokerReader", "DataLossError", "QueueInfo"]

log = logging.getLogger("rmqk.plugins.spark.pull")

# A broker answers at most 32 messages per pull.
MAX_PULL = 32


class DataLossError(RmqkError):
    """Offsets the query needs are no longer on the broker (and failOnDataLoss is on)."""


@attrs.frozen(order=True)
class QueueInfo:
    key: QueueKey
    addr: str

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.key.topic, self.key.broker, self.key.queue_id)


class BrokerReader:
    """A transport and the calls the source makes with it; ``async with`` opens and closes it."""

    def __init__(
        self,
        namesrv_addrs: Iterable[str],
        *,
        group: str = "rmqk-spark-source",
        timeout_ms: int = 10_000,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.namesrv_addrs = tuple(namesrv_addrs)
        self.group = group
        self.timeout_ms = timeout_ms
        # The source's useTls / tls* and accessKey options (ClientOptions).
        self.tls = tls if tls is not None else TlsConfig()
        self.credentials = credentials
        self.transport: Transport | None = None

    async def __aenter__(self) -> BrokerReader:
        from rmqk.pluginmanager import get_plugin_manager, registries

        transport: Transport = registries().transports.create(
            "tcp",
            TransportConfig(
                namesrv_addrs=self.namesrv_addrs,
                client_id="127.0.0.1@rmqk-spark",
                request_timeout_ms=self.timeout_ms,
                tls=self.tls,
                credentials=self.credentials,
            ),
            get_plugin_manager().hook,
        )
        await transport.start()
        self.transport = transport
        return self

    async def __aexit__(self, *exc: object) -> None:
        transport, self.transport = self.transport, None
        if transport is not None:
            await transport.close()

    def _t(self) -> Transport:
        if self.transport is None:
            raise ClientError("BrokerReader used outside 'async with'")
        return self.transport

    async def queues(self, topics: Iterable[str]) -> list[QueueInfo]:
        """Every readable queue of ``topics`` with its broker's address, sorted."""
        out: list[QueueInfo] = []
        for topic in topics:
            route = await self._t().get_route(topic)
            if route is None:
                raise ClientError(
                    f"topic {topic!r} does not exist on the name server(s) "
                    f"{';'.join(self.namesrv_addrs)}"
                )
            for mq in sorted(route.subscribe_queues(topic)):
                broker = route.broker(mq.broker_name)
                addr = broker.select_addr() if broker is not None else None
                if addr is None:
                    log.warning("no address for broker %s of topic %s", mq.broker_name, topic)
                    continue
                out.append(QueueInfo(QueueKey(topic, mq.broker_name, mq.queue_id), addr))
        return sorted(out)

    async def min_offset(self, q: QueueInfo) -> int:
        return await self._t().get_min_offset(q.addr, q.mq, self.timeout_ms)

    async def max_offset(self, q: QueueInfo) -> int:
        return await self._t().get_max_offset(q.addr, q.mq, self.timeout_ms)

    async def max_offsets(self, queues: Iterable[QueueInfo]) -> dict[str, int]:
        return {str(q.key): await self.max_offset(q) for q in queues}

    async def resolve(self, spec: OffsetSpec, queues: Iterable[QueueInfo]) -> dict[str, int]:
        """The offset ``spec`` names in each queue, clamped to what the queue holds."""
        out: dict[str, int] = {}
        for q in queues:
            low = await self.min_offset(q)
            high = await self.max_offset(q)
            if spec.kind == "specific":
                wanted = spec.offset_for(q.key)
                if wanted is None:
                    wanted = EARLIEST if spec.default == "earliest" else LATEST
            elif spec.kind == "timestamp":
                assert spec.timestamp_ms is not None
                wanted = await self._first_at_or_after(q, spec.timestamp_ms, high)
            else:
                wanted = EARLIEST if spec.kind == "earliest" else LATEST
            if wanted == EARLIEST:
                wanted = low
            elif wanted == LATEST:
                wanted = high
            out[str(q.key)] = min(max(wanted, low), high)
        return out

    async def _first_at_or_after(self, q: QueueInfo, timestamp_ms: int, high: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (``high`` if none).

        A broker's search answers the last offset when every message is older,
        so the message it names is checked.
        """
        found = await self._t().search_offset(q.addr, q.mq, timestamp_ms, self.timeout_ms)
        if found >= high:
            return high
        async for msgs in self.pull_range(q, found, found + 1, fail_on_data_loss=False):
            if msgs and msgs[0].store_timestamp < timestamp_ms:
                return found + 1
        return found

    async def pull_range(
        self,
        q: QueueInfo,
        start: int,
        end: int,
        expression: str = "*",
        *,
        fail_on_data_loss: bool = True,
        batch_size: int = MAX_PULL,
    ) -> AsyncIterator[list[MessageExt]]:
        """The messages of offsets ``start`` (included) to ``end`` (excluded), in order."""
        sub: SubscriptionData = build_subscription(q.key.topic, expression)
        sys_flag = int(PullSysFlag.SUBSCRIPTION)
        offset = start
        while offset < end:
            request = PullMessageRequest(
                consumer_group=self.group,
                topic=q.key.topic,
                queue_id=q.key.queue_id,
                queue_offset=offset,
                max_msg_nums=max(1, min(batch_size, MAX_PULL, end - offset)),
                sys_flag=sys_flag,
                commit_offset=0,
                suspend_timeout_millis=0,
                subscription=sub.sub_string,
                sub_version=0,
                expression_type="TAG",
            )
            result = await self._t().pull_message(q.addr, request, self.timeout_ms)
            if result.status is PullStatus.FOUND:
                msgs = [
                    m
                    for m in result.messages
                    if start <= m.queue_offset < end and sub.matches_tag(m.tags)
                ]
                if msgs:
                    yield msgs
                last = max((m.queue_offset for m in result.messages), default=offset - 1)
                offset = max(result.next_begin_offset, last + 1, offset + 1)
            elif result.status is PullStatus.NO_MATCHED_MSG:
                offset = max(result.next_begin_offset, offset + 1)
            elif result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                message = (
                    f"offsets {offset}..{result.min_offset - 1} of {q.key} are gone from the "
                    "broker (deleted by retention)"
                )
                if fail_on_data_loss:
                    raise DataLossError(message + "; set failOnDataLoss=false to skip them")
                log.warning("%s; skipping them", message)
                offset = result.min_offset
            else:
                # NO_NEW_MSG, or an offset past the end: the planned range ends early,
                # which only a broker that lost data can cause.
                message = (
                    f"{q.key} ends at {result.max_offset}, before the planned end {end} "
                    f"(status {result.status.value} at offset {offset})"
                )
                if fail_on_data_loss:
                    raise DataLossError(message + "; set failOnDataLoss=false to accept it")
                log.warning("%s", message)
                return
