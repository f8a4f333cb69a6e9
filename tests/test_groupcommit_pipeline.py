"""The group-commit base's pipeline: parts built ahead, flush order, failures.

No broker and no Spark: a sink whose parts are lists of (queue id, offset) rows
and whose writes can be held, failed, or checked against the messages they cover.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink

pytestmark = pytest.mark.timeout(60)

QUEUES = [MessageQueue("T", "broker-a", q) for q in range(3)]


def msgs(queue_id: int, offsets: Sequence[int]) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x", queue_id=queue_id, queue_offset=o) for o in offsets]


class Rows:
    """A part: (queue id, offset) per row."""

    def __init__(self, rows: list[tuple[int, int]]) -> None:
        self.rows = rows

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def slice(self, offset: int = 0, length: int | None = None) -> Rows:
        end = len(self.rows) if length is None else offset + length
        return Rows(self.rows[offset:end])


class PipelineSink(GroupCommitSink):
    sink_name: ClassVar[str] = "test-pipeline"
    part_rows: ClassVar[int] = 8

    def __init__(self, rows: int, seconds: float = 60.0) -> None:
        super().__init__(FlushTriggers(rows=rows, seconds=seconds), target="memory")
        self.built: list[int] = []  # rows of each build_part call
        self.written: list[list[tuple[int, int]]] = []
        self.held: dict[int, threading.Event] = {}  # flush number -> released when set
        self.fail: set[int] = set()  # flush numbers whose write raises
        self.poison: int | None = None  # an offset build_part refuses
        self.writes = 0

    def build_part(self, batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]) -> Rows:
        rows = [(q.queue_id, m.queue_offset) for q, ms in batches for m in ms]
        if self.poison is not None and any(o == self.poison for _, o in rows):
            raise ValueError("poisoned")
        self.built.append(len(rows))
        return Rows(rows)

    def write_batch(self, flush: Flush) -> int:
        self.writes += 1
        number = self.writes
        gate = self.held.get(number)
        if gate is not None:
            assert gate.wait(30)
        assert flush.prepared is not None
        rows = [r for part in flush.prepared for r in part.rows]
        # The parts hold exactly the flush's messages, in order.
        assert rows == [(q.queue_id, m.queue_offset) for q, ms in flush.batches for m in ms]
        if number in self.fail:
            raise OSError(f"flush {number} refused")
        self.written.append(rows)
        return len(rows)


async def wait_until(check: Any, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_parts_are_built_as_batches_arrive_and_sliced_at_flush_boundaries() -> None:
    sink = PipelineSink(rows=20)
    await sink.start()
    try:
        futures = [
            sink.submit(QUEUES[i % 3], msgs(i % 3, range(i * 3, i * 3 + 3))) for i in range(6)
        ]
        await asyncio.sleep(0.05)
        # 18 rows waiting: below the flush, but two parts of 8 (3+3+3 rows) are built.
        assert sink.built == [9, 9] and sink.stats.flushes == 0
        assert not any(f.done() for f in futures)
        # Three more batches: the flush takes batches up to 20 rows (seven), cutting a part.
        futures += [
            sink.submit(QUEUES[i % 3], msgs(i % 3, range(i * 3, i * 3 + 3))) for i in range(6, 9)
        ]
        await asyncio.wait_for(asyncio.gather(*futures[:7]), 10)
        assert sink.stats.flushes == 1 and sink.written[0] == [
            (i % 3, o) for i in range(7) for o in range(i * 3, i * 3 + 3)
        ]
        assert not any(f.done() for f in futures[7:])
    finally:
        await sink.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert [len(w) for w in sink.written] == [21, 6]


async def test_withdrawn_batches_and_timer_flushes_take_only_their_rows() -> None:
    sink = PipelineSink(rows=1000, seconds=0.2)
    await sink.start()
    try:
        kept = [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(5)]
        withdrawn = sink.submit(QUEUES[1], msgs(1, range(100, 105)))
        kept.append(sink.submit(QUEUES[0], msgs(0, range(25, 30))))
        await asyncio.sleep(0)  # the builder built the first parts, the withdrawn one among them
        withdrawn.cancel()
        await asyncio.wait_for(asyncio.gather(*kept), 10)
    finally:
        await sink.close()
    assert sink.written == [[(0, o) for o in range(30)]]


async def test_futures_resolve_only_after_the_flush_covering_them_is_written() -> None:
    sink = PipelineSink(rows=10)
    first_gate = threading.Event()
    sink.held[1] = first_gate
    await sink.start()
    try:
        first = [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(2)]
        await wait_until(lambda: sink.writes == 1)
        # The next flush fills, and is built, while the first is being written.
        second = [sink.submit(QUEUES[1], msgs(1, range(i * 5, i * 5 + 5))) for i in range(2)]
        await asyncio.sleep(0.1)
        assert sum(sink.built) == 20
        assert not any(f.done() for f in first + second), "nothing written yet"
        assert sink.writes == 1, "writes stay one at a time"
        first_gate.set()
        await asyncio.wait_for(asyncio.gather(*first), 10)
        await asyncio.wait_for(asyncio.gather(*second), 10)
    finally:
        await sink.close()
    assert sink.written == [[(0, o) for o in range(10)], [(1, o) for o in range(10)]]


async def test_a_failure_mid_pipeline_fails_exactly_the_batches_of_that_flush() -> None:
    sink = PipelineSink(rows=10)
    sink.fail.add(2)
    gate = threading.Event()
    sink.held[1] = gate
    await sink.start()
    try:
        flushes = [
            [sink.submit(QUEUES[f], msgs(f, range(i * 5, i * 5 + 5))) for i in range(2)]
            for f in range(3)
        ]
        gate.set()
        results = await asyncio.wait_for(
            asyncio.gather(*(f for fl in flushes for f in fl), return_exceptions=True), 10
        )
    finally:
        await sink.close()
    assert [isinstance(r, OSError) for r in results] == [False] * 2 + [True] * 2 + [False] * 2
    assert sink.written == [[(0, o) for o in range(10)], [(2, o) for o in range(10)]]
    assert sink.stats.failed_flushes == 1 and sink.stats.flushes == 2


async def test_a_batch_that_fails_to_build_fails_its_flush_only() -> None:
    sink = PipelineSink(rows=10)
    sink.poison = 7
    await sink.start()
    try:
        bad = [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(2)]
        await asyncio.sleep(0.05)
        good = [sink.submit(QUEUES[1], msgs(1, range(i * 5, i * 5 + 5))) for i in range(2, 4)]
        results = await asyncio.wait_for(asyncio.gather(*bad, *good, return_exceptions=True), 10)
    finally:
        await sink.close()
    assert [isinstance(r, ValueError) for r in results] == [True, True, False, False]
    assert sink.written == [[(1, o) for o in range(10, 20)]]


async def test_timer_flushes_due_while_a_write_runs_take_what_arrives_until_it_ends() -> None:
    sink = PipelineSink(rows=1000, seconds=0.1)
    gate = threading.Event()
    sink.held[1] = gate
    await sink.start()
    try:
        first = sink.submit(QUEUES[0], msgs(0, range(0, 5)))
        await wait_until(lambda: sink.writes == 1)
        later = []
        for i in range(1, 4):
            later.append(sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))))
            await asyncio.sleep(0.25)  # each is past the timer while the first write runs
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *later), 10)
    finally:
        await sink.close()
    # One flush for all that arrived during the slow write, not one per timer tick.
    assert sink.written == [[(0, o) for o in range(5)], [(0, o) for o in range(5, 20)]]


async def test_a_full_flush_does_not_wait_for_the_write_before_it() -> None:
    sink = PipelineSink(rows=10, seconds=60)
    gate = threading.Event()
    sink.held[1] = gate
    await sink.start()
    try:
        futures = [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(2)]
        await wait_until(lambda: sink.writes == 1)
        futures += [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(2, 5)]
        await asyncio.sleep(0.1)
        # The second flush (10 rows) was taken and assembled; the fifth batch waits.
        assert sink._rows == 5
        gate.set()
        await asyncio.wait_for(asyncio.gather(*futures[:4]), 10)
        assert not futures[4].done()
    finally:
        await sink.close()
    assert [len(w) for w in sink.written] == [10, 10, 5]


async def test_rows_that_filled_with_the_writer_idle_or_under_a_part_keep_the_timer() -> None:
    # seconds=2: a lull would be 0.5 s without new rows.
    sink = PipelineSink(rows=1000, seconds=2.0)
    await sink.start()
    try:
        loop = asyncio.get_running_loop()
        for rows in (10, 5):  # a part's worth with no write before it; then under a part
            began = loop.time()
            batch = [sink.submit(QUEUES[0], msgs(0, range(i, i + 5))) for i in range(0, rows, 5)]
            await asyncio.sleep(1.0)
            assert not any(f.done() for f in batch)
            await asyncio.wait_for(asyncio.gather(*batch), 10)
            assert loop.time() - began >= 1.9
    finally:
        await sink.close()
    assert [len(w) for w in sink.written] == [10, 5]


async def test_rows_that_arrived_during_a_write_and_stopped_go_when_it_ends() -> None:
    # The end of a backlog: its last rows arrive while the previous flush is written.
    sink = PipelineSink(rows=10, seconds=4.0)
    gate = threading.Event()
    sink.held[1] = gate
    await sink.start()
    try:
        first = [sink.submit(QUEUES[0], msgs(0, range(i * 5, i * 5 + 5))) for i in range(2)]
        await wait_until(lambda: sink.writes == 1)
        last = [sink.submit(QUEUES[1], msgs(1, range(i * 3, i * 3 + 3))) for i in range(3)]
        await asyncio.sleep(1.2)  # quiet for more than seconds / 4
        loop = asyncio.get_running_loop()
        released = loop.time()
        gate.set()
        await asyncio.wait_for(asyncio.gather(*first, *last), 10)
        # Not the timer's 4 s from the first of them (2.8 s after the release).
        assert loop.time() - released < 1.5
    finally:
        await sink.close()
    assert [len(w) for w in sink.written] == [10, 9]


def pulled(queue_id: int, offsets: Sequence[int], end: int) -> list[MessageExt]:
    """Messages as a pull stamps them: the queue's max offset (``end``) at the pull."""
    out = msgs(queue_id, offsets)
    for m in out:
        m.set_queue_bounds((0, end))
    return out


async def test_the_end_of_a_backlog_goes_at_once_not_at_the_timer() -> None:
    sink = PipelineSink(rows=1000, seconds=30.0)
    await sink.start()
    try:
        # Two queues pulled far behind their ends (5,000 and 3,000 messages in the broker).
        early = [
            sink.submit(QUEUES[0], pulled(0, range(0, 10), 5000)),
            sink.submit(QUEUES[1], pulled(1, range(0, 5), 3000)),
            # Queue 0 reaches its end; queue 1 is still behind: nothing is due.
            sink.submit(QUEUES[0], pulled(0, range(4990, 5000), 5000)),
            # A few short of its end: still the same backlog.
            sink.submit(QUEUES[1], pulled(1, range(2990, 2995), 3000)),
        ]
        await asyncio.sleep(0.5)
        assert sink.writes == 0 and not any(f.done() for f in early)
        loop = asyncio.get_running_loop()
        began = loop.time()
        last = sink.submit(QUEUES[1], pulled(1, range(2995, 3000), 3000))
        await asyncio.wait_for(asyncio.gather(*early, last), 10)
        # Not the timer's 30 s: the backlog's end made the buffer due.
        assert loop.time() - began < 5
        assert [len(w) for w in sink.written] == [35]
        # Caught up, a trickle keeps the timer: each batch reaches its queue's end.
        trickle = sink.submit(QUEUES[0], pulled(0, range(5000, 5001), 5001))
        await asyncio.sleep(0.5)
        assert not trickle.done() and sink.writes == 1
    finally:
        await sink.close()
    assert [len(w) for w in sink.written] == [35, 1]


async def test_a_consumer_a_few_pulls_behind_now_and_then_keeps_the_timer() -> None:
    # Keeping up with the producers: some pulls leave messages behind, none a backlog.
    sink = PipelineSink(rows=1000, seconds=1.0)
    await sink.start()
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        batches = [
            sink.submit(QUEUES[0], pulled(0, range(0, 32), 100)),
            sink.submit(QUEUES[0], pulled(0, range(32, 64), 64)),
        ]
        await asyncio.sleep(0.5)
        assert not any(f.done() for f in batches)
        await asyncio.wait_for(asyncio.gather(*batches), 10)
        assert loop.time() - began >= 0.9
    finally:
        await sink.close()
    assert [len(w) for w in sink.written] == [64]


async def test_a_withdrawn_queue_no_longer_holds_the_end_of_a_backlog_up() -> None:
    sink = PipelineSink(rows=1000, seconds=30.0)
    await sink.start()
    try:
        gone = sink.submit(QUEUES[1], pulled(1, range(0, 5), 5000))
        kept = sink.submit(QUEUES[0], pulled(0, range(0, 5), 2000))
        gone.cancel()  # queue 1 dropped (a rebalance, a reset) while behind
        end = sink.submit(QUEUES[0], pulled(0, range(1995, 2000), 2000))
        await asyncio.wait_for(asyncio.gather(kept, end), 5)
    finally:
        await sink.close()
    assert sink.written == [[(0, o) for o in (*range(5), *range(1995, 2000))]]


async def test_batches_without_the_queue_end_keep_the_timer() -> None:
    sink = PipelineSink(rows=1000, seconds=1.0)
    await sink.start()
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        batch = sink.submit(QUEUES[0], msgs(0, range(0, 5)))  # no max offset stamped
        await asyncio.sleep(0.5)
        assert not batch.done()
        await asyncio.wait_for(batch, 10)
        assert loop.time() - began >= 0.9
    finally:
        await sink.close()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_sink_closed_at_once_or_while_its_flusher_waits_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="rmqk")
    at_once = PipelineSink(rows=4)
    await at_once.start()
    await at_once.close()
    waiting = PipelineSink(rows=4)
    await waiting.start()
    await asyncio.sleep(0.05)  # the flusher is waiting for a batch
    await waiting.close()
    assert _errors(caplog) == []


def test_a_flusher_cancelled_by_the_loops_teardown_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run refused before it could close its sink: asyncio.run cancels the flusher."""
    caplog.set_level(logging.DEBUG, logger="rmqk")
    pending: list[asyncio.Future[None]] = []

    async def refused() -> None:
        sink = PipelineSink(rows=4)
        await sink.start()
        pending.append(sink.submit(QUEUES[0], msgs(0, [0])))

    asyncio.run(refused())
    assert _errors(caplog) == []
    # What waited is failed, not left hanging.
    assert isinstance(pending[0].exception(), RuntimeError)
    said = [r.getMessage() for r in caplog.records]
    assert any("flusher" in line and "cancelled" in line for line in said)
