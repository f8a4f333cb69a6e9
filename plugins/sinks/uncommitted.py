"""Exactly once: which messages of a flush no commit covers yet, each once.

A flush holds consumed batches from many queues. A message is written if no
committed range covers its offset and no earlier batch of the same flush holds
the same (queue, offset) (a batch consumed again after a rebalance or a retry).
Most batches need no look at their messages: one whose offsets are distinct,
whose span no commit touches and no other batch of the flush on its queue
overlaps is kept whole, so only the rare overlapping batch pays a set lookup
per message.
"""

from __future__ import annotations

from collections.abc import Sequence

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.offsetranges import OffsetIndex

__all__ = ["Span", "keep_uncommitted", "spans_of"]

# (first offset, last offset, offsets all distinct) of one batch.
Span = tuple[int, int, bool]


def spans_of(batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]) -> list[Span]:
    """Per batch, its smallest and largest offset and whether its offsets are distinct."""
    spans: list[Span] = []
    for _, msgs in batches:
        offsets = [m.queue_offset for m in msgs]
        spans.append((min(offsets), max(offsets), len(set(offsets)) == len(offsets)))
    return spans


def _alone(
    batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]], spans: list[Span]
) -> list[bool]:
    """Per batch: True if no other batch of the flush on its queue overlaps its span."""
    by_queue: dict[MessageQueue, list[int]] = {}
    for i, (q, _) in enumerate(batches):
        by_queue.setdefault(q, []).append(i)
    alone = [True] * len(batches)
    for members in by_queue.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda i: spans[i][0])
        # Sorted by first offset, a batch overlaps an earlier one iff one of those ends at
        # or after its first offset, and a later one iff the next one starts at or before
        # its last.
        reach = -1
        for n, i in enumerate(members):
            first, last, _ = spans[i]
            later = n + 1 < len(members) and spans[members[n + 1]][0] <= last
            if (n > 0 and reach >= first) or later:
                alone[i] = False
            reach = max(reach, last)
    return alone


def keep_uncommitted(
    index: OffsetIndex,
    batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]],
    spans: list[Span] | None = None,
) -> tuple[list[tuple[int, MessageQueue, Sequence[MessageExt]]], int]:
    """Per batch (by index) the messages no commit covers, each once; and how many not.

    A batch kept whole is returned as it was given (not copied).
    """
    if spans is None:
        spans = spans_of(batches)
    alone = _alone(batches, spans)
    kept: list[tuple[int, MessageQueue, Sequence[MessageExt]]] = []
    seen: set[tuple[MessageQueue, int]] = set()
    skipped = 0
    for i, (q, msgs) in enumerate(batches):
        first, last, distinct = spans[i]
        check = index.overlaps(q.topic, q.broker_name, q.queue_id, first, last)
        if alone[i] and distinct and not check:
            # No other batch shares an offset with it: nothing to remember in `seen`.
            kept.append((i, q, msgs))
            continue
        out = []
        for m in msgs:
            key = (q, m.queue_offset)
            if key in seen or (
                check and index.covers(q.topic, q.broker_name, q.queue_id, m.queue_offset)
            ):
                skipped += 1
                continue
            seen.add(key)
            out.append(m)
        if out:
            kept.append((i, q, out))
    return kept, skipped
