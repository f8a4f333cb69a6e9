"""The group-commit base a sink that writes rows builds on.

A sink subclasses :class:`GroupCommitSink` and implements one method,
:meth:`~GroupCommitSink.write_batch`, which writes a :class:`Flush` (many
consumed batches, from many queues) durably. The base does the rest:

* ``submit(queue, messages)`` buffers a batch and returns at once the future of
  the flush that covers it; ``write`` awaits that future. The future resolves
  (and the consumer acknowledges, and offsets move) only once the flush has
  been written; if the write fails, every batch in it fails and the consumer
  retries them. Cancelling the future withdraws a batch no flush has taken yet.
* A flush is due when the buffer holds ``rows`` rows or ``bytes`` body bytes
  (:class:`FlushTriggers`), or its oldest batch is ``seconds`` old, whichever
  comes first; it takes batches up to ``rows`` / ``bytes`` and the rest is the
  next flush. With ``part_rows``, a part or more that waited on a write and
  stopped growing (a quarter of ``seconds``) goes when the write ends. The end
  of a backlog goes at once: when the last queue pulled more than
  :data:`BACKLOG_BEHIND` messages behind its end (the max offset stamped at the
  pull) delivers a batch that reaches it, what is buffered is due, without
  waiting for the timer.
  Writes run in a worker thread, one at a time, while the event loop keeps
  buffering.
* A sink that turns batches into something to write (Arrow columns) sets
  ``part_rows`` and implements :meth:`~GroupCommitSink.build_part`: the base
  builds parts of about ``part_rows`` rows on the event loop while batches
  arrive, so a flush finds most of its rows built and is handed to the writer
  at once; the next flush fills (and is built) while the previous one is
  written.
* With ``exactly_once`` the base skips the messages already committed and hands
  the flush its offset ranges (:attr:`Flush.ranges`); the sink commits those
  ranges in the same atomic step as the rows, and reads them back with
  :meth:`~GroupCommitSink.committed_ranges`. A crash at any moment then neither
  loses a message (it was not acknowledged, so it comes again) nor writes one
  twice (its offset is committed, so it is skipped).
* Exactly once, a queue whose offsets went backwards (a broker rebuilt empty,
  a topic created again: issue 25) would have its new messages skipped as
  committed. The base notices it (a batch's queue max offset, stamped at the
  pull, not above the highest offset committed for the queue) and follows the
  consumer's ``on_offsets_reset`` (:meth:`~GroupCommitSink.watch_offsets`):
  ``fail`` fails the flush with :class:`~rmqk.model.offsets_reset.OffsetsWentBackwardsError`,
  ``resume`` commits a reset mark for the queue
  (:meth:`~rmqk.plugins.sinks.offsetranges.OffsetRange.reset_of`) with the rows.
  A consumer that starts a queue afresh itself first awaits
  :meth:`~GroupCommitSink.offsets_reset`, which commits the mark alone.

A composed consumer (``rmqk run``) delivers with ``submit``, so no consume
worker waits on a flush, and widens its flow control to ``window_rows``: two
flushes' worth, one being written while the next fills (see
:class:`rmqk.spi.contracts.BufferedSink`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar

import attrs

from rmqk.model import MessageQueue
from rmqk.model.errors import SinkHalted
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsReset, OffsetsWentBackwardsError
from rmqk.plugins.sinks.buildahead import Part, PartBuilder, Pending
from rmqk.plugins.sinks.offsetranges import OffsetIndex, OffsetRange, ranges_of
from rmqk.plugins.sinks.uncommitted import keep_uncommitted, spans_of

__all__ = ["CommitRaced", "Flush", "FlushStats", "FlushTriggers", "GroupCommitSink", "Part"]

log = logging.getLogger("rmqk.plugins.sinks.groupcommit")

# A flush whose commit loses a race with another writer is re-filtered and written again
# this often.
_COMMIT_ATTEMPTS = 5
# A queue holds a backlog while a batch was pulled with more than this many messages behind
# it; a consumer that keeps up, a few pulls behind now and then, does not count (its
# flushes keep the timer instead of one at each catch-up).
BACKLOG_BEHIND = 1024


@attrs.frozen
class FlushTriggers:
    """When a flush is due. ``rows`` or ``bytes`` of 0 set no limit of that kind."""

    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0


@attrs.frozen
class Flush:
    """What one call of :meth:`GroupCommitSink.write_batch` writes."""

    # (queue, messages) per consumed batch; with exactly_once each message once and
    # none already committed.
    batches: tuple[tuple[MessageQueue, Sequence[MessageExt]], ...]
    # exactly_once only: the offsets to commit together with the rows.
    ranges: tuple[OffsetRange, ...] = ()
    # With part_rows: the parts build_part made of these batches, their rows in order.
    prepared: list[Any] | None = None

    @property
    def rows(self) -> int:
        return sum(len(messages) for _, messages in self.batches)


class CommitRaced(Exception):
    """Another writer committed some of a flush's messages while it was being written."""

    def __init__(self, rows: int) -> None:
        super().__init__(f"{rows} rows were committed by another writer meanwhile")
        self.rows = rows


@attrs.define
class FlushStats:
    """What a writer has done, for reports and tests."""

    flushes: int = 0
    rows_written: int = 0
    rows_skipped: int = 0
    batches: int = 0
    failed_flushes: int = 0
    seconds_writing: float = 0.0
    last_flush_rows: int = 0
    first_write_at: float | None = None
    last_flush_at: float | None = None


class GroupCommitSink(abc.ABC):
    """Buffering, flush triggers, per-batch futures and exactly-once filtering for a sink."""

    # The sink's registered name, for log lines and errors.
    sink_name: ClassVar[str] = "group-commit"
    # Non-zero: build_part builds parts of about this many rows on the event loop as
    # batches arrive, and the next flush fills while the previous one is written. With
    # exactly_once only the building overlaps: writes (filter, commit) stay one at a time.
    part_rows: ClassVar[int] = 0

    def __init__(
        self,
        triggers: FlushTriggers,
        *,
        target: str,
        exactly_once: bool = False,
        stats: FlushStats | None = None,
    ) -> None:
        self.triggers = triggers
        self.target = target
        self.exactly_once = exactly_once
        self.stats = stats if stats is not None else FlushStats()
        self._max_rows = triggers.rows or 2**62
        self._max_bytes = triggers.bytes or 2**62
        # An ordered set: a cancelled batch leaves it in O(1).
        self._pending: dict[Pending, None] = {}
        self._rows = 0
        self._bytes = 0
        self._first_at = 0.0
        self._last_write_at = 0.0
        self._hinted = False
        self._starved = 0
        self._kick = asyncio.Event()
        # Queues pulled far behind their end (BACKLOG_BEHIND) and not caught up since: while
        # any is, a backlog is being consumed; the batch that leaves none is its end
        # (_track_backlog).
        self._lagging: set[MessageQueue] = set()
        self._has_data = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._started = False
        self._start_lock = asyncio.Lock()
        self._index = OffsetIndex()
        # Set once a write raised SinkHalted: every later flush fails with it unwritten,
        # so nothing after the refused message is acknowledged while the consumer stops.
        self._halted: SinkHalted | None = None
        # Offsets gone backwards (issue 25): the consumer's on_offsets_reset, and how to
        # tell the consumer (from the writer thread, through the loop).
        self._offsets_policy = "fail"
        self._report_reset: Callable[[OffsetsReset], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One exactly-once commit at a time: flushes, and reset marks a consumer asks for.
        self._commit_lock = threading.Lock()
        self._parts = (
            PartBuilder(self.build_part, self.part_rows, f"rmqk-{self.sink_name}-build {target}")
            if self.part_rows
            else None
        )

    # -- what a sink implements ------------------------------------------------------

    @abc.abstractmethod
    def write_batch(self, flush: Flush) -> int:
        """Write ``flush`` durably and return the rows written; runs in a worker thread.

        Raising fails every batch of the flush (the consumer retries them). With
        ``exactly_once``, commit ``flush.ranges`` in the same atomic step as the
        rows, and call :meth:`claim` just before, holding whatever makes that step
        exclusive among writers.
        """

    def committed_ranges(self) -> Iterable[OffsetRange]:
        """Exactly once: the ranges committed since the last call (all, on the first).

        Runs in a worker thread before each flush, so commits by other writers
        of the same output (other processes) are seen too.
        """
        raise NotImplementedError(f"the {self.sink_name} sink has no exactly-once mode")

    def open_output(self) -> None:
        """Open what the writes need (worker thread, once, at start)."""
        return None

    def close_output(self) -> None:
        """Release it (worker thread, once, after the last flush)."""
        return None

    def build_part(self, batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]) -> Part:
        """With ``part_rows``: what ``write_batch`` writes for ``batches`` (on the event loop).

        One row per message, in order: a flush's rows are slices of parts. Keep it
        to a few tens of milliseconds for ``part_rows`` rows: the loop waits meanwhile.
        Raising fails the flush that holds these batches (they are built again then).
        """
        raise NotImplementedError(f"the {self.sink_name} sink builds no parts")

    # -- what a sink calls -----------------------------------------------------------

    def claim(self, flush: Flush, committed_meanwhile: Iterable[OffsetRange]) -> None:
        """Raise :class:`CommitRaced` if ``committed_meanwhile`` covers rows of ``flush``.

        Exactly once: called by ``write_batch`` right before its commit, with the
        ranges committed since the last look, read under the lock that makes the
        commit exclusive. The base then filters the flush again and retries.
        """
        if not self._absorb(committed_meanwhile):
            # The index the flush was filtered against (writes are one at a time, and
            # only they absorb): nothing in it can have been committed meanwhile.
            return
        _, raced = keep_uncommitted(self._index, flush.batches)
        if raced:
            raise CommitRaced(raced)

    # -- offsets that went backwards (issue 25) ------------------------------------------

    def watch_offsets(self, policy: str, report: Callable[[OffsetsReset], None]) -> None:
        """Follow ``policy`` (``fail`` or ``resume``) for a queue whose offsets went backwards.

        ``report(reset)`` is called on the event loop for each one found. Without
        this call the policy is ``fail``: nothing is ever skipped silently.
        """
        if policy not in ("fail", "resume"):
            raise ValueError(f"on_offsets_reset must be fail or resume, got {policy!r}")
        self._offsets_policy = policy
        self._report_reset = report

    async def offsets_reset(self, queue: MessageQueue) -> None:
        """Forget, durably, every offset committed for ``queue``: it starts afresh.

        Batches of the queue still buffered (pulled before the reset) are
        withdrawn; a flush already writing some finishes first. Exactly once
        only; otherwise there is nothing recorded to forget.
        """
        if not self.exactly_once:
            return
        for entry in [e for e in self._pending if e.queue == queue]:
            entry.cancel()
        if not self._started:
            await self.start()
        await asyncio.to_thread(self._commit_reset, queue)

    def _commit_reset(self, queue: MessageQueue) -> None:
        mark = OffsetRange.reset_of(queue.topic, queue.broker_name, queue.queue_id)
        with self._commit_lock:
            self._absorb(self.committed_ranges())
            self.write_batch(Flush((), (mark,)))
            self._absorb((mark,))
        log.warning(
            "%s sink: forgot the offsets committed for %s in %s, which starts afresh",
            self.sink_name,
            queue,
            self.target,
        )

    def _went_backwards(
        self, pairs: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]
    ) -> list[OffsetsReset]:
        """The queues of ``pairs`` whose max offset at the pull is not above the highest
        offset committed for them: their offsets went backwards (a healthy queue's max
        offset only grows, and a committed offset was below it)."""
        found: dict[tuple[str, str, int], OffsetsReset] = {}
        for q, msgs in pairs:
            key = (q.topic, q.broker_name, q.queue_id)
            if key in found or not msgs:
                continue
            last = self._index.last(key)
            if last is None:
                continue
            current = msgs[-1].queue_max_offset()
            if current is None or current > last:
                continue
            found[key] = OffsetsReset(
                q.topic,
                q.broker_name,
                q.queue_id,
                last + 1,
                current,
                f"the {self.sink_name} sink's commit records in {self.target}",
                first=min(m.queue_offset for m in msgs),
            )
        return list(found.values())

    def _tell(self, reset: OffsetsReset) -> None:
        report, loop = self._report_reset, self._loop
        if report is None or loop is None:
            return
        loop.call_soon_threadsafe(report, reset)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def window_rows(self) -> int:
        """Rows a consumer should keep in flight: one flush being written, the next filling.

        Two flushes of ``rows``; with smaller windows flushes wait for the timer.
        ``bytes`` needs no rows of its own: with large bodies it is reached first.
        0 (no preference) when flushes have no row limit.
        """
        return 2 * self.triggers.rows

    async def start(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            await asyncio.to_thread(self.open_output)
            self._loop = asyncio.get_running_loop()
            self._closing = False
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_loop(), name=f"rmqk-{self.sink_name}-flush {self.target}"
            )
            self._flusher.add_done_callback(self._flusher_done)
            self._started = True

    def _flusher_done(self, task: asyncio.Task[None]) -> None:
        error: BaseException | None = (
            asyncio.CancelledError() if task.cancelled() else task.exception()
        )
        if error is None:
            return
        # Nothing will flush any more: fail what waits instead of leaving it hanging.
        if task.cancelled():
            # The loop's teardown cancels a flusher whose sink was never closed (a run
            # that stopped before it could close it): no write failed, nothing to alarm.
            log.debug("%s sink: the flusher of %s was cancelled", self.sink_name, self.target)
        else:
            log.error("%s sink: the flusher of %s stopped: %r", self.sink_name, self.target, error)
        self._closing = True
        pending, self._pending = list(self._pending), {}
        for entry in pending:
            if not entry.done():
                entry.set_exception(
                    RuntimeError(
                        f"the {self.sink_name} sink writing {self.target} stopped: {error}"
                    )
                )

    async def close(self) -> None:
        if not self._started:
            return
        self._closing = True
        self._kick.set()
        self._has_data.set()
        if self._flusher is not None:
            # A flusher that died has been logged by _flusher_done.
            with contextlib.suppress(Exception):
                await self._flusher
        await asyncio.to_thread(self.close_output)
        self._started = False

    # -- buffering ---------------------------------------------------------------------

    def submit(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> asyncio.Future[None]:
        """Buffer a batch and return at once the future of the flush that covers it.

        The future resolves when that flush has been written and fails with its
        error (then retry the batch); cancelling it withdraws the batch if no
        flush has taken it yet. Needs a running event loop.
        """
        if not self._started:
            return asyncio.ensure_future(self.write(queue, messages))
        loop = asyncio.get_running_loop()
        if not messages:
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        return self._submit(loop, queue, messages)

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        """Buffer a batch and wait for the flush that covers it (``await submit``)."""
        if not messages:
            return
        if not self._started:
            await self.start()
        entry = self._submit(asyncio.get_running_loop(), queue, messages)
        try:
            await asyncio.shield(entry)
        except asyncio.CancelledError:
            # A consumer shutting down gave up on this batch: do not write it if the
            # flush has not taken it yet (it will be consumed again).
            self._withdraw(entry)
            entry.cancel()
            raise

    def _submit(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: MessageQueue,
        messages: Sequence[MessageExt],
    ) -> Pending:
        if self._closing:
            raise RuntimeError(f"the {self.sink_name} sink writing {self.target} is closed")
        now = time.monotonic()
        entry = Pending(loop, self, queue, messages, now)
        if self.stats.first_write_at is None:
            self.stats.first_write_at = now
        if not self._pending:
            self._first_at = now
        self._pending[entry] = None
        self._last_write_at = now
        self._rows += len(messages)
        self._bytes += entry.bytes
        self._has_data.set()
        if self._rows >= self._max_rows or self._bytes >= self._max_bytes:
            self._kick.set()
        self._track_backlog(queue, messages)
        if self._parts is not None:
            self._parts.added(entry, loop)
        return entry

    def _track_backlog(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        """Make the buffer due at once when a backlog has just been consumed to its end.

        A batch pulled more than :data:`BACKLOG_BEHIND` messages short of its
        queue's max offset at the pull marks the queue as holding a backlog; one
        that reaches the max offset clears it. When the last such queue catches up,
        nothing more is pending on the broker: the last rows of the backlog go now
        instead of after ``seconds``. A trickle, or a consumer a few pulls behind
        now and then, keeps the timer. Batches without the max offset (pulled by
        other means) change nothing.
        """
        last = messages[-1]
        end = last.queue_max_offset()
        if end is None:
            return
        behind = end - (last.queue_offset + 1)
        if behind > BACKLOG_BEHIND:
            self._lagging.add(queue)
        elif behind <= 0 and self._lagging:
            self._lagging.discard(queue)
            if not self._lagging:
                self._kick.set()

    def _withdraw(self, entry: Pending) -> None:
        """Take a cancelled batch out of the buffer if no flush has taken it yet.

        Called by ``entry.cancel()``, at once, not from a done callback.
        """
        # A queue reset or given up: it no longer holds a backlog up.
        self._lagging.discard(entry.queue)
        if self._pending.pop(entry, False) is None:
            self._rows -= len(entry.messages)
            self._bytes -= entry.bytes
            if self._parts is not None:
                self._parts.left(entry)

    # -- flushing ----------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        # With part_rows, flushes overlap by one stage: the next one fills and is built
        # while the previous one is written. Each settles only its own batches, when
        # its own write is done (offsets never pass a batch not acknowledged).
        writing: asyncio.Task[None] | None = None
        try:
            while True:
                batch = await self._next_batch(writing)
                if batch is None:
                    return
                started = time.monotonic()
                if self._parts is None:
                    await self._settle(batch, started, asyncio.to_thread(self._write, batch))
                    continue
                try:
                    parts = await self._parts.assemble(batch)
                except BaseException as exc:
                    self._failed(batch, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                if writing is not None:
                    await writing
                # Exactly once still writes (filters, commits) one flush at a time: only
                # the building overlaps.
                write = (
                    asyncio.to_thread(self._write, batch, parts)
                    if self.exactly_once
                    else asyncio.to_thread(
                        self._write_prepared,
                        Flush(tuple((e.queue, e.messages) for e in batch), prepared=parts),
                    )
                )
                writing = asyncio.get_running_loop().create_task(
                    self._settle(batch, started, write),
                    name=f"rmqk-{self.sink_name}-write {self.target}",
                )
        finally:
            if writing is not None:
                await writing

    async def _next_batch(self, busy: asyncio.Task[None] | None = None) -> list[Pending] | None:
        """Wait for the next flush to be due and take its batches; None once closed and empty.

        A flush takes batches up to ``rows`` rows or ``bytes`` bytes (at least one):
        what arrived beyond that is the next flush, due at once. One due by the timer
        while ``busy`` (the previous flush's write) runs is taken when that ends (or
        fills up): the rows arriving meanwhile join it instead of waiting for a flush
        of their own, so a writer slower than the consumer gets fewer, larger flushes.
        """
        while True:
            if not self._pending:
                if self._closing:
                    return None
                self._has_data.clear()
                await self._has_data.wait()
                continue
            delay = self._first_at + self.triggers.seconds - time.monotonic()
            if delay > 0 and not self._kick.is_set() and not self._closing:
                await self._until_due(delay, busy)
            if busy is not None and not busy.done() and not self._kick.is_set():
                kicked = asyncio.ensure_future(self._kick.wait())
                try:
                    await asyncio.wait((busy, kicked), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    kicked.cancel()
            if self._kick.is_set():
                self._starved = 0
            else:
                self._hint_when_starved()
            self._kick.clear()
            batch: list[Pending] = []
            rows = size = 0
            for entry in self._pending:
                if batch and (rows >= self._max_rows or size >= self._max_bytes):
                    break
                batch.append(entry)
                rows += len(entry.messages)
                size += entry.bytes
            for entry in batch:
                del self._pending[entry]
                if self._parts is not None:
                    self._parts.left(entry)
            self._rows -= rows
            self._bytes -= size
            if self._pending:
                self._first_at = next(iter(self._pending)).at
                if self._rows >= self._max_rows or self._bytes >= self._max_bytes:
                    self._kick.set()
            if batch:
                return batch

    async def _until_due(self, delay: float, busy: asyncio.Task[None] | None) -> None:
        """Wait ``delay`` (the timer), or less if kicked or if the buffer lulls.

        A lull: rows that waited on a write that has ended, a part or more, and
        none new for a quarter of ``seconds`` (the end of a backlog, or a full
        consumer window): the timer would only idle the writer (the last rows of
        a backlog, arriving during the previous write, waited up to a second
        after it). Rows that filled with the writer idle, or under a part, keep
        the timer (a hiccup of the consumer does not split a flush).
        """
        deadline = time.monotonic() + delay
        quiet = self.triggers.seconds / 4
        while not self._kick.is_set() and not self._closing:
            now = time.monotonic()
            if now >= deadline:
                return
            wake = deadline
            waits: list[asyncio.Future[Any]] = []
            if self.part_rows and busy is not None and not busy.done():
                waits.append(busy)
            elif self.part_rows and (self.stats.last_flush_at or 0.0) >= self._first_at:
                lull_at = self._last_write_at + quiet
                if self._rows < self.part_rows:
                    lull_at = now + quiet  # look again: the buffer may grow
                elif now >= lull_at:
                    return
                wake = min(wake, lull_at)
            kicked = asyncio.ensure_future(self._kick.wait())
            try:
                await asyncio.wait(
                    (kicked, *waits), timeout=wake - now, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                kicked.cancel()

    async def _settle(
        self, batch: list[Pending], started: float, flush: Awaitable[tuple[int, int]]
    ) -> None:
        """Await one flush and resolve (or fail) the futures of its batches."""
        try:
            written, skipped = await flush
        except BaseException as exc:
            self._failed(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        now = time.monotonic()
        self.stats.flushes += 1
        self.stats.rows_written += written
        self.stats.rows_skipped += skipped
        self.stats.batches += len(batch)
        self.stats.last_flush_rows = written
        self.stats.seconds_writing += now - started
        self.stats.last_flush_at = now
        log.debug(
            "%s sink: flushed %d rows (%d skipped) of %d batches in %.2fs",
            self.sink_name,
            written,
            skipped,
            len(batch),
            now - started,
        )
        for entry in batch:
            if not entry.done():
                entry.set_result(None)

    def _failed(self, batch: list[Pending], exc: BaseException) -> None:
        if isinstance(exc, SinkHalted) and self._halted is None:
            self._halted = exc
        self.stats.failed_flushes += 1
        log.error(
            "%s sink: writing %d batches to %s failed: %s",
            self.sink_name,
            len(batch),
            self.target,
            exc,
        )
        for entry in batch:
            if not entry.done():
                entry.set_exception(exc)

    def _hint_when_starved(self) -> None:
        """Say once if timer flushes find writers waiting and nothing new coming."""
        if not self.triggers.rows or self.triggers.seconds <= 0:
            return  # no row target to starve
        idle = time.monotonic() - self._last_write_at
        # Many batches waiting and none arriving: writers are blocked, not just slow.
        if idle < self.triggers.seconds / 2 or len(self._pending) < 16:
            self._starved = 0
            return
        # The end of a backlog looks the same once; several in a row do not.
        self._starved += 1
        if self._hinted or self._starved < 3:
            return
        self._hinted = True
        log.warning(
            "%s sink: %d rows waited %.1fs for the flush timer with no write for %.1fs: "
            "the consumers are probably waiting on this flush. Deliver with sink.submit "
            "(rmqk run does) and let the consumer keep window_rows (2 x flush_rows) in "
            "flight (pull_threshold_for_topic, consume_concurrently_max_span), or set "
            "flush_rows to half of what the consumers hold",
            self.sink_name,
            self._rows,
            self.triggers.seconds,
            idle,
        )

    # -- writing (worker thread) ---------------------------------------------------------

    def _write_prepared(self, flush: Flush) -> tuple[int, int]:
        if self._halted is not None:
            raise self._halted
        return self.write_batch(flush), 0

    def _write(self, batch: list[Pending], prepared: list[Any] | None = None) -> tuple[int, int]:
        """One flush: (rows written, rows skipped as already committed).

        ``prepared`` (exactly once) is handed on only if no message was filtered out.
        """
        if self._halted is not None:
            raise self._halted
        pairs = tuple((e.queue, e.messages) for e in batch)
        if not self.exactly_once:
            return self.write_batch(Flush(pairs)), 0
        with self._commit_lock:
            return self._write_exactly_once(pairs, prepared)

    def _write_exactly_once(
        self,
        pairs: tuple[tuple[MessageQueue, Sequence[MessageExt]], ...],
        prepared: list[Any] | None,
    ) -> tuple[int, int]:
        self._absorb(self.committed_ranges())
        spans = spans_of(pairs)
        resets = self._went_backwards(pairs)
        for reset in resets:
            self._tell(reset)
        if resets and self._offsets_policy != "resume":
            raise OffsetsWentBackwardsError(resets[0])
        # Resume: the queues' old records are void from this commit on; the marks are
        # committed before the rows' ranges, in the same step.
        marks = tuple(OffsetRange.reset_of(r.topic, r.broker, r.queue_id) for r in resets)
        for _attempt in range(_COMMIT_ATTEMPTS):
            index = self._index
            if marks:
                index = index.copy()
                for mark in marks:
                    index.forget(mark.key)
            kept, skipped = keep_uncommitted(index, pairs, spans)
            if not kept:
                return 0, skipped
            # A batch's whole span is recorded: the offsets it lacks were filtered out.
            ranges = marks + ranges_of(
                (q.topic, q.broker_name, q.queue_id, spans[i][0], spans[i][1]) for i, q, _ in kept
            )
            flush = Flush(
                tuple((q, msgs) for _, q, msgs in kept), ranges, prepared if not skipped else None
            )
            try:
                written = self.write_batch(flush)
            except CommitRaced as raced:
                # Another process committed some of these meanwhile (their queue moved
                # in a rebalance): write the flush again without them.
                log.warning(
                    "%s sink: %d rows were committed by another writer while a flush to %s "
                    "was written; writing it again",
                    self.sink_name,
                    raced.rows,
                    self.target,
                )
                continue
            self._absorb(ranges)
            return written, skipped
        raise RuntimeError(f"flush to {self.target} lost the commit race {_COMMIT_ATTEMPTS} times")

    def _absorb(self, ranges: Iterable[OffsetRange]) -> int:
        """Add committed ranges to the index; how many there were."""
        added = 0
        for r in ranges:
            self._index.add(r)
            added += 1
        return added
