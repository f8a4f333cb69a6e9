"""The in-memory offset table both stores keep (Java's ``offsetTable``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import ClassVar

from rmqk.model import MessageQueue
from rmqk.spi.contracts import ReadOffsetType

__all__ = ["OffsetTable", "TableBackedStore"]


class OffsetTable:
    """MessageQueue -> offset, with Java's update rules.

    A lock guards it because acknowledgements may arrive from the thread pool
    that runs synchronous listeners while the event loop persists.
    """

    def __init__(self) -> None:
        self._offsets: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def update(self, mq: MessageQueue | None, offset: int, increase_only: bool) -> None:
        """OffsetStore.updateOffset: a new queue takes ``offset`` whatever the flag.

        With ``increase_only`` an existing value moves only forward (Java's
        compareAndIncreaseOnly): chunks of one pull finish out of order in
        concurrent mode, and a late small ack must not move the offset back.
        """
        if mq is None:
            return
        with self._lock:
            old = self._offsets.get(mq)
            if old is None or not increase_only or offset > old:
                self._offsets[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        with self._lock:
            return self._offsets.get(mq)

    def remove(self, mq: MessageQueue | None) -> bool:
        """Forget ``mq``; True when it was there."""
        if mq is None:
            return False
        with self._lock:
            return self._offsets.pop(mq, None) is not None

    def put_all(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Overwrite with ``offsets`` (Java's ``putAll`` on load)."""
        with self._lock:
            self._offsets.update(offsets)

    def snapshot(self) -> dict[MessageQueue, int]:
        with self._lock:
            return dict(self._offsets)

    def pick(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The current offsets of those of ``mqs`` the table holds."""
        with self._lock:
            return {mq: self._offsets[mq] for mq in mqs if mq in self._offsets}

    def prune_except(self, keep: Iterable[MessageQueue]) -> list[MessageQueue]:
        """Remove every queue not in ``keep``; returns the removed queues."""
        kept = set(keep)
        with self._lock:
            removed = [mq for mq in self._offsets if mq not in kept]
            for mq in removed:
                del self._offsets[mq]
        return removed

    def clone(self, topic: str | None) -> dict[MessageQueue, int]:
        """cloneOffsetTable: the entries of ``topic``, or all when it is blank."""
        blank = topic is None or not topic.strip()
        with self._lock:
            return {mq: off for mq, off in self._offsets.items() if blank or mq.topic == topic}

    def __len__(self) -> int:
        with self._lock:
            return len(self._offsets)

    def __contains__(self, mq: object) -> bool:
        with self._lock:
            return mq in self._offsets


class TableBackedStore:
    """What both stores do with their in-memory table; a store says where offsets persist."""

    # The store's own logger: operators filter its lines by the store's module.
    log: ClassVar[logging.Logger]
    group: str
    _table: OffsetTable

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self._table.update(mq, offset, increase_only)

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            cached = self._table.get(mq)
            if cached is not None:
                return cached
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        offset = await self._read_from_store(mq)
        if offset >= 0:
            # The cache fill is not increase-only: the store's value wins (resetOffset, rebalance).
            self._table.update(mq, offset, False)
        return offset

    async def _read_from_store(self, mq: MessageQueue) -> int:
        """The stored offset of ``mq``: -1 when there is none, -2 when the store cannot tell."""
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        if self._table.remove(mq):
            self.log.info(
                "remove unnecessary messageQueue offset. group=%s, mq=%s, offsetTableSize=%d",
                self.group, mq, len(self._table),
            )

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        return self._table.clone(topic)
