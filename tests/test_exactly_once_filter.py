"""Exactly once: the per-batch fast path of the group-commit filter keeps its semantics."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.buildahead import Pending
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.offsetranges import OffsetIndex, OffsetRange
from rmqk.plugins.sinks.uncommitted import keep_uncommitted

pytestmark = pytest.mark.timeout(60)

QUEUES = [MessageQueue("T", "broker-a", q) for q in range(3)]


def msgs(queue_id: int, offsets: Sequence[int]) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x", queue_id=queue_id, queue_offset=o) for o in offsets]


# -- exactly once: the per-batch fast path keeps the per-message semantics -------------------


def reference_keep(
    index: OffsetIndex, batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]
) -> tuple[list[tuple[int, list[int]]], int]:
    """Every message looked at: the first of each (queue, offset) that no commit covers."""
    seen: set[tuple[MessageQueue, int]] = set()
    kept: list[tuple[int, list[int]]] = []
    skipped = 0
    for i, (q, ms) in enumerate(batches):
        out = []
        for m in ms:
            key = (q, m.queue_offset)
            if key in seen or index.covers(q.topic, q.broker_name, q.queue_id, m.queue_offset):
                skipped += 1
                continue
            seen.add(key)
            out.append(m.queue_offset)
        if out:
            kept.append((i, out))
    return kept, skipped


batch_strategy = st.tuples(
    st.integers(0, 2),
    st.one_of(
        st.lists(st.integers(0, 60), min_size=1, max_size=12),  # any order, duplicates
        st.builds(lambda a, n: list(range(a, a + n)), st.integers(0, 60), st.integers(1, 12)),
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    batches=st.lists(batch_strategy, min_size=1, max_size=8),
    commits=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 70), st.integers(0, 10)), max_size=4
    ),
)
def test_fast_path_keeps_what_the_per_message_filter_keeps(
    batches: list[tuple[int, list[int]]], commits: list[tuple[int, int, int]]
) -> None:
    index = OffsetIndex()
    for q, first, n in commits:
        index.add(OffsetRange("T", "broker-a", q, first, first + n))
    pairs = [(QUEUES[q], msgs(q, offsets)) for q, offsets in batches]
    kept, skipped = keep_uncommitted(index, pairs)
    got = [(i, [m.queue_offset for m in ms]) for i, _, ms in kept]
    assert (got, skipped) == reference_keep(index, pairs)


def test_fast_path_hands_untouched_batches_on_as_they_are() -> None:
    index = OffsetIndex()
    index.add(OffsetRange("T", "broker-a", 0, 0, 9))
    alone = msgs(1, range(0, 32))
    overlapping = [msgs(2, range(0, 10)), msgs(2, range(9, 12))]
    committed = msgs(0, range(5, 15))
    pairs = [
        (QUEUES[1], alone),
        (QUEUES[2], overlapping[0]),
        (QUEUES[2], overlapping[1]),
        (QUEUES[0], committed),
    ]
    kept, skipped = keep_uncommitted(index, pairs)
    assert kept[0][2] is alone  # no per-message look, no copy
    assert [len(ms) for _, _, ms in kept] == [32, 10, 2, 5]
    assert skipped == 1 + 5


def test_batches_of_other_queues_never_count_as_overlapping() -> None:
    rng = random.Random(7)
    pairs = [(QUEUES[q], msgs(q, range(0, 50))) for q in range(3)]
    rng.shuffle(pairs)
    kept, skipped = keep_uncommitted(OffsetIndex(), pairs)
    assert skipped == 0 and all(k[2] is p[1] for k, p in zip(kept, pairs, strict=True))


# -- exactly once: a commit by another writer while a flush is written --------------------------


class _SharedLogSink(GroupCommitSink):
    """Writers of one in-memory 'output'; ``meddle`` commits for another writer mid-write."""

    def __init__(self, log: list[OffsetRange], rows: list[tuple[int, int]]) -> None:
        super().__init__(FlushTriggers(rows=1_000), target="memory", exactly_once=True)
        self.log = log
        self.rows = rows
        self.read = 0
        self.meddle: list[OffsetRange] = []
        self.attempts = 0

    def committed_ranges(self) -> list[OffsetRange]:
        new, self.read = self.log[self.read :], len(self.log)
        return new

    def write_batch(self, flush: Flush) -> int:
        self.attempts += 1
        if self.meddle:
            # Another writer commits (its rows and ranges) after this flush was filtered.
            for r in self.meddle:
                self.rows.extend((r.queue_id, o) for o in range(r.first, r.last + 1))
            self.log.extend(self.meddle)
            self.meddle = []
        self.claim(flush, self.committed_ranges())
        written = [(q.queue_id, m.queue_offset) for q, ms in flush.batches for m in ms]
        self.rows.extend(written)
        self.log.extend(flush.ranges)
        return len(written)


def _pending(sink: GroupCommitSink, batches: list[tuple[int, list[int]]]) -> list[Pending]:
    loop = asyncio.new_event_loop()
    try:
        return [Pending(loop, sink, QUEUES[q], msgs(q, offs), 0.0) for q, offs in batches]
    finally:
        loop.close()


def test_rows_another_writer_committed_meanwhile_are_written_once() -> None:
    log: list[OffsetRange] = []
    rows: list[tuple[int, int]] = []
    sink = _SharedLogSink(log, rows)
    batches = [(0, list(range(0, 10))), (1, list(range(0, 10))), (0, list(range(10, 20)))]
    # Queue 0's 5..14 went to another writer in a rebalance, which commits them while
    # this flush is written (after it was filtered).
    sink.meddle = [OffsetRange("T", "broker-a", 0, 5, 14)]
    written, skipped = sink._write(_pending(sink, batches))
    assert sink.attempts == 2  # the claim saw the race; the flush was filtered again
    assert (written, skipped) == (20, 10)
    assert sorted(rows) == sorted({(q, o) for q, offs in batches for o in offs})
    assert len(rows) == len(set(rows))
    # Nothing committed meanwhile: one attempt, everything written.
    sink.attempts = 0
    written, skipped = sink._write(_pending(sink, [(2, list(range(5)))]))
    assert (sink.attempts, written, skipped) == (1, 5, 0)
    # Consumed again (a retry): all of it was committed, nothing is written.
    written, skipped = sink._write(_pending(sink, batches))
    assert (written, skipped) == (0, 30)
    assert len(rows) == len(set(rows)) == 35
