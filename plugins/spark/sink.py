"""The ``spark`` sink: group commits of consumed messages into Parquet (or ORC, or a table).

Every consumer of a process that writes to the same output shares one
:class:`OutputWriter`, a :class:`~rmqk.plugins.sinks.groupcommit.GroupCommitSink`
whose flushes (``flush_rows``, ``flush_bytes``, ``flush_seconds``) are each one
Arrow batch; the base buffers, triggers flushes and resolves each batch's future
once its flush has committed. What is this module's: building Arrow columns,
handing them to the writer, and the exactly-once staging.

The writer is pyarrow for Parquet files at a path (``writer = "arrow"``, the
default there: :mod:`rmqk.plugins.spark.arrow_writer`, Spark's layout without a
Spark job per flush) and Spark for tables, ORC and ``writer = "spark"``
(:mod:`rmqk.plugins.spark.frames`, one DataFrame write per flush).

A listener that awaits ``write`` instead of returning ``submit``'s future keeps
at most ``consume_thread_min`` batches waiting, and a ``flush_rows`` above that
is only reached through the timer (the sink logs a hint when it sees flushes
starved that way).

With ``exactly_once`` a flush is staged, committed to a log beside the output
and then published (see :mod:`rmqk.plugins.sinks.commitlog`); messages the log
already covers are acknowledged without being written again.

Writes block, so they run in a worker thread; the event loop keeps pulling
and buffering while a flush is written, and builds Arrow columns in parts of
8,192 rows as batches arrive (``part_rows``), so a flush that comes due is
mostly built and the last one leaves no building after the last message (with
``exactly_once`` too: a flush whose messages the commit log filters builds them
again, in the worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsReset
from rmqk.plugins.sinks.badbody import BadBodyCounter, BadBodyError, why_unparsed
from rmqk.plugins.sinks.commitlog import CommitEntry, StagingArea, data_files, now_ms
from rmqk.plugins.sinks.groupcommit import Flush, FlushStats, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.heapfreeze import heap_freeze
from rmqk.plugins.sinks.offsetranges import OffsetRange
from rmqk.plugins.spark.options import SinkOptions, parse_sink_options, sink_option_problems
from rmqk.spi.contracts import SinkContext
from rmqk.spi.factory import PluginFactory

if TYPE_CHECKING:
    import pyarrow as pa

    from rmqk.plugins.spark.arrow_writer import ArrowFileWriter

__all__ = ["SPARK_SINK", "OutputWriter", "SparkFlushStats", "SparkSink", "build_spark_sink"]

log = logging.getLogger("rmqk.plugins.spark.sink")

# A flush that fails to publish after committing is retried this often, then left
# to the next start's recovery (the data is committed, so the batches succeed).
_PUBLISH_RETRIES = 3
# Rows of Arrow columns built per turn of the event loop (about 20 ms of work).
_ARROW_SLICE_ROWS = 8192


@attrs.define
class SparkFlushStats(FlushStats):
    """The base's statistics, and the time spent building Arrow columns (the rest is Spark)."""

    seconds_arrow: float = 0.0


class OutputWriter(GroupCommitSink):
    """The Spark writes for one output, shared by the sinks of a process."""

    sink_name: ClassVar[str] = "spark"
    part_rows: ClassVar[int] = _ARROW_SLICE_ROWS

    def __init__(self, options: SinkOptions) -> None:
        self.spark_stats = SparkFlushStats()
        super().__init__(
            FlushTriggers(options.flush_rows, options.flush_bytes, options.flush_seconds),
            target=options.target,
            exactly_once=options.exactly_once,
            stats=self.spark_stats,
        )
        self.options = options
        self.users = 0
        self.session: Any = None
        self._frames: Any = None
        self._files: ArrowFileWriter | None = None
        self._owner = uuid.uuid4().hex[:16]
        self._staging: StagingArea | None = None
        self._seq = 0
        self._unpublished: list[CommitEntry] = []
        self.bad_bodies = BadBodyCounter()

    def open_output(self) -> None:
        from rmqk.plugins.spark.arrow_writer import ArrowFileWriter, flat_json_schema

        opts = self.options
        if opts.resolved_writer == "arrow":
            self._files = ArrowFileWriter(opts, self._owner, self._spark_rows)
            if opts.body_format == "json" and flat_json_schema(opts.body_schema or "") is None:
                # Every flush's bodies need Spark's from_json: start it now, and check the DDL.
                self._spark_frames()
        else:
            self._spark_frames()
        if opts.exactly_once:
            assert opts.path is not None
            output = Path(opts.path)
            output.mkdir(parents=True, exist_ok=True)
            self._staging = StagingArea(output, self._owner)
            self._staging.acquire()
            self._staging.reconcile()
            if opts.table:
                with contextlib.suppress(Exception):
                    if any(True for _ in data_files(output)):
                        self._frames.after_publish()

    def _spark_frames(self) -> Any:
        """The Spark writer, its session started on first use (blocking: worker thread)."""
        if self._frames is None:
            from rmqk.plugins.spark.frames import FrameWriter
            from rmqk.plugins.spark.session import get_session

            opts = self.options
            self.session = get_session(
                opts.master,
                opts.app_name,
                opts.spark_conf,
                catalog=bool(opts.table),
                catalog_dir=opts.catalog_dir,
                jvm_log=opts.spark_log,
            )
            frames = FrameWriter(opts, self.session)
            frames.check()
            self._frames = frames
        return self._frames

    def _spark_rows(self, batch: pa.RecordBatch) -> pa.Table:
        """The rows Spark makes of a batch, as Arrow (the bodies only Spark decodes right)."""
        table: pa.Table = self._spark_frames().frame(batch).toArrow()
        return table

    def close_output(self) -> None:
        if self._staging is None:
            return
        self._publish_pending()
        if not self._unpublished:
            self._staging.release()

    # -- at least once: Arrow built on the event loop, written in a worker thread -------

    def build_part(
        self, batches: Sequence[tuple[MessageQueue, Sequence[MessageExt]]]
    ) -> pa.RecordBatch:
        """Arrow columns of ``part_rows`` rows, built on the event loop as batches arrive.

        Not in a worker thread: building them is mostly Python holding the GIL,
        and a thread doing that starves the event loop (each time the loop gives
        the GIL up for I/O it waits a whole switch interval to get it back), which
        halved the consumer's rate. Parts keep each pause of the loop short, and
        built as the batches arrive they leave a flush little to build when due.
        """
        from rmqk.plugins.spark.columns import messages_to_arrow

        began = time.monotonic()
        part = messages_to_arrow(batches)
        self.spark_stats.seconds_arrow += time.monotonic() - began
        return part

    def watch_bad_bodies(self, topics: Collection[str], report: Callable[[str, int], None]) -> None:
        self.bad_bodies.watch(topics, report)

    def write_batch(self, flush: Flush) -> int:
        if self._staging is not None:
            return self._commit_exactly_once(flush, self._staging)
        arrow = self._prepared(flush.prepared) if flush.prepared else self._arrow(flush)
        arrow, bad = self._decoded(arrow, flush)
        if self._files is not None:
            assert self.options.path is not None
            self._seq += 1
            self._files.write(arrow, Path(self.options.path), self._seq, temporary=True)
        else:
            self._frames.write(arrow)
        self.bad_bodies.add(bad)
        return int(arrow.num_rows)

    def _decoded(
        self, arrow: pa.RecordBatch | pa.Table, flush: Flush
    ) -> tuple[pa.RecordBatch | pa.Table, dict[str, int]]:
        """With body_format = 'json': the decoded rows and their bad bodies per topic.

        A body that did not parse has null fields and its raw body in the
        corrupt-record column (:mod:`rmqk.plugins.sinks.badbody`); with
        ``on_bad_body = "fail"`` the first one raises :class:`BadBodyError` instead,
        before anything of the flush is written.
        """
        opts = self.options
        if opts.body_format != "json":
            return arrow, {}
        import pyarrow as pa
        import pyarrow.compute as pc

        assert isinstance(arrow, pa.RecordBatch)
        if self._files is not None:
            rows = self._files.rows(arrow)
        else:
            rows = self._spark_frames().json_rows(arrow)
        corrupt = rows.column(opts.corrupt_record_column)
        if corrupt.null_count == len(corrupt):
            return rows, {}
        is_bad = pc.is_valid(corrupt)
        first = int(pc.indices_nonzero(is_bad.combine_chunks())[0].as_py())
        queue, msg = _message_at(rows, first, flush)
        why = why_unparsed(msg.body, opts.body_schema)
        if opts.on_bad_body == "fail":
            raise BadBodyError(self.sink_name, queue, msg, why)
        counts = pc.value_counts(rows.column("topic").filter(is_bad).combine_chunks())
        bad = {
            str(topic): int(n)
            for topic, n in zip(
                counts.field(0).to_pylist(), counts.field(1).to_pylist(), strict=True
            )
        }
        log.warning(
            "spark sink: %d bodies of this flush to %s do not parse with body_schema, kept "
            "raw in %s (the first: message %s, topic %s, queue %s/%s, offset %s: %s)",
            sum(bad.values()),
            opts.target,
            opts.corrupt_record_column,
            msg.msg_id,
            msg.topic,
            queue.broker_name,
            queue.queue_id,
            msg.queue_offset,
            why,
        )
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        return rows, bad

    def _prepared(self, parts: list[pa.RecordBatch]) -> pa.RecordBatch | pa.Table:
        """What the writer takes of a flush's parts: one batch, or one table of them all."""
        if self._files is not None and self._files.takes_parts and len(parts) > 1:
            import pyarrow as pa

            return pa.Table.from_batches(parts)
        return _one_batch(parts)

    def _arrow(self, flush: Flush) -> pa.RecordBatch:
        from rmqk.plugins.spark.columns import messages_to_arrow

        began = time.monotonic()
        arrow = messages_to_arrow(flush.batches)
        self.spark_stats.seconds_arrow += time.monotonic() - began
        return arrow

    # -- exactly once: staged, committed to the log, published ---------------------------

    def committed_ranges(self) -> Iterable[OffsetRange]:
        assert self._staging is not None
        # Each flush first retries publishing what earlier ones committed.
        self._publish_pending()
        # Not under the log's lock: this only filters rows out before writing. The log
        # is append-only and read_new keeps a line still being written for the next
        # read, so nothing is seen half; the guard is claim(), under the lock, right
        # before the commit.
        return [r for e in self._staging.log.read_new() for r in e.ranges]

    def _commit_exactly_once(self, flush: Flush, staging: StagingArea) -> int:
        if not flush.batches:
            # Reset marks alone (a queue's offsets went backwards): a log line, no files.
            self._seq += 1
            mark = CommitEntry(
                flush_id=f"{staging.owner}-{self._seq}",
                owner=staging.owner,
                seq=self._seq,
                rows=0,
                files=(),
                ranges=flush.ranges,
                time_ms=now_ms(),
            )
            with staging.log.locked():
                self._append(mark)
            return 0
        arrow = self._prepared(flush.prepared) if flush.prepared else self._arrow(flush)
        arrow, bad = self._decoded(arrow, flush)
        self._seq += 1
        seq = self._seq
        target = staging.flush_dir(seq)
        try:
            if self._files is not None:
                # It makes the folders of the files it writes (parents included).
                files = self._files.write(arrow, target, seq, temporary=False)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                self._frames.write(arrow, str(target))
                files = data_files(target)
            entry = CommitEntry(
                flush_id=f"{staging.owner}-{seq}",
                owner=staging.owner,
                seq=seq,
                rows=arrow.num_rows,
                files=tuple(files),
                ranges=flush.ranges,
                time_ms=now_ms(),
            )
            self._stage_hook("staged", entry)
            with staging.log.locked():
                self.claim(flush, [r for e in staging.log.read_new() for r in e.ranges])
                self._append(entry)
        except BaseException:
            # Uncommitted (or lost the race: the base stages it again without the rows
            # another writer committed).
            staging.discard(seq)
            raise
        self._stage_hook("committed", entry)
        self.bad_bodies.add(bad)
        self._unpublished.append(entry)
        self._publish_pending()
        self._stage_hook("published", entry)
        return int(arrow.num_rows)

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
            if self._frames is None:
                continue
            try:
                self._frames.after_publish()
            except Exception as exc:
                log.error("spark sink: refreshing table %s failed: %s", self.options.table, exc)

    def _stage_hook(self, stage: str, entry: CommitEntry) -> None:
        """Called at each step of an exactly-once flush (crash tests pause here)."""


def _message_at(
    rows: pa.RecordBatch | pa.Table, index: int, flush: Flush
) -> tuple[MessageQueue, MessageExt]:
    """The flush's message of row ``index``, found by its queue and offset."""
    key = tuple(
        rows.column(name)[index].as_py() for name in ("topic", "broker", "queue_id", "queue_offset")
    )
    for queue, messages in flush.batches:
        for m in messages:
            if (m.topic, queue.broker_name, queue.queue_id, m.queue_offset) == key:
                return queue, m
    raise AssertionError(f"row {index} ({key}) is no message of the flush")


def _one_batch(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    """The flush's parts as one record batch (what the writers take); a copy if several."""
    import pyarrow as pa

    if len(parts) == 1:
        return parts[0]
    concat = getattr(pa, "concat_batches", None)
    if concat is not None:
        # pyarrow >= 19: one call (each gives the writer thread's GIL up), not three.
        joined: pa.RecordBatch = concat(parts)
        return joined
    batch: pa.RecordBatch = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
    return batch


# Writers by (event loop, output), shared by the sinks of one process.
_writers: dict[tuple[int, str], OutputWriter] = {}


def _output_key(options: SinkOptions) -> str:
    if options.path:
        return "path:" + os.path.abspath(options.path)
    return "table:" + str(options.table)


def _refuse_one_metastore_for_many_workers(options: SinkOptions) -> None:
    """A table in the embedded metastore, from one of several worker processes: refused.

    Each worker starts its own Spark, and embedded Derby admits one JVM: the second
    would fail every flush. A shared metastore (a Hive metastore service, or a Derby
    network server) is the user's own setting, and is not refused.
    """
    from rmqk.spi.workers import current_worker

    worker = current_worker()
    if worker is None or worker.count < 2 or not options.table:
        return
    conf = options.spark_conf
    url = conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "jdbc:derby:;")
    embedded = url.startswith("jdbc:derby:") and not url.startswith("jdbc:derby://")
    if "spark.hadoop.hive.metastore.uris" in conf or not embedded:
        return
    if conf.get("spark.sql.catalogImplementation", "hive") != "hive":
        return
    raise ConfigError(
        [
            ConfigProblem(
                "<sink_options>",
                "spark",
                "table",
                f"table {options.table} with processes = {worker.count}: each worker process "
                "starts its own Spark, and the embedded metastore admits one; run it as one "
                "process, or give a shared metastore "
                '("spark.hadoop.hive.metastore.uris")',
            )
        ]
    )


class SparkSink:
    """The sink a composed consumer writes to; a handle on its output's shared writer."""

    def __init__(self, options: Mapping[str, Any] | SinkOptions) -> None:
        from rmqk.plugins.spark.session import require_spark

        # Refused when built, not when started, so `rmqk check` refuses it too.
        require_spark()
        self.options = options if isinstance(options, SinkOptions) else parse_sink_options(options)
        _refuse_one_metastore_for_many_workers(self.options)
        self.writer: OutputWriter | None = None
        # Whether this sink holds the heap frozen (heap_freeze): released once, on close.
        self._holds_heap = False
        self._stats = SparkFlushStats()
        # on_offsets_reset and its report, handed to the output's writer (issue 25).
        self._watch: tuple[str, Callable[[OffsetsReset], None]] | None = None
        # Who counts the bad bodies (the consumers), handed to the writer when it starts.
        self._watchers: list[tuple[Collection[str], Callable[[str, int], None]]] = []

    def watch_bad_bodies(self, topics: Collection[str], report: Callable[[str, int], None]) -> None:
        """Report bodies that do not parse (body_format = 'json') to ``report`` by topic."""
        self._watchers.append((topics, report))
        if self.writer is not None:
            self.writer.watch_bad_bodies(topics, report)

    @property
    def stats(self) -> SparkFlushStats:
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
                        "table, format, partition_by, body_format, body_schema, on_bad_body, "
                        "corrupt_record_column, exactly_once, "
                        "files_per_flush and writer",
                    )
                ]
            )
        writer.users += 1
        self.writer = writer
        self._stats = writer.spark_stats
        for topics, report in self._watchers:
            writer.watch_bad_bodies(topics, report)
        if self._watch is not None:
            # A writer shared by consumers of one output follows the last one started.
            writer.watch_offsets(*self._watch)
        try:
            await writer.start()
        except BaseException:
            writer.users -= 1
            if writer.users == 0:
                _writers.pop(key, None)
            self.writer = None
            raise
        # Full collections while the window is in flight skip the start-up heap; not if
        # the sink was closed while its writer started (nothing would release it).
        if self.writer is writer and not self._holds_heap:
            heap_freeze.hold()
            self._holds_heap = True

    def watch_offsets(self, policy: str, report: Callable[[OffsetsReset], None]) -> None:
        """:meth:`GroupCommitSink.watch_offsets` of the output's writer."""
        self._watch = (policy, report)
        if self.writer is not None:
            self.writer.watch_offsets(policy, report)

    async def offsets_reset(self, queue: MessageQueue) -> None:
        """:meth:`GroupCommitSink.offsets_reset` of the output's writer."""
        if self.writer is None:
            await self.start()
        assert self.writer is not None
        await self.writer.offsets_reset(queue)

    @property
    def window_rows(self) -> int:
        """Two flushes of ``flush_rows`` (:attr:`GroupCommitSink.window_rows`)."""
        options = self.writer.options if self.writer is not None else self.options
        return 2 * options.flush_rows

    def submit(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> asyncio.Future[None]:
        """The future of the flush that covers the batch (:meth:`GroupCommitSink.submit`)."""
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
        if self._holds_heap:
            self._holds_heap = False
            heap_freeze.release()
        writer.users -= 1
        if writer.users > 0:
            return
        for key, value in list(_writers.items()):
            if value is writer:
                del _writers[key]
        await writer.close()


def build_spark_sink(context: SinkContext, options: SinkOptions) -> SparkSink:
    """The registered factory of ``spark``: the checks across options, then the sink."""
    problems = sink_option_problems(options)
    if problems:
        raise ConfigError(problems)
    return SparkSink(options)


# The sink_options it takes are declared (spark.* included): the kernel checks the table.
SPARK_SINK: PluginFactory[SinkContext, SparkSink] = PluginFactory(
    "spark", build_spark_sink, options=SinkOptions
)
