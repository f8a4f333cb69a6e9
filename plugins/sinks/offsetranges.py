"""Which offsets of which queues a sink has committed, for its exactly-once mode.

A commit records, per consumed batch, the queue and the first and last offset
of that batch (:class:`OffsetRange`). Offsets between the two that the batch
lacks were filtered out by the subscription, so the same subscription skips
them again. :class:`OffsetIndex` answers "is this message already written?"
for the messages a flush is about to write.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import attrs

__all__ = ["RESET_MARK", "OffsetIndex", "OffsetRange", "ranges_of"]


# A range whose first and last are this is no range but a reset mark: every offset
# recorded for its queue before it is void (the queue's offsets went backwards and it
# started afresh, issue 25). Committed like ranges, in order with them.
RESET_MARK = -1


@attrs.frozen
class OffsetRange:
    """Offsets ``first``..``last`` (both included) of one queue, or a reset mark."""

    topic: str
    broker: str
    queue_id: int
    first: int
    last: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker, self.queue_id)

    @property
    def is_reset(self) -> bool:
        return self.first == RESET_MARK and self.last == RESET_MARK

    @classmethod
    def reset_of(cls, topic: str, broker: str, queue_id: int) -> OffsetRange:
        """The mark that voids what was recorded for the queue before it."""
        return cls(topic, broker, queue_id, RESET_MARK, RESET_MARK)


class OffsetIndex:
    """Which offsets of which queues are committed: merged, sorted intervals per queue."""

    def __init__(self) -> None:
        self._starts: dict[tuple[str, str, int], list[int]] = {}
        self._ends: dict[tuple[str, str, int], list[int]] = {}

    def add(self, r: OffsetRange) -> None:
        if r.is_reset:
            self.forget(r.key)
            return
        starts = self._starts.setdefault(r.key, [])
        ends = self._ends.setdefault(r.key, [])
        first, last = r.first, r.last
        # Merge with every interval that overlaps or touches [first, last].
        i = bisect.bisect_left(ends, first - 1)
        j = i
        while j < len(starts) and starts[j] <= last + 1:
            first = min(first, starts[j])
            last = max(last, ends[j])
            j += 1
        starts[i:j] = [first]
        ends[i:j] = [last]

    def forget(self, key: tuple[str, str, int]) -> None:
        """Drop every interval of the queue ``key`` (topic, broker, queue id)."""
        self._starts.pop(key, None)
        self._ends.pop(key, None)

    def last(self, key: tuple[str, str, int]) -> int | None:
        """The highest offset recorded for the queue ``key``, or None."""
        ends = self._ends.get(key)
        return ends[-1] if ends else None

    def copy(self) -> OffsetIndex:
        other = OffsetIndex()
        other._starts = {k: list(v) for k, v in self._starts.items()}
        other._ends = {k: list(v) for k, v in self._ends.items()}
        return other

    def covers(self, topic: str, broker: str, queue_id: int, offset: int) -> bool:
        starts = self._starts.get((topic, broker, queue_id))
        if not starts:
            return False
        i = bisect.bisect_right(starts, offset) - 1
        return i >= 0 and self._ends[(topic, broker, queue_id)][i] >= offset

    def overlaps(self, topic: str, broker: str, queue_id: int, first: int, last: int) -> bool:
        starts = self._starts.get((topic, broker, queue_id))
        if not starts:
            return False
        i = bisect.bisect_right(starts, last) - 1
        return i >= 0 and self._ends[(topic, broker, queue_id)][i] >= first

    def intervals(self, topic: str, broker: str, queue_id: int) -> list[tuple[int, int]]:
        key = (topic, broker, queue_id)
        return list(zip(self._starts.get(key, []), self._ends.get(key, []), strict=True))

    def queues(self) -> list[tuple[str, str, int]]:
        return sorted(self._starts)


def ranges_of(batches: Iterable[tuple[str, str, int, int, int]]) -> tuple[OffsetRange, ...]:
    """Offset ranges from ``(topic, broker, queue_id, first, last)``, touching ones merged."""
    by_queue: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for topic, broker, qid, first, last in batches:
        by_queue.setdefault((topic, broker, qid), []).append((first, last))
    out: list[OffsetRange] = []
    for (topic, broker, qid), spans in sorted(by_queue.items()):
        spans.sort()
        cur_first, cur_last = spans[0]
        for first, last in spans[1:]:
            if first <= cur_last + 1:
                cur_last = max(cur_last, last)
            else:
                out.append(OffsetRange(topic, broker, qid, cur_first, cur_last))
                cur_first, cur_last = first, last
        out.append(OffsetRange(topic, broker, qid, cur_first, cur_last))
    return tuple(out)
