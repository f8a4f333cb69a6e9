"""The interfaces plugins implement for the engine: allocation, offsets, sinks."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from rmqk.message import MessageExt
from rmqk.model import MessageModel, MessageQueue

__all__ = [
    "AllocationStrategy",
    "OffsetStore",
    "OffsetStoreContext",
    "ReadOffsetType",
    "Sink",
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


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


@attrs.frozen
class OffsetStoreContext:
    """What an offset store factory is given for one consumer."""

    group: str
    client_id: str
    message_model: MessageModel
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # The client instance (route lookups and transport) for stores that talk to brokers.
    client: Any = None


class OffsetStore(Protocol):
    """Java's OffsetStore. ``read_offset`` returns -1 when nothing is known."""

    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: set[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]: ...

    async def update_consume_offset_to_broker(
        self, mq: MessageQueue, offset: int, oneway: bool
    ) -> None: ...


class Sink(Protocol):
    """Where a composed consumer delivers its batches.

    ``write`` returns only when the batch is durable in the sink (or raises);
    the consumer acknowledges the batch, and offsets move, only after that. A
    sink that groups many batches into one write (group commit) awaits the flush
    that covers the batch before returning.

    Such a sink may also offer ``submit(queue, messages) -> asyncio.Future``,
    which buffers the batch and returns at once with the future of that flush,
    and a ``window_rows`` attribute, the messages it wants in flight for its
    flushes to fill: a composed consumer then acknowledges each batch when its
    future resolves, without a worker waiting, and widens its flow control to
    that window (see :func:`rmqk.runtime.widen_for_sink`).
    """

    async def start(self) -> None: ...

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None: ...

    async def close(self) -> None: ...
