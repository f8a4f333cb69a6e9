"""Appending records: the put path under the writer lock, and what a failed write undoes.

A mixin of :class:`~.message_store.MessageStore`. A put that cannot be written
whole leaves nothing behind: the commit log is cut back to where the put began
(the partial bytes zeroed and their blocks freed, which needs no disk space) and
the queue entries it wrote are cleared, so a refused message is never delivered,
not even after a restart (a retrying producer would otherwise duplicate it).
The store then stays writable: the next put succeeds as soon as the disk has
room again. A full disk (ENOSPC, EDQUOT) answers SERVICE_NOT_AVAILABLE, as
Apache answers once its clean service has marked the disk full.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable

import attrs

from rmqk.wire.message_codec import patch_stored_message

from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .index import IndexService
from .results import PutMessageStatus, PutResult, failed
from .schedule import ScheduleService

__all__ = ["StoreWrites", "is_disk_full"]

log = logging.getLogger("rmqk.broker.store")

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: OSError) -> bool:
    return exc.errno in _DISK_FULL


class StoreWrites:
    """The write side of the message store."""

    commit_log: CommitLog
    schedule: ScheduleService
    index: IndexService
    flush_mode: str
    now_ms: Callable[[], int]
    _msg_id_prefix: str
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _dispatched: int
    _opened: bool
    _writable: bool
    disk_full: str  # why writes are refused for lack of space ("" when they are not)
    _write_failing: bool

    def _queue_for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        raise NotImplementedError

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        raise NotImplementedError

    def _check_writable(self) -> PutResult | None:
        if not self._opened:
            return failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not open")
        if not self._writable:
            return failed(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                "message store is not writable after a write error; restart it to recover",
            )
        if self.disk_full:
            return failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.disk_full)
        return None

    def _write_failed(self, what: str, exc: OSError) -> PutResult:
        """The result for a refused put; one log line per run of failures, no traceback."""
        if not self._write_failing:
            log.error("%s failed (%s): refusing puts until a write succeeds", what, exc)
            self._write_failing = True
        if is_disk_full(exc):
            return failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"disk full: {what}: {exc}")
        return failed(PutMessageStatus.UNKNOWN_ERROR, f"{what} failed: {exc}")

    def _undo(self, cq: ConsumeQueue | None, first_qoff: int, offset: int) -> None:
        """Forget a put that was not written whole (the writer lock is held)."""
        try:
            if cq is not None:
                cq.forget_from(first_qoff)
            self.commit_log.cut_back(offset)
        except OSError:
            # The store no longer knows what is on disk: stop writing; a restart
            # recovers from what the files hold.
            self._writable = False
            log.exception("cannot undo a failed put; the store stops accepting writes")

    def _append(
        self,
        topic: str,
        queue_id: int,
        records: list[bytes],
        tags: list[int],
        delay_level: int,
    ) -> list[PutResult]:
        sizes = [len(r) for r in records]
        total = sum(sizes)
        results: list[PutResult] = []
        with self._lock:
            refused = self._check_writable()
            if refused is not None:
                return [refused] * len(records)
            try:
                cq = self._queue_for_write(topic, queue_id)
                store_ts = self.now_ms()
                first_qoff = cq.max_offset
                offset = self.commit_log.reserve(total)
            except OSError as exc:
                failure = self._write_failed("creating a store file", exc)
                if failure.status is PutMessageStatus.UNKNOWN_ERROR:
                    failure = attrs.evolve(failure, status=PutMessageStatus.CREATE_MAPEDFILE_FAILED)
                return [failure] * len(records)
            buf = bytearray(records[0]) if len(records) == 1 else bytearray(b"".join(records))
            pos = 0
            for i, size in enumerate(sizes):
                patch_stored_message(
                    buf,
                    pos,
                    queue_offset=first_qoff + i,
                    commit_log_offset=offset + pos,
                    store_timestamp=store_ts,
                )
                pos += size
            try:
                self.commit_log.write(offset, buf)
            except OSError as exc:
                self._undo(None, first_qoff, offset)
                return [self._write_failed("writing the commit log", exc)] * len(records)
            try:
                pos = 0
                for i, size in enumerate(sizes):
                    code = tags[i]
                    if delay_level:
                        code = store_ts + self.schedule.delay_of(delay_level)
                    cq.append(offset + pos, size, code)
                    results.append(
                        PutResult(
                            True,
                            offset + pos,
                            first_qoff + i,
                            store_ts,
                            f"{self._msg_id_prefix}{offset + pos:016X}",
                            size,
                            None,
                            PutMessageStatus.PUT_OK,
                            topic,
                            queue_id,
                        )
                    )
                    pos += size
            except OSError as exc:
                # Without its queue entry the record must not stay in the log either:
                # recovery would index it and deliver a message the producer was told
                # was refused.
                self._undo(cq, first_qoff, offset)
                return [self._write_failed("writing a consume queue", exc)] * len(records)
            if self._write_failing:
                log.warning("store writes succeed again")
                self._write_failing = False
            end = offset + total
            self.index.dispatch(offset, buf)
            self._dispatched = end
            new_max = cq.max_offset
        if self.flush_mode == "sync":
            try:
                with self._flush_lock:
                    self.commit_log.sync(end)
            except OSError as exc:
                log.error("fsync of the commit log failed: %s", exc)
                return [
                    attrs.evolve(
                        r,
                        ok=False,
                        status=PutMessageStatus.FLUSH_DISK_TIMEOUT,
                        error=f"fsync of the commit log failed: {exc}",
                    )
                    for r in results
                ]
        self._notify(topic, queue_id, new_max)
        if delay_level:
            self.schedule.wake()
        return results
