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

__all__ = ["OffsetIndex", "OffsetRange", "ranges_of"]


@attrs.frozen
class OffsetRange:
    """Offsets ``first``..``last`` (both included) of one queue."""

    topic: str
    broker: str
    queue_id: int
    first: int
    last: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker, self.queue_id)


class OffsetIndex:
    """Which offsets of which queues are committed: merged, sorted intervals per queue."""

    def __init__(self) -> None:
        self._starts: dict[tuple[str, str, int], list[int]] = {}
        self._ends: dict[tuple[str, str, int], list[int]] = {}

    def add(self, r: OffsetRange) -> None:
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
