"""The ``spark`` sink: group commits of consumed messages into Parquet (or ORC) via Spark.

Every consumer of a process that writes to the same output shares one
:class:`OutputWriter`. ``write(queue, messages)`` adds the batch to the
writer's buffer and waits for the flush that covers it; a flush takes
everything buffered and writes it as one DataFrame, when the buffer holds
``flush_rows`` rows or ``flush_bytes`` body bytes, or its oldest batch is
``flush_seconds`` old, whichever comes first. ``write`` returns (and the
consumer acknowledges, and offsets move) only once the flush has committed;
if it fails, every batch in it fails and the consumer retries them.

A push consumer keeps at most ``consume_thread_max`` batches (of up to 32
messages, a broker's pull) waiting on the sink. ``flush_rows`` above that can
never be reached, and every flush then waits for ``flush_seconds``; about half
of it lets one flush be written while the next one fills (the sink logs a hint
when it sees flushes starved that way).

With ``exactly_once`` a flush is staged, committed to a log beside the output
and then published (see :mod:`rmqk.plugins.spark.commitlog`); messages the log
already covers are acknowledged without being written again.

Spark calls block, so they run in a worker thread (``asyncio.to_thread``);
the event loop keeps pulling and buffering while a flush is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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

__all__ = ["FlushStats", "OutputWriter", "SparkSink"]

log = logging.getLogger("rmqk.plugins.spark.sink")

# A flush that fails to publish after committing is retried this often, then left
# to the next start's recovery (the data is committed, so the batches succeed).
_PUBLISH_RETRIES = 3
# A commit that loses a race with another process re-filters and re-stages this often.
_STAGE_ATTEMPTS = 5


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
    __slots__ = ("bytes", "future", "messages", "queue")

    def __init__(
        self, queue: MessageQueue, messages: Sequence[MessageExt], future: asyncio.Future[None]
    ) -> None:
        self.queue = queue
        self.messages = messages
        self.future = future
        self.bytes = sum(len(m.body) for m in messages)


class OutputWriter:
    """The group-commit buffer and the Spark writes for one output, shared in a process."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.stats = FlushStats()
        self.users = 0
        self.session: Any = None
        self._frames: Any = None
        self._pending: list[_Pending] = []
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
        pending, self._pending = self._pending, []
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

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        if not messages:
            return
        if self._closing:
            raise RuntimeError(f"the spark sink writing {self.options.target} is closed")
        loop = asyncio.get_running_loop()
        entry = _Pending(queue, messages, loop.create_future())
        if self.stats.first_write_at is None:
            self.stats.first_write_at = time.monotonic()
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append(entry)
        self._last_write_at = time.monotonic()
        self._rows += len(messages)
        self._bytes += entry.bytes
        self._has_data.set()
        opts = self.options
        if self._rows >= opts.flush_rows or self._bytes >= opts.flush_bytes:
            self._kick.set()
        try:
            await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            # A consumer shutting down gave up on this batch: do not write it if the
            # flush has not taken it yet (it will be consumed again).
            if entry in self._pending:
                self._pending.remove(entry)
                self._rows -= len(messages)
                self._bytes -= entry.bytes
            raise

    async def _flush_loop(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._has_data.clear()
                await self._has_data.wait()
                continue
            delay = self._first_at + self.options.flush_seconds - time.monotonic()
            if delay > 0 and not self._kick.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), delay)
            if self._kick.is_set():
                self._starved = 0
            else:
                self._hint_when_starved()
            self._kick.clear()
            batch, self._pending = self._pending, []
            self._rows = 0
            self._bytes = 0
            if not batch:
                continue
            started = time.monotonic()
            try:
                written, skipped = await asyncio.to_thread(self._flush_blocking, batch)
            except BaseException as exc:
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
                if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    raise
                continue
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
            "the consumers are probably waiting on this flush. Set flush_rows below the "
            "rows they keep in flight (consume_thread_max x consume_message_batch_max_size, "
            "at most 32 per pull), ideally half, to flush as soon as they are all waiting",
            self._rows,
            self.options.flush_seconds,
            idle,
        )

    # -- flushing (worker thread) -------------------------------------------------------

    def _flush_blocking(self, batch: list[_Pending]) -> tuple[int, int]:
        from rmqk.plugins.spark.columns import messages_to_arrow

        if self._staging is None:
            began = time.monotonic()
            arrow = messages_to_arrow((e.queue, e.messages) for e in batch)
            self.stats.seconds_arrow += time.monotonic() - began
            self._frames.write(arrow)
            return arrow.num_rows, 0
        return self._flush_exactly_once(batch)

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

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
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
