"""What the ``rocketmq`` source asks brokers: queues, offsets, and message ranges.

Used on the driver (planning) and on executors (reading), each time inside an
event loop of its own, through the engine's range reader
(:class:`rmqk.engine.reader.RangeReader`): the source's transport plugin,
TLS, credentials and ``rmqk_filter_message`` hooks apply to its pulls as to a
consumer's. It pulls with the subscription flag and no consumer group
membership: a broker answers such a pull without a heartbeat, so Spark readers
never join, or disturb, a consumer group.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

import attrs

from rmqk import OffsetsGoneError, RangeReader, ReaderSettings
from rmqk.model import MessageQueue, SubscriptionData
from rmqk.model.errors import ClientError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.plugins.spark.offsets import EARLIEST, LATEST, OffsetSpec, QueueKey

__all__ = ["BrokerReader", "DataLossError", "QueueInfo"]

log = logging.getLogger("rmqk.plugins.spark.pull")


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
    """A range reader and the calls the source makes with it; ``async with`` opens and
    closes its client."""

    def __init__(self, settings: ReaderSettings) -> None:
        self.settings = settings
        self.namesrv_addrs = settings.namesrv_addrs
        self.timeout_ms = settings.timeout_ms
        self.reader: RangeReader | None = None
        self._opened: contextlib.AbstractAsyncContextManager[RangeReader] | None = None

    async def __aenter__(self) -> BrokerReader:
        opened = RangeReader.open(self.settings)
        self.reader = await opened.__aenter__()
        self._opened = opened
        return self

    async def __aexit__(self, *exc: object) -> None:
        opened, self._opened, self.reader = self._opened, None, None
        if opened is not None:
            await opened.__aexit__(None, None, None)

    def _r(self) -> RangeReader:
        if self.reader is None:
            raise ClientError("BrokerReader used outside 'async with'")
        return self.reader

    async def queues(self, topics: Iterable[str]) -> list[QueueInfo]:
        """Every readable queue of ``topics`` with its broker's address, sorted."""
        reader = self._r()
        out: list[QueueInfo] = []
        for topic in topics:
            for mq in await reader.queues(topic):
                try:
                    addr = await reader.broker_addr(mq)
                except ClientError:
                    log.warning("no address for broker %s of topic %s", mq.broker_name, topic)
                    continue
                out.append(QueueInfo(QueueKey(topic, mq.broker_name, mq.queue_id), addr))
        return sorted(out)

    async def check_subscription(self, sub: SubscriptionData) -> None:
        """Raise SubscriptionRefusedError, with the broker's reason, when a broker of the
        topic cannot filter by ``sub`` (an SQL92 expression it does not parse, or a broker
        without enablePropertyFilter); a TAG subscription needs no asking."""
        await self._r().check_subscription(sub)

    async def min_offset(self, q: QueueInfo) -> int:
        return await self._r().min_offset(q.mq)

    async def max_offset(self, q: QueueInfo) -> int:
        return await self._r().max_offset(q.mq)

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
            elif spec.kind == "timestamps":
                at = spec.offset_for(q.key)
                if at is None:
                    wanted = EARLIEST if spec.default == "earliest" else LATEST
                else:
                    wanted = await self._first_at_or_after(q, at, high)
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
        found = await self._r().search_offset(q.mq, timestamp_ms)
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
        expression: str | SubscriptionData = "*",
        *,
        fail_on_data_loss: bool = True,
    ) -> AsyncIterator[list[MessageExt]]:
        """The messages of offsets ``start`` (included) to ``end`` (excluded), in order."""
        try:
            async for msgs in self._r().read(
                q.mq, start, end, expression, skip_gaps=not fail_on_data_loss
            ):
                yield msgs
        except OffsetsGoneError as exc:
            hint = "skip them" if exc.gap.deleted else "accept it"
            raise DataLossError(f"{exc}; set failOnDataLoss=false to {hint}") from exc
