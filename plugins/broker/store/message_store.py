"""The embedded broker's message store (Apache's DefaultMessageStore, in Python).

Layout under ``root``::

    commitlog/<20-digit offset>            records, in the pull-response layout
    consumequeue/<topic>/<qid>/<20 digits> 20-byte entries per queue offset
    config/consumerOffset.json             committed consumer offsets
    config/topics.json                     topic configs
    config/delayOffset.json                delay-level delivery progress
    index/<yyyyMMddHHmmssSSS>              the message index by key (see index.py)
    checkpoint.json                        what is known durable (see recovery.py)
    lock                                   held (flock) while the store is open

Who encodes what: the caller gives message fields; the store encodes the record
with the remoting codec's ``encode_stored_message`` before taking its lock (with
placeholder offsets and store time) and, under the lock, patches the queue
offset, commit log offset and store timestamp in place with
``patch_stored_message``, as Java's CommitLog encodes outside its put lock and
fixes those fields inside it. A pull then copies records out of the log as they
are.

Threads: writes (puts, deliveries, retention) are serialised by one lock and may
come from any thread; reads (``get_messages`` and the lookups) take no lock and
are meant for the broker's event loop thread, the one that also writes. A
background thread fsyncs every ``flush_interval`` seconds and writes the
checkpoint and the JSON documents. With ``flush="sync"`` a put returns only after
its bytes are fsynced (consume queues are derived data, rebuilt by recovery, so
they are fsynced by the background flush, not per put).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rmqk.model.errors import FrameError
from rmqk.model.message import MessageProperty, offset_msg_id, parse_properties
from rmqk.wire.message_codec import (
    decode_message,
    java_properties_string,
)

from . import entry_check, recovery
from .commitlog import END_BLANK_MIN, CommitLog
from .consumequeue import ConsumeQueue
from .encoding import RecordEncoder, check_destination, tags_code_of
from .files import StoreError, fsync_dir
from .flushing import StoreFlushing
from .index import IndexConfig, IndexService, QueryMessageResult
from .offsets import ConsumerOffsets
from .reads import StoreReads
from .records import store_timestamp_of
from .results import BatchMessage, PutMessageStatus, PutResult, StoreStats, failed
from .retention import RetentionPolicy, StoreRetention
from .schedule import SCHEDULE_TOPIC, ScheduleService, parse_delay_levels
from .topics import TopicConfigs
from .writes import StoreWrites

__all__ = ["MessageStore"]

log = logging.getLogger("rmqk.broker.store")

_TRANSACTION_MASK = 0xC
_TRANSACTION_COMMIT = 0x8
# How far serving looks on either side of a damaged consume queue entry for the good
# entries that bound the records to rebuild it from (beyond: the log's start or end).
_REPAIR_REACH = 4096


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore(StoreReads, StoreWrites, StoreRetention, StoreFlushing):
    """Commit log, consume queues, offsets, topics and schedule under one directory."""

    def __init__(
        self,
        root: Path,
        *,
        flush: str = "async",
        segment_size: int = 64 * 1024 * 1024,
        cq_entries_per_file: int = 300_000,
        store_host: str = "127.0.0.1:10911",
        delay_levels: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        max_message_size: int = 4 * 1024 * 1024,
        flush_interval: float = 0.5,
        clock: Callable[[], int] | None = None,
        retention: RetentionPolicy | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        if flush not in ("async", "sync"):
            raise ValueError(f"flush must be 'async' or 'sync', got {flush!r}")
        if max_message_size + END_BLANK_MIN > segment_size:
            raise ValueError(
                f"segment_size {segment_size} cannot hold a message of max_message_size "
                f"{max_message_size}: make segment_size at least max_message_size + 8"
            )
        self.root = Path(root)
        self.flush_mode = flush
        self.segment_size = segment_size
        self.cq_entries_per_file = cq_entries_per_file
        self.store_host = store_host
        self.max_message_size = max_message_size
        self.flush_interval = flush_interval
        self.retention = retention or RetentionPolicy()
        self.now_ms: Callable[[], int] = clock or _now_ms
        self._encoder = RecordEncoder(store_host, max_message_size)
        self._msg_id_prefix = offset_msg_id(store_host, 0)[:-16]
        self.commit_log = CommitLog(self.root / "commitlog", segment_size)
        self._cq_root = self.root / "consumequeue"
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._topic_queues: dict[str, dict[int, ConsumeQueue]] = {}
        config = self.root / "config"
        self.consumer_offsets = ConsumerOffsets(config / "consumerOffset.json")
        self.topics = TopicConfigs(config / "topics.json", self.now_ms)
        self.schedule = ScheduleService(
            self, parse_delay_levels(delay_levels), config / "delayOffset.json"
        )
        self.index = IndexService(self.root / "index", index)
        self._listeners: list[Callable[[str, int, int], None]] = []
        self._lock = threading.Lock()  # writers
        self._flush_lock = threading.Lock()  # fsyncs and file removal
        self._dispatched = 0  # commit log offset up to which queues are written
        self._checkpointed: recovery.Checkpoint | None = None
        self._opened = False
        self._writable = False
        self.disk_full = ""
        self._write_failing = False
        self._lock_fd: int | None = None
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._schedule_task: asyncio.Task[None] | None = None
        self._clean_task: asyncio.Task[None] | None = None
        self.last_recovery: recovery.RecoveryReport | None = None
        self.cq_entries_rebuilt = 0
        self.cq_entries_unrepaired = 0

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Load everything, recover from a crash if there was one, start flushing."""
        if self._opened:
            raise StoreError(f"message store at {self.root} is already open")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StoreError(
                f"message store at {self.root} is in use by another store instance or process"
            ) from None
        try:
            self._load()
        except BaseException:
            self._close_files()
            raise
        self._opened = True
        self._writable = True
        self._stop_flusher.clear()
        self._flusher = threading.Thread(
            target=self._flush_loop, name=f"rmqk-store-flush:{self.root.name}", daemon=True
        )
        self._flusher.start()

    def _load(self) -> None:
        self.commit_log.load()
        self._cq_root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(self._cq_root.iterdir()):
            if not topic_dir.is_dir():
                raise StoreError(f"unexpected file in consume queue directory: {topic_dir}")
            for qid_dir in sorted(topic_dir.iterdir()):
                if not (qid_dir.is_dir() and qid_dir.name.isdigit()):
                    raise StoreError(f"unexpected entry in consume queue directory: {qid_dir}")
                cq = ConsumeQueue(
                    qid_dir, topic_dir.name, int(qid_dir.name), self.cq_entries_per_file
                )
                cq.load(self.commit_log.min_offset)
                self._register_queue(cq)
        checkpoint = recovery.read_checkpoint(self.root / "checkpoint.json")
        report = recovery.recover(
            self.commit_log,
            self._queues,
            checkpoint,
            self._new_queue,
            self._recovered_tags_code,
        )
        self.last_recovery = report
        self.cq_entries_rebuilt += report.entries_rebuilt
        self.cq_entries_unrepaired += report.entries_unrepaired
        if report.truncated_from is not None:
            log.warning(
                "commit log recovered: torn or invalid data at offset %d removed",
                report.truncated_from,
            )
        self._dispatched = self.commit_log.write_offset
        self.index.open(
            self.commit_log.min_offset,
            self.commit_log.write_offset,
            lambda start, stop, on_record: recovery.scan_records(
                self.commit_log, start, stop, on_record
            ),
        )
        # Records recovery walked over may exist only in the page cache of the process
        # that died: fsync them before the checkpoint below vouches for them.
        self.commit_log.synced_offset = min(report.scan_start, self.commit_log.write_offset)
        self.commit_log.sync(self.commit_log.write_offset)
        self.consumer_offsets.load()
        self.topics.load()
        self.schedule.load()
        # The recovered state is what is on disk now: record it so the next open
        # starts from here even if this process dies before its first flush.
        self._write_checkpoint(force=True)

    def close(self) -> None:
        """Flush everything and release the files. Safe to call twice."""
        if not self._opened:
            return
        self._writable = False
        self._stop_flusher.set()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        try:
            self.flush()
            self.consumer_offsets.persist()
            self.schedule.persist()
        finally:
            self._opened = False
            self._close_files()

    def _close_files(self) -> None:
        with self._flush_lock, self._lock:
            self.commit_log.close()
            self.index.close()
            for cq in self._queues.values():
                cq.close()
            self._queues.clear()
            self._topic_queues.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # also releases the flock
            self._lock_fd = None

    def __enter__(self) -> MessageStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------- async services

    def start(self) -> None:
        """Start the delay-level scheduler and the clean service in the running event loop.

        The clean service runs on the loop, not on the flush thread: reads take no
        lock, so segments may only be removed by the thread that reads them.
        """
        loop = asyncio.get_running_loop()
        if self._schedule_task is None or self._schedule_task.done():
            self._schedule_task = loop.create_task(self.run_schedule(), name="rmqk-store-schedule")
        if self._clean_task is None or self._clean_task.done():
            self._clean_task = loop.create_task(self.run_clean_loop(), name="rmqk-store-clean")

    async def stop(self) -> None:
        tasks = (self._schedule_task, self._clean_task)
        self._schedule_task = self._clean_task = None
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def run_schedule(self) -> None:
        """Deliver delayed messages when they are due, until cancelled."""
        await self.schedule.run()

    def add_listener(self, callback: Callable[[str, int, int], None]) -> None:
        """Call ``callback(topic, queue_id, new_max_offset)`` after every dispatch."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[str, int, int], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    # ------------------------------------------------------------------- writing

    def put_message(
        self,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        properties_raw: str,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int = 0,
        tags_code: int | None = None,
    ) -> PutResult:
        """Store one message (CommitLog.putMessage), delaying it when it asks to be.

        A message with ``DELAY`` > 0 (and no transaction or a committed one) is
        stored in SCHEDULE_TOPIC_XXXX queue ``level - 1`` with ``REAL_TOPIC`` and
        ``REAL_QID`` added, the level capped at the highest one; the schedule
        service puts it back in ``topic`` when due. ``tags_code`` defaults to the
        hash of the ``TAGS`` property (recovery always recomputes it that way).
        """
        problem = self._check_writable() or check_destination(topic, queue_id)
        if problem is not None:
            return problem
        delay_level = 0
        if "DELAY\x01" in properties_raw and sys_flag & _TRANSACTION_MASK in (
            0,
            _TRANSACTION_COMMIT,
        ):
            props = parse_properties(properties_raw)
            text = props.get(MessageProperty.DELAY_TIME_LEVEL, "0")
            try:
                delay_level = int(text)
            except ValueError:
                return failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    f"the DELAY property must be an integer delay level, got {text!r}",
                )
            if delay_level > 0:
                delay_level = min(delay_level, self.schedule.max_level)
                props[MessageProperty.DELAY_TIME_LEVEL] = str(delay_level)
                props[MessageProperty.REAL_TOPIC] = topic
                props[MessageProperty.REAL_QUEUE_ID] = str(queue_id)
                properties_raw = java_properties_string(props)
                topic, queue_id = SCHEDULE_TOPIC, delay_level - 1
        encoded = self._encoder.encode(
            topic,
            queue_id,
            body,
            flag,
            properties_raw,
            sys_flag,
            born_timestamp,
            born_host,
            reconsume_times,
        )
        if isinstance(encoded, PutResult):
            return encoded
        if delay_level <= 0 and tags_code is None:
            tags_code = tags_code_of(properties_raw)
        return self._append(topic, queue_id, [encoded], [tags_code or 0], delay_level)[0]

    def put_messages_batch(
        self,
        *,
        topic: str,
        queue_id: int,
        messages: Sequence[BatchMessage],
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int = 0,
    ) -> list[PutResult]:
        """Store a SEND_BATCH_MESSAGE batch contiguously with consecutive queue offsets.

        All or nothing: on any problem every result carries the same error. As on
        Apache, messages of a batch are never delayed (a broker rejects a batch
        whose request carries ``DELAY``; a ``DELAY`` inside one is stored as is),
        and the whole batch must fit within ``max_message_size``.
        """
        if not messages:
            return []
        problem = self._check_writable() or check_destination(topic, queue_id)
        records: list[bytes] = []
        tags: list[int] = []
        if problem is None:
            for index, message in enumerate(messages):
                encoded = self._encoder.encode(
                    topic,
                    queue_id,
                    message.body,
                    message.flag,
                    message.properties_raw,
                    sys_flag,
                    born_timestamp,
                    born_host,
                    reconsume_times,
                )
                if isinstance(encoded, PutResult):
                    problem = failed(encoded.status, f"batch message #{index}: {encoded.error}")
                    break
                records.append(encoded)
                tags.append(tags_code_of(message.properties_raw))
        if problem is None:
            total = sum(len(r) for r in records)
            if total > self.max_message_size:
                problem = failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    f"batch of {total} bytes exceeds max_message_size {self.max_message_size}",
                )
        if problem is not None:
            return [problem] * len(messages)
        return self._append(topic, queue_id, records, tags, 0)

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        for callback in self._listeners:
            try:
                callback(topic, queue_id, max_offset)
            except Exception:
                log.exception("store listener %r failed", callback)

    def deliver_scheduled(self, commit_log_offset: int, size: int) -> bool:
        """Put the scheduled record at ``commit_log_offset`` back in its real topic.

        Returns False when it should be tried again later (a store error); a record
        that is gone or unusable is skipped (True), as Java skips it.
        """
        record = self.commit_log.read(commit_log_offset, size)
        if record is None:
            return True
        try:
            fields, _ = decode_message(record, decompress=False)
        except FrameError as exc:
            log.error("scheduled message at %d is unreadable (%s); skipped", commit_log_offset, exc)
            return True
        props = parse_properties(fields.properties_raw)
        real_topic = props.get(MessageProperty.REAL_TOPIC)
        real_qid_text = props.get(MessageProperty.REAL_QUEUE_ID, "")
        if not real_topic or not real_qid_text.isdigit():
            log.error(
                "scheduled message at %d has no usable REAL_TOPIC/REAL_QID (%r, %r); skipped",
                commit_log_offset,
                real_topic,
                real_qid_text,
            )
            return True
        real_qid = int(real_qid_text)
        problem = self._check_writable() or check_destination(real_topic, real_qid)
        if problem is not None:
            if problem.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                return False
            log.error("scheduled message at %d skipped: %s", commit_log_offset, problem.error)
            return True
        encoded = self._encoder.encode(
            real_topic,
            real_qid,
            fields.body,
            fields.flag,
            fields.properties_raw,
            fields.sys_flag,
            fields.born_timestamp,
            fields.born_host,
            fields.reconsume_times,
        )
        if isinstance(encoded, PutResult):
            log.error("scheduled message at %d skipped: %s", commit_log_offset, encoded.error)
            return True
        result = self._append(
            real_topic, real_qid, [encoded], [tags_code_of(fields.properties_raw)], 0
        )[0]
        return result.ok

    # ------------------------------------------------------------------- queues

    def _register_queue(self, cq: ConsumeQueue) -> None:
        self._queues[(cq.topic, cq.queue_id)] = cq
        self._topic_queues.setdefault(cq.topic, {})[cq.queue_id] = cq

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self._cq_root / topic / str(queue_id), topic, queue_id, self.cq_entries_per_file
        )
        self._register_queue(cq)
        return cq

    def _queue_for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = self._new_queue(topic, queue_id)
            cq.directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(cq.directory.parent)
            fsync_dir(self._cq_root)
        return cq

    def _repair_entry(self, cq: ConsumeQueue, index: int) -> bool:
        """Rebuild from the commit log the run of entries around ``index`` that do not
        describe their records (serving met one); True if any entry was rewritten.

        Entries that no record rebuilds land in ``cq.unrepaired`` and are not looked
        for again. Takes the writer lock: a rebuild writes entries and must not
        interleave with a put.
        """
        with self._lock:
            if index in cq.unrepaired or not cq.min_offset <= index < cq.max_offset:
                return False
            log_ = self.commit_log
            end = log_.write_offset

            def good(i: int) -> bool:
                e = cq.entry(i)
                return e is not None and (
                    recovery.judge_entry(log_, end, cq, i, e[0], e[1]) == entry_check.OK
                )

            first = index
            while first > cq.min_offset and index - first < _REPAIR_REACH and not good(first - 1):
                first -= 1
            stop = index + 1
            while stop < cq.max_offset and stop - index < _REPAIR_REACH and not good(stop):
                stop += 1
            # The good neighbours' records bound the run's records (see rebuild_entries).
            lo = hi = None
            if first > cq.min_offset and good(first - 1):
                lo = cq.entry(first - 1)
            if stop < cq.max_offset and good(stop):
                hi = cq.entry(stop)
            fixed, left = recovery.rebuild_entries(
                log_,
                cq,
                first,
                stop,
                log_.min_offset if lo is None else lo[0],
                end if hi is None else hi[0],
                self._recovered_tags_code,
            )
            self.cq_entries_rebuilt += fixed
            self.cq_entries_unrepaired += left
            return fixed > 0

    def _recovered_tags_code(self, topic: str, properties_raw: str, store_timestamp: int) -> int:
        if topic == SCHEDULE_TOPIC:
            text = parse_properties(properties_raw).get(MessageProperty.DELAY_TIME_LEVEL, "")
            if text.isdigit() and int(text) > 0:
                return store_timestamp + self.schedule.delay_of(int(text))
        return tags_code_of(properties_raw)

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Stored records of ``topic`` with ``key`` (a KEYS key or the UNIQ_KEY) in [begin, end]."""
        return self.index.query_message(
            topic, key, max_num, begin, end, self.look_message, lambda r: store_timestamp_of(r, 0)
        )

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._topic_queues.get(topic, ()))

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) that has a consume queue."""
        return sorted(self._queues)

    def stats(self) -> StoreStats:
        return StoreStats(
            self.commit_log.min_offset,
            self.commit_log.max_offset,
            len(self.commit_log.segments),
            len(self._queues),
            self.last_recovery,
            self.cq_entries_rebuilt,
            self.cq_entries_unrepaired,
        )
