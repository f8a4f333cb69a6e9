"""The interfaces plugins implement for the engine: allocation, offsets, sinks."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from rmqk.model import MessageModel, MessageQueue
from rmqk.model.message import MessageExt

if TYPE_CHECKING:
    from rmqk.model.offsets_reset import OffsetsReset
    from rmqk.spi.transport import Transport

__all__ = [
    "AllocationStrategy",
    "AllocationStrategyContext",
    "BodyParsingSink",
    "BrokerClient",
    "BrokerOffsetStore",
    "BufferedSink",
    "OffsetStore",
    "OffsetStoreContext",
    "OffsetsRecordingSink",
    "ReadOffsetType",
    "Sink",
    "SinkContext",
]


@runtime_checkable
class AllocationStrategy(Protocol):
    """Java's AllocateMessageQueueStrategy.

    ``allocate`` receives ``mq_all`` and ``cid_all`` already sorted and must give
    exactly Java's answer for the same inputs: Java and Python members of one
    group each compute their own share and must not overlap or leave gaps.
    """

    @property
    def name(self) -> str: ...

    def allocate(
        self,
        group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]: ...


@attrs.frozen
class AllocationStrategyContext:
    """What an allocation strategy factory is given beside its options: the group.

    (The consumer's client id is ``allocate``'s: the strategy is built before it is known.)
    """

    group: str


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class BrokerClient(Protocol):
    """What an offset store that talks to brokers may use of the client instance."""

    @property
    def transport(self) -> Transport: ...

    async def find_broker_addr_for_offsets(self, broker_name: str, topic: str) -> str:
        """The master's address; else, after refreshing the topic's route, any of the group's.

        Java's RemoteBrokerOffsetStore lookup: the route is refreshed whenever the
        master is not in the table, so commits reach a returning master at once.
        Raises ClientError when the group stays unknown.
        """
        ...


@attrs.frozen
class OffsetStoreContext:
    """What an offset store factory is given for one consumer."""

    group: str
    client_id: str
    message_model: MessageModel
    # The consumer's offset_store_options table as given. A factory registered as a
    # PluginFactory reads its checked ``options`` argument instead; this is for
    # factories of the old ``factory(context)`` form, for one release.
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # Route lookups and the transport, for stores that talk to brokers; None in tests
    # and tools that build a store with no client instance.
    client: BrokerClient | None = None


class OffsetStore(Protocol):
    """Java's OffsetStore. ``read_offset`` returns -1 when nothing is known."""

    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: set[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]: ...


@runtime_checkable
class BrokerOffsetStore(OffsetStore, Protocol):
    """An offset store that can commit one offset to its broker and report the outcome.

    A capability, not part of every store: the lite pull consumer's ``commit_sync``
    in CLUSTERING confirms each commit through it; with a store without it, the
    committed queues are persisted instead.
    """

    async def update_consume_offset_to_broker(
        self, mq: MessageQueue, offset: int, oneway: bool
    ) -> None:
        """Send one offset now; raises what the broker lookup or the transport raises."""
        ...


@attrs.frozen
class SinkContext:
    """What a sink factory is given beside its options: the consumer it delivers for.

    ``consumer`` is the name of the consumer's table (``[consumers.<name>]``) and
    ``group`` its group; both are empty for a sink built outside a composed consumer.
    """

    consumer: str = ""
    group: str = ""


class Sink(Protocol):
    """Where a composed consumer delivers its batches.

    ``write`` returns only when the batch is durable in the sink (or raises);
    the consumer acknowledges the batch, and offsets move, only after that. A
    sink that groups many batches into one write (group commit) awaits the flush
    that covers the batch before returning. Such a sink can also be a
    :class:`BufferedSink`.
    """

    async def start(self) -> None: ...

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class BufferedSink(Sink, Protocol):
    """A group-commit sink's optional capabilities, checked with ``isinstance``.

    A composed consumer delivers to such a sink with ``submit`` and acknowledges
    each batch when its future resolves, with no consume worker waiting
    meanwhile, and widens its flow control to ``window_rows`` (see
    :func:`rmqk.app.runtime.widen_for_sink`).
    """

    @property
    def window_rows(self) -> int:
        """Messages the sink wants in flight for its flushes to fill; 0: no preference."""
        ...

    def submit(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> asyncio.Future[None]:
        """Buffer the batch and return at once the future of the flush that covers it.

        The future resolves once that flush is durable and fails with its error;
        cancelling it withdraws the batch if no flush has taken it yet.
        """
        ...


@runtime_checkable
class OffsetsRecordingSink(Sink, Protocol):
    """A sink that records the offsets it wrote (exactly once), checked with ``isinstance``.

    Such a sink must hear of a queue whose offsets went backwards (issue 25), or
    it skips the queue's new messages as already written. A composed consumer
    passes it its ``on_offsets_reset`` and awaits :meth:`offsets_reset` before
    it starts a queue afresh.
    """

    def watch_offsets(self, policy: str, report: Callable[[OffsetsReset], None]) -> None:
        """Check each batch against the offsets recorded for its queue.

        A batch whose queue max offset (stamped at the pull) is not above the
        highest offset recorded for the queue went backwards: ``policy`` ``fail``
        fails its write with :class:`rmqk.model.offsets_reset.OffsetsWentBackwardsError`,
        ``resume`` forgets the queue's records and writes it. Either way
        ``report(reset)`` is called on the event loop.
        """
        ...

    async def offsets_reset(self, queue: MessageQueue) -> None:
        """Forget, durably, every offset recorded for ``queue``: it starts afresh."""
        ...


@runtime_checkable
class BodyParsingSink(Sink, Protocol):
    """A sink that parses bodies (``body_format = "json"``), checked with ``isinstance``.

    A body it cannot parse is kept raw in its corrupt-record column (or, with
    ``on_bad_body = "fail"``, halts the sink: :class:`rmqk.model.errors.SinkHalted`).
    A composed consumer hands it ``report`` at once, and the sink calls
    ``report(topic, n)`` when ``n`` such bodies of ``topic`` are written, from
    any thread; the consumer counts them in its statistics (the metrics, the
    line ``rmqk run`` stops with). ``topics`` are the consumer's subscribed
    topics: a sink shared by several consumers reports a topic to the first
    that subscribes to it.
    """

    def watch_bad_bodies(
        self, topics: Collection[str], report: Callable[[str, int], None]
    ) -> None: ...
