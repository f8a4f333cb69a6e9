"""Retention: deleting old commit log segments, and the queue entries and topics with them.

A mixin of :class:`~.message_store.MessageStore`; every change takes both of
its locks, so no flush or write sees a half-removed file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .files import fsync_dir

__all__ = ["StoreRetention"]


class StoreRetention:
    """Removes what the store no longer keeps."""

    commit_log: CommitLog
    segment_size: int
    now_ms: Callable[[], int]
    _queues: dict[tuple[str, int], ConsumeQueue]
    _topic_queues: dict[str, dict[int, ConsumeQueue]]
    _cq_root: Path
    _lock: threading.Lock
    _flush_lock: threading.Lock

    def delete_commit_log_before(self, commit_log_offset: int) -> int:
        """Delete whole commit log segments that end at or before the offset (never the
        last one). Consume queues keep pointing at them until
        :meth:`clean_consume_queues`, as between Java's two clean services, so
        pulls meanwhile answer MESSAGE_WAS_REMOVING. Returns segments deleted."""
        with self._flush_lock, self._lock:
            return self.commit_log.delete_segments(commit_log_offset)

    def clean_consume_queues(self) -> int:
        """Drop consume queue files and entries that precede the commit log's start."""
        removed = 0
        with self._flush_lock, self._lock:
            log_min = self.commit_log.min_offset
            for cq in self._queues.values():
                removed += cq.correct_min(log_min)
        return removed

    def delete_topic(self, topic: str) -> int:
        """Drop a topic's consume queues (Java's cleanUnusedTopic after DELETE_TOPIC_IN_BROKER).

        Its records stay in the commit log until retention deletes them; only a full
        rebuild (no usable checkpoint) would index them again. Returns queues dropped.
        """
        with self._flush_lock, self._lock:
            queues = self._topic_queues.pop(topic, {})
            for qid, cq in queues.items():
                del self._queues[(topic, qid)]
                cq.close()
                for path in sorted(cq.directory.glob("*")):
                    path.unlink()
                cq.directory.rmdir()
            topic_dir = self._cq_root / topic
            if topic_dir.is_dir() and not any(topic_dir.iterdir()):
                topic_dir.rmdir()
            if queues:
                fsync_dir(self._cq_root)
        return len(queues)

    def delete_expired(self, max_age_ms: int, *, now_ms: int | None = None) -> int:
        """Delete segments last written more than ``max_age_ms`` ago (fileReservedTime),
        then clean the consume queues. Returns segments deleted."""
        now = self.now_ms() if now_ms is None else now_ms
        cutoff = -1
        for seg in list(self.commit_log.segments[:-1]):
            modified = os.fstat(seg.fd).st_mtime_ns // 1_000_000
            if now - modified <= max_age_ms:
                break
            cutoff = seg.base + self.segment_size
        removed = self.delete_commit_log_before(cutoff) if cutoff >= 0 else 0
        if removed:
            self.clean_consume_queues()
        return removed
