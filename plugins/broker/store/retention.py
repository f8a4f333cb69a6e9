"""Retention: deleting old commit log segments, and the queue entries and topics with them.

A mixin of :class:`~.message_store.MessageStore`; every change takes both of
its locks, so no flush or write sees a half-removed file.

:meth:`StoreRetention.run_clean_service` is Apache's CleanCommitLogService, run
on the event loop (see ``MessageStore.start``) every ``clean_resource_interval``
seconds with the same settings and defaults (:class:`RetentionPolicy`): segments
last written more than ``file_reserved_time`` hours ago are deleted at the
``delete_when`` hours, or at any time once the disk is more than
``disk_max_used_space_ratio`` percent used; above
``disk_space_clean_forcibly_ratio`` even unexpired segments go (oldest first,
never the one being written, at most 10 a run), and above
``disk_space_warning_level_ratio`` the store refuses puts (SERVICE_NOT_AVAILABLE,
disk full) until space is back below it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .files import fsync_dir
from .index import IndexService

__all__ = ["RetentionPolicy", "StoreRetention"]

log = logging.getLogger("rmqk.broker.store")

_DELETE_FILES_BATCH_MAX = 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX


def _hours(text: str) -> tuple[int, ...]:
    try:
        hours = tuple(int(h) for h in text.split(";") if h.strip())
    except ValueError:
        hours = (-1,)
    if not hours or any(not 0 <= h <= 23 for h in hours):
        raise ValueError(f"delete_when must be hours 0-23 separated by ';' ('04'), got {text!r}")
    return hours


def _ratio(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


@attrs.frozen
class RetentionPolicy:
    """MessageStoreConfig's retention settings, with Apache's defaults."""

    file_reserved_time: float = 72.0  # hours
    delete_when: str = "04"  # hours of the day, ';'-separated, local time
    disk_max_used_space_ratio: int = 75  # percent; Apache clamps it to [10, 95]
    clean_resource_interval: float = 10.0  # seconds (Apache: 10000 ms)
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    clean_file_forcibly_enable: bool = True

    def __attrs_post_init__(self) -> None:
        _hours(self.delete_when)
        if self.file_reserved_time < 0:
            raise ValueError(f"file_reserved_time must be >= 0, got {self.file_reserved_time}")
        if self.clean_resource_interval <= 0:
            raise ValueError(
                f"clean_resource_interval must be positive, got {self.clean_resource_interval}"
            )
        _ratio("disk_space_clean_forcibly_ratio", self.disk_space_clean_forcibly_ratio)
        _ratio("disk_space_warning_level_ratio", self.disk_space_warning_level_ratio)

    @property
    def max_used_ratio(self) -> float:
        return min(95, max(10, self.disk_max_used_space_ratio)) / 100.0


class StoreRetention:
    """Removes what the store no longer keeps."""

    root: Path
    commit_log: CommitLog
    index: IndexService
    segment_size: int
    now_ms: Callable[[], int]
    retention: RetentionPolicy
    disk_full: str
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
            deleted = self.commit_log.delete_segments(commit_log_offset)
            self.index.delete_expired(self.commit_log.min_offset)
            return deleted

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

    def delete_expired(
        self,
        max_age_ms: int,
        *,
        now_ms: int | None = None,
        forcibly: bool = False,
        limit: int | None = None,
    ) -> int:
        """Delete segments last written more than ``max_age_ms`` ago (fileReservedTime),
        or the oldest ones whatever their age when ``forcibly`` (at most ``limit``),
        then clean the consume queues. Returns segments deleted."""
        now = self.now_ms() if now_ms is None else now_ms
        cutoff = -1
        for count, seg in enumerate(list(self.commit_log.segments[:-1])):
            if limit is not None and count >= limit:
                break
            modified = os.fstat(seg.fd).st_mtime_ns // 1_000_000
            if now - modified <= max_age_ms and not forcibly:
                break
            cutoff = seg.base + self.segment_size
        removed = self.delete_commit_log_before(cutoff) if cutoff >= 0 else 0
        if removed:
            self.clean_consume_queues()
        return removed

    def disk_used_ratio(self) -> float:
        """How full the store's file system is (UtilAll.getDiskPartitionSpaceUsedPercent)."""
        st = os.statvfs(self.root)
        if st.f_blocks == 0:
            return -1.0
        return (st.f_blocks - st.f_bavail) / st.f_blocks

    def run_clean_service(self) -> int:
        """One run of CleanCommitLogService.deleteExpiredFiles; returns segments deleted."""
        policy = self.retention
        ratio = self.disk_used_ratio()
        clean_now = False
        if ratio > policy.disk_space_warning_level_ratio:
            if not self.disk_full:
                log.error("disk %.0f%% used: refusing puts until space is freed", ratio * 100)
            self.disk_full = (
                f"disk full: {ratio:.0%} of {self.root} used, above "
                f"disk_space_warning_level_ratio {policy.disk_space_warning_level_ratio}"
            )
            clean_now = True
        else:
            if self.disk_full:
                log.warning("disk %.0f%% used: accepting puts again", ratio * 100)
            self.disk_full = ""
            clean_now = ratio > policy.disk_space_clean_forcibly_ratio
        now = self.now_ms()
        time_up = time.localtime(now / 1000).tm_hour in _hours(policy.delete_when)
        space_full = ratio < 0 or ratio > policy.max_used_ratio
        if not (time_up or space_full):
            return 0
        forcibly = policy.clean_file_forcibly_enable and clean_now
        return self.delete_expired(
            int(policy.file_reserved_time * 3_600_000),
            now_ms=now,
            forcibly=forcibly,
            limit=_DELETE_FILES_BATCH_MAX,
        )

    async def run_clean_loop(self) -> None:
        """Run the clean service every ``clean_resource_interval`` seconds, until cancelled."""
        failing = False
        while True:
            await asyncio.sleep(self.retention.clean_resource_interval)
            try:
                self.run_clean_service()
                failing = False
            except OSError as exc:
                if not failing:  # one line per run of failures
                    log.error("commit log clean service failed: %s", exc)
                failing = True
            except Exception:
                log.exception("commit log clean service failed")
