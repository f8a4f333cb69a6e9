"""The ``spark`` sink: group commits of consumed messages into Parquet (or ORC) via Spark.

Every consumer of a process that writes to the same output shares one
:class:`OutputWriter`. ``submit(queue, messages)`` adds the batch to the
writer's buffer and returns at once the future of the flush that covers it
(``write`` awaits that future). A flush writes the buffered batches as one
DataFrame when the buffer holds ``flush_rows`` rows or ``flush_bytes`` body
bytes, or its oldest batch is ``flush_seconds`` old, whichever comes first; it
takes batches up to ``flush_rows`` / ``flush_bytes``, and the rest is the next
flush. The future resolves (and the consumer acknowledges, and offsets move)
only once the flush has committed; if it fails, every batch in it fails and the
consumer retries them.

A composed consumer (``rmqk run``) delivers with ``submit``, so waiting on a
flush holds no consume worker, and widens its flow control to the sink's
``window_rows``: two flushes' worth, one being written while the next fills.
A listener that awaits ``write`` instead keeps at most ``consume_thread_max``
batches waiting, and a ``flush_rows`` above that is only reached through the
timer (the sink logs a hint when it sees flushes starved that way).

With ``exactly_once`` a flush is staged, committed to a log beside the output
and then published (see :mod:`rmqk.plugins.spark.commitlog`); messages the log
already covers are acknowledged without being written again.

Spark calls block, so they run in a worker thread (``asyncio.to_thread``);
the event loop keeps pulling and buffering while a flush is written. Without
``exactly_once`` the next flush's Arrow columns are built while the previous
flush is in Spark; its batches still succeed only once its own write has
committed (a consumer's offsets never pass a batch that is not acknowledged).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.errors import ConfigError, ConfigProblem
from rmqk.message import MessageExt
from rmqk.model import MessageQueue
from rmqk.plugins.spark.commitlog import (
    CommitEntry,
    OffsetIndex,
    StagingArea,
    data_files,
    now_ms,
    ranges_of,
)
from rmqk.plugins.spark.options import SinkOptions, parse_sink_options

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FlushStats", "OutputWriter", "SparkSink"]

log = logging.getLogger("rmqk.plugins.spark.sink")

# A flush that fails to publish after committing is retried this often, then left
# to the next start's recovery (the data is committed, so the batches succeed).
_PUBLISH_RETRIES = 3
# A commit that loses a race with another process re-filters and re-stages this often.
_STAGE_ATTEMPTS = 5
# Rows of Arrow columns built per turn of the event loop (about 20-40 ms of work).
_ARROW_SLICE_ROWS = 8192


@attrs.define
class FlushStats:
    """What a writer has done, for reports and tests."""

    flushes: int = 0
    rows_written: int = 0
    rows_skipped: int = 0
    batches: int = 0
    failed_flushes: int = 0
    seconds_writing: float = 0.0
    # Of which building Arrow columns from the messages (the rest is Spark).
    seconds_arrow: float = 0.0
    last_flush_rows: int = 0
    first_write_at: float | None = None
    last_flush_at: float | None = None


class _Pending:
    __slots__ = ("at", "bytes", "future", "messages", "queue")

    def __init__(
        self,
        queue: MessageQueue,
        messages: Sequence[MessageExt],
        future: asyncio.Future[None],
        at: float,
    ) -> None:
        self.queue = queue
        self.messages = messages
        self.future = future
        self.at = at
        self.bytes = sum(len(m.body) for m in messages)


class OutputWriter:
    """The group-commit buffer and the Spark writes for one output, shared in a process."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.stats = FlushStats()
        self.users = 0
        self.session: Any = None
        self._frames: Any = None
        # An ordered set: a cancelled batch leaves it in O(1).
        self._pending: dict[_Pending, None] = {}
        self._rows = 0
        self._bytes = 0
        self._first_at = 0.0
        self._last_write_at = 0.0
        self._hinted = False
        self._starved = 0
        self._kick = asyncio.Event()
        self._has_data = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._started = False
        self._start_lock = asyncio.Lock()
        # exactly-once state
        self._staging: StagingArea | None = None
        self._index = OffsetIndex()
        self._seq = 0
        self._unpublished: list[CommitEntry] = []

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            await asyncio.to_thread(self._start_blocking)
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_loop(), name=f"rmqk-spark-flush {self.options.target}"
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
        log.error("spark sink: the flusher of %s stopped: %r", self.options.target, error)
        self._closing = True
        pending, self._pending = list(self._pending), {}
        for entry in pending:
            if not entry.future.done():
                entry.future.set_exception(
                    RuntimeError(f"the spark sink writing {self.options.target} stopped: {error}")
                )

    def _start_blocking(self) -> None:
        from rmqk.plugins.spark.frames import FrameWriter
        from rmqk.plugins.spark.session import get_session

        opts = self.options
        self.session = get_session(opts.master, opts.app_name, opts.spark_conf)
        self._frames = FrameWriter(opts, self.session)
        self._frames.check()
        if opts.exactly_once:
            assert opts.path is not None
            output = Path(opts.path)
            output.mkdir(parents=True, exist_ok=True)
            self._staging = StagingArea(output, uuid.uuid4().hex[:16])
            self._staging.acquire()
            self._staging.reconcile()
            with self._staging.log.locked():
                self._refresh_index()
            if opts.table:
                with contextlib.suppress(Exception):
                    if any(True for _ in data_files(output)):
                        self._frames.after_publish()

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
        if self._staging is not None:
            await asyncio.to_thread(self._finish_exactly_once)
        self._started = False

    def _finish_exactly_once(self) -> None:
        assert self._staging is not None
        self._publish_pending()
        if not self._unpublished:
            self._staging.release()

    # -- buffering ---------------------------------------------------------------------

    def submit(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> asyncio.Future[None]:
        """Buffer a batch; the future of the flush that covers it (cancel it to withdraw)."""
        loop = asyncio.get_running_loop()
        if not messages:
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        return self._submit(loop, queue, messages).future

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        if not messages:
            return
        entry = self._submit(asyncio.get_running_loop(), queue, messages)
        try:
            await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            # A consumer shutting down gave up on this batch: do not write it if the
            # flush has not taken it yet (it will be consumed again).
            self._withdraw(entry)
            entry.future.cancel()
            raise

    def _submit(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: MessageQueue,
        messages: Sequence[MessageExt],
    ) -> _Pending:
        if self._closing:
            raise RuntimeError(f"the spark sink writing {self.options.target} is closed")
        now = time.monotonic()
        entry = _Pending(queue, messages, loop.create_future(), now)
        if self.stats.first_write_at is None:
            self.stats.first_write_at = now
        if not self._pending:
            self._first_at = now
        self._pending[entry] = None
        self._last_write_at = now
        self._rows += len(messages)
        self._bytes += entry.bytes
        self._has_data.set()
        opts = self.options
        if self._rows >= opts.flush_rows or self._bytes >= opts.flush_bytes:
            self._kick.set()
        entry.future.add_done_callback(functools.partial(self._cancelled, entry))
        return entry

    def _cancelled(self, entry: _Pending, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            self._withdraw(entry)

    def _withdraw(self, entry: _Pending) -> None:
        """Take a cancelled batch out of the buffer if no flush has taken it yet."""
        if self._pending.pop(entry, False) is None:
            self._rows -= len(entry.messages)
            self._bytes -= entry.bytes

    async def _flush_loop(self) -> None:
        # Without exactly-once, flushes overlap by one stage: the next flush's Arrow
        # columns are built while the previous one is in Spark. Each flush settles
        # only its own batches, when its own write has committed.
        writing: asyncio.Task[None] | None = None
        try:
            while True:
                batch = await self._next_batch()
                if batch is None:
                    return
                started = time.monotonic()
                if self._staging is not None:
                    await self._settle(
                        batch, started, asyncio.to_thread(self._flush_blocking, batch)
                    )
                    continue
                try:
                    arrow = await self._arrow_on_loop(batch)
                except BaseException as exc:
                    self._failed(batch, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                if writing is not None:
                    await writing
                writing = asyncio.get_running_loop().create_task(
                    self._settle(batch, started, asyncio.to_thread(self._write_arrow, arrow)),
                    name=f"rmqk-spark-write {self.options.target}",
                )
        finally:
            if writing is not None:
                await writing

    async def _next_batch(self) -> list[_Pending] | None:
        """Wait for the next flush to be due and take its batches; None once closed and empty.

        A flush takes batches up to ``flush_rows`` rows or ``flush_bytes`` bytes (at
        least one): what arrived beyond that is the next flush, due at once.
        """
        opts = self.options
        while True:
            if not self._pending:
                if self._closing:
                    return None
                self._has_data.clear()
                await self._has_data.wait()
                continue
            delay = self._first_at + opts.flush_seconds - time.monotonic()
            if delay > 0 and not self._kick.is_set() and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), delay)
            if self._kick.is_set():
                self._starved = 0
            else:
                self._hint_when_starved()
            self._kick.clear()
            batch: list[_Pending] = []
            rows = size = 0
            for entry in self._pending:
                if batch and (rows >= opts.flush_rows or size >= opts.flush_bytes):
                    break
                batch.append(entry)
                rows += len(entry.messages)
                size += entry.bytes
            for entry in batch:
                del self._pending[entry]
            self._rows -= rows
            self._bytes -= size
            if self._pending:
                self._first_at = next(iter(self._pending)).at
                if self._rows >= opts.flush_rows or self._bytes >= opts.flush_bytes:
                    self._kick.set()
            if batch:
                return batch

    async def _settle(
        self, batch: list[_Pending], started: float, flush: Awaitable[tuple[int, int]]
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
            "spark sink: flushed %d rows (%d skipped) of %d batches in %.2fs "
            "(%.2fs building Arrow columns so far)",
            written,
            skipped,
            len(batch),
            now - started,
            self.stats.seconds_arrow,
        )
        for entry in batch:
            if not entry.future.done():
                entry.future.set_result(None)

    def _failed(self, batch: list[_Pending], exc: BaseException) -> None:
        self.stats.failed_flushes += 1
        log.error(
            "spark sink: writing %d batches to %s failed: %s",
            len(batch),
            self.options.target,
            exc,
        )
        for entry in batch:
            if not entry.future.done():
                entry.future.set_exception(exc)

    def _hint_when_starved(self) -> None:
        """Say once if timer flushes find writers waiting and nothing new coming."""
        idle = time.monotonic() - self._last_write_at
        # Many batches waiting and none arriving: writers are blocked, not just slow.
        if idle < self.options.flush_seconds / 2 or len(self._pending) < 16:
            self._starved = 0
            return
        # The end of a backlog looks the same once; several in a row do not.
        self._starved += 1
        if self._hinted or self._starved < 3:
            return
        self._hinted = True
        log.warning(
            "spark sink: %d rows waited %.1fs for the flush timer with no write for %.1fs: "
            "the consumers are probably waiting on this flush. Deliver with sink.submit "
            "(rmqk run does) and let the consumer keep window_rows (2 x flush_rows) in "
            "flight (pull_threshold_for_topic, consume_concurrently_max_span), or set "
            "flush_rows to half of what the consumers hold",
            self._rows,
            self.options.flush_seconds,
            idle,
        )

    # -- flushing (worker thread) -------------------------------------------------------

    def _flush_blocking(self, batch: list[_Pending]) -> tuple[int, int]:
        if self._staging is None:
            return self._write_arrow(self._arrow(batch))
        return self._flush_exactly_once(batch)

    def _arrow(self, batch: list[_Pending]) -> pa.RecordBatch:
        from rmqk.plugins.spark.columns import messages_to_arrow

        began = time.monotonic()
        arrow = messages_to_arrow((e.queue, e.messages) for e in batch)
        self.stats.seconds_arrow += time.monotonic() - began
        return arrow

    async def _arrow_on_loop(self, batch: list[_Pending]) -> list[pa.RecordBatch]:
        """The flush's Arrow columns, built on the event loop in slices.

        Not in a worker thread: building them is mostly Python holding the GIL,
        and a thread doing that starves the event loop (each time the loop gives
        the GIL up for I/O it waits a whole switch interval to get it back), which
        halved the consumer's rate. Slices keep each pause of the loop short.
        """
        from rmqk.plugins.spark.columns import messages_to_arrow

        parts: list[pa.RecordBatch] = []
        spent = 0.0
        start = 0
        while start < len(batch):
            began = time.monotonic()
            end = start
            rows = 0
            while end < len(batch) and rows < _ARROW_SLICE_ROWS:
                rows += len(batch[end].messages)
                end += 1
            parts.append(messages_to_arrow((e.queue, e.messages) for e in batch[start:end]))
            spent += time.monotonic() - began
            start = end
            if start < len(batch):
                await asyncio.sleep(0)
        self.stats.seconds_arrow += spent
        return parts

    def _write_arrow(self, arrow: pa.RecordBatch | list[pa.RecordBatch]) -> tuple[int, int]:
        if isinstance(arrow, list):
            import pyarrow as pa

            arrow = pa.Table.from_batches(arrow).combine_chunks().to_batches()[0]
        self._frames.write(arrow)
        return arrow.num_rows, 0

    def _refresh_index(self) -> None:
        assert self._staging is not None
        for entry in self._staging.log.read_new():
            for r in entry.ranges:
                self._index.add(r)

    def _keep(
        self, batch: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]
    ) -> tuple[list[tuple[int, MessageQueue, list[MessageExt]]], int]:
        """Per batch (by index) the messages no commit covers, each once; and how many not."""
        index = self._index
        kept: list[tuple[int, MessageQueue, list[MessageExt]]] = []
        seen: set[tuple[MessageQueue, int]] = set()
        skipped = 0
        for i, (q, msgs) in enumerate(batch):
            first = min(m.queue_offset for m in msgs)
            last = max(m.queue_offset for m in msgs)
            check = index.overlaps(q.topic, q.broker_name, q.queue_id, first, last)
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

    def _flush_exactly_once(self, batch: list[_Pending]) -> tuple[int, int]:
        from rmqk.plugins.spark.columns import messages_to_arrow

        staging = self._staging
        assert staging is not None
        self._publish_pending()
        with staging.log.locked():
            self._refresh_index()
        pairs = [(e.queue, e.messages) for e in batch]
        for _attempt in range(_STAGE_ATTEMPTS):
            kept, skipped = self._keep(pairs)
            if not kept:
                return 0, skipped
            # A batch's whole span is recorded: the offsets it lacks were filtered out.
            ranges = ranges_of(
                (
                    q.topic,
                    q.broker_name,
                    q.queue_id,
                    min(m.queue_offset for m in pairs[i][1]),
                    max(m.queue_offset for m in pairs[i][1]),
                )
                for i, q, _ in kept
            )
            began = time.monotonic()
            arrow = messages_to_arrow((q, msgs) for _, q, msgs in kept)
            self.stats.seconds_arrow += time.monotonic() - began
            self._seq += 1
            seq = self._seq
            target = staging.flush_dir(seq)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._frames.write(arrow, str(target))
                entry = CommitEntry(
                    flush_id=f"{staging.owner}-{seq}",
                    owner=staging.owner,
                    seq=seq,
                    rows=arrow.num_rows,
                    files=tuple(data_files(target)),
                    ranges=ranges,
                    time_ms=now_ms(),
                )
                self._stage_hook("staged", entry)
                with staging.log.locked():
                    self._refresh_index()
                    _, raced = self._keep([(q, msgs) for _, q, msgs in kept])
                    if not raced:
                        self._append(entry)
            except BaseException:
                staging.discard(seq)
                raise
            if raced:
                # Another process committed some of these meanwhile (their queue moved
                # in a rebalance): stage again without them.
                log.warning(
                    "spark sink: %d rows were committed by another writer while flush %s "
                    "was staged; staging it again",
                    raced,
                    entry.flush_id,
                )
                staging.discard(seq)
                continue
            for r in ranges:
                self._index.add(r)
            self._stage_hook("committed", entry)
            self._unpublished.append(entry)
            self._publish_pending()
            self._stage_hook("published", entry)
            return arrow.num_rows, skipped
        raise RuntimeError(
            f"flush to {self.options.target} lost the commit race {_STAGE_ATTEMPTS} times"
        )

    def _append(self, entry: CommitEntry) -> None:
        """Append to the commit log; if that fails, find out whether the line landed."""
        assert self._staging is not None
        try:
            self._staging.log.append(entry)
        except BaseException:
            landed = any(e.flush_id == entry.flush_id for e in self._staging.log.read_all())
            if not landed:
                raise
            log.warning(
                "spark sink: commit of %s reported an error but is in the log", entry.flush_id
            )

    def _publish_pending(self) -> None:
        assert self._staging is not None
        while self._unpublished:
            entry = self._unpublished[0]
            error: Exception | None = None
            for _ in range(_PUBLISH_RETRIES):
                try:
                    self._staging.publish(entry)
                    error = None
                    break
                except Exception as exc:
                    error = exc
            if error is not None:
                # Committed is committed: the batches succeed, publishing is retried later.
                log.error("spark sink: publishing flush %s failed: %s", entry.flush_id, error)
                return
            self._unpublished.pop(0)
            try:
                self._frames.after_publish()
            except Exception as exc:
                log.error("spark sink: refreshing table %s failed: %s", self.options.table, exc)

    def _stage_hook(self, stage: str, entry: CommitEntry) -> None:
        """Called at each step of an exactly-once flush (crash tests pause here)."""


# Writers by (event loop, output), shared by the sinks of one process.
_writers: dict[tuple[int, str], OutputWriter] = {}


def _output_key(options: SinkOptions) -> str:
    if options.path:
        return "path:" + os.path.abspath(options.path)
    return "table:" + str(options.table)


class SparkSink:
    """The sink a composed consumer writes to; a handle on its output's shared writer."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = parse_sink_options(options)
        self.writer: OutputWriter | None = None
        self._stats = FlushStats()

    @property
    def stats(self) -> FlushStats:
        """The output's statistics (shared by the sinks of this process writing it)."""
        return self._stats

    async def start(self) -> None:
        if self.writer is not None:
            return
        loop = asyncio.get_running_loop()
        key = (id(loop), _output_key(self.options))
        writer = _writers.get(key)
        if writer is None:
            writer = OutputWriter(self.options)
            _writers[key] = writer
        elif writer.options.output_settings() != self.options.output_settings():
            raise ConfigError(
                [
                    ConfigProblem(
                        "<sink_options>",
                        "spark",
                        None,
                        f"another consumer of this process writes {self.options.target} with "
                        "different options; sinks sharing an output must agree on path, "
                        "table, format, partition_by, body_format, body_schema, exactly_once "
                        "and files_per_flush",
                    )
                ]
            )
        writer.users += 1
        self.writer = writer
        self._stats = writer.stats
        try:
            await writer.start()
        except BaseException:
            writer.users -= 1
            if writer.users == 0:
                _writers.pop(key, None)
            self.writer = None
            raise

    @property
    def window_rows(self) -> int:
        """Rows a consumer should keep in flight: one flush being written, the next filling.

        Two flushes of ``flush_rows``; with smaller windows flushes wait for the
        timer. ``flush_bytes`` needs no rows of its own: when bodies are large it
        is reached first, with fewer rows than this.
        """
        options = self.writer.options if self.writer is not None else self.options
        return 2 * options.flush_rows

    def submit(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> asyncio.Future[None]:
        """Buffer a batch and return at once the future of the flush that covers it.

        The future resolves when that flush has committed and fails with its
        error (then retry the batch); cancelling it withdraws the batch if no
        flush has taken it yet. Needs a running event loop.
        """
        if self.writer is None:
            return asyncio.ensure_future(self.write(queue, messages))
        return self.writer.submit(queue, messages)

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        """Buffer a batch and wait for the flush that covers it (``await submit``)."""
        if self.writer is None:
            await self.start()
        assert self.writer is not None
        await self.writer.write(queue, messages)

    async def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is None:
            return
        writer.users -= 1
        if writer.users > 0:
            return
        for key, value in list(_writers.items()):
            if value is writer:
                del _writers[key]
        await writer.close()
