"""Durability: fsync what was written and record it in the checkpoint.

A mixin of :class:`~.message_store.MessageStore`. A background thread flushes
every ``flush_interval`` seconds and persists the JSON documents (consumer
offsets, delay progress) every few seconds, as Apache's flush services do.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from . import recovery
from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .index import IndexService
from .offsets import ConsumerOffsets
from .schedule import ScheduleService
from .topics import TopicConfigs

__all__ = ["StoreFlushing"]

log = logging.getLogger("rmqk.broker.store")

_OFFSETS_PERSIST_INTERVAL = 5.0  # flushConsumerOffsetInterval


class StoreFlushing:
    """fsyncs, the checkpoint, and the periodic flush loop."""

    root: Path
    commit_log: CommitLog
    consumer_offsets: ConsumerOffsets
    schedule: ScheduleService
    topics: TopicConfigs
    index: IndexService
    flush_interval: float
    _queues: dict[tuple[str, int], ConsumeQueue]
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _dispatched: int
    _checkpointed: recovery.Checkpoint | None
    _opened: bool
    _flusher: threading.Thread | None
    _stop_flusher: threading.Event

    def flush(self) -> None:
        """fsync what was written and record it in the checkpoint."""
        if not self._opened and self._flusher is None:
            return
        with self._flush_lock:
            with self._lock:
                dispatched = self._dispatched
                queues = list(self._queues.values())
                maxima = tuple((cq.topic, cq.queue_id, cq.max_offset) for cq in queues)
            self.commit_log.sync(dispatched)
            for cq in queues:
                cq.sync()
            self._record_checkpoint(recovery.Checkpoint(dispatched, maxima), force=False)
            self.index.flush()

    def _write_checkpoint(self, *, force: bool) -> None:
        maxima = tuple((cq.topic, cq.queue_id, cq.max_offset) for cq in self._queues.values())
        checkpoint = recovery.Checkpoint(self._dispatched, maxima)
        if force or checkpoint != self._checkpointed:
            for cq in self._queues.values():
                cq.sync()
            self._record_checkpoint(checkpoint, force=True)

    def _record_checkpoint(self, checkpoint: recovery.Checkpoint, *, force: bool) -> None:
        # Unchanged checkpoints are not rewritten: an idle store does no I/O.
        if force or checkpoint != self._checkpointed:
            recovery.write_checkpoint(self.root / "checkpoint.json", checkpoint)
            self._checkpointed = checkpoint

    def _flush_loop(self) -> None:
        last_documents = time.monotonic()
        failing = False
        while not self._stop_flusher.wait(self.flush_interval):
            try:
                self.flush()
                if time.monotonic() - last_documents >= _OFFSETS_PERSIST_INTERVAL:
                    last_documents = time.monotonic()
                    self.consumer_offsets.persist()
                    self.schedule.persist()
                    self.topics.persist_pending()
                if failing:
                    log.warning("periodic flush of the message store succeeds again")
                failing = False
            except OSError as exc:
                # One line per run of failures (a full disk fails every round).
                if not failing:
                    log.error("periodic flush of the message store failed: %s", exc)
                failing = True
            except Exception:
                log.exception("periodic flush of the message store failed")
