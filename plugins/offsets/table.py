"""The in-memory offset table both stores keep (Java's ``offsetTable``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from rmqk.model import MessageQueue

__all__ = ["OffsetTable"]


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
