"""Bringing the store back to a consistent state when it opens.

The checkpoint (``checkpoint.json``) says: every commit log byte below
``commitLogOffset`` is fsynced, and every record below it has its consume queue
entry fsynced too; it also lists each queue's max offset at that moment. It is
written by the flush thread after those fsyncs, and on close.

Opening then does, whatever the way the previous process ended:

1. Choose where to scan from: the checkpoint offset when it is a record boundary
   and no consume queue holds fewer entries than the checkpoint lists; otherwise
   (no checkpoint, a deleted or damaged consume queue) the commit log's start,
   a full rebuild.
2. Walk the commit log from there, validating each record (magic, sizes that add
   up, body CRC, the PHYSICALOFFSET field equal to the record's position) and
   writing its consume queue entry where it is missing or different. The first
   record that fails ends the log: a torn write or garbage.
3. Cut the log there (later segments deleted, the rest of the segment zeroed so
   no stale bytes can pass for records later) and drop consume queue entries
   pointing past the new end.

A queue offset that skips ahead of its consume queue during an incremental scan
means that queue lost entries the checkpoint did not know about: the scan
restarts as a full rebuild. Nothing acknowledged is lost: with ``flush="sync"``
an acknowledged record was fsynced before the put returned, so it precedes any
torn tail; with ``flush="async"`` a process kill loses nothing either (the page
cache survives it), only a power loss can.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import attrs

from .commitlog import END_BLANK_MIN, CommitLog
from .consumequeue import ConsumeQueue
from .files import replace_file
from .records import BLANK_MAGIC, RecordInfo, inspect_record, read_total_and_magic

__all__ = ["Checkpoint", "RecoveryReport", "read_checkpoint", "recover", "write_checkpoint"]

log = logging.getLogger("rmqk.broker.store.recovery")


@attrs.frozen
class Checkpoint:
    commit_log_offset: int
    queue_maxima: tuple[tuple[str, int, int], ...]  # (topic, queue id, max offset)


@attrs.frozen
class RecoveryReport:
    scan_start: int
    commit_log_end: int
    records_scanned: int
    entries_written: int
    entries_trimmed: int
    truncated_from: int | None  # where invalid bytes were found and cut, if anywhere
    full_rebuild: bool
    reason: str


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Checkpoint(
            int(data["commitLogOffset"]),
            tuple((str(t), int(q), int(m)) for t, q, m in data["queueMaxOffsets"]),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable checkpoint %s (%s): rebuilding from the log", path, exc)
        return None


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    data = json.dumps(
        {
            "commitLogOffset": checkpoint.commit_log_offset,
            "queueMaxOffsets": [list(m) for m in checkpoint.queue_maxima],
        }
    ).encode("utf-8")
    replace_file(path, data)


class _Gap(Exception):
    def __init__(self, topic: str, queue_id: int, expected: int, found: int) -> None:
        super().__init__(
            f"consume queue {topic}:{queue_id} ends at {expected} but the commit log "
            f"continues it at {found}"
        )


def _is_boundary(commit_log: CommitLog, offset: int) -> bool:
    """Whether a record, a BLANK, the end of the data or a segment edge is at ``offset``."""
    seg = commit_log.segment_at(offset)
    if seg is None:
        last = commit_log.segments[-1] if commit_log.segments else None
        return last is None or offset == last.base + commit_log.segment_size
    pos = offset - seg.base
    if pos == 0:
        return True
    if pos > commit_log.segment_size - END_BLANK_MIN:
        return False
    total, magic = read_total_and_magic(seg.mm, pos)
    if total == 0 and magic == 0:
        return True
    if magic == BLANK_MAGIC:
        return total == commit_log.segment_size - pos
    limit = commit_log.segment_size - END_BLANK_MIN
    return inspect_record(seg.mm, pos, limit, offset) is not None


def _scan(
    commit_log: CommitLog, start: int, on_record: Callable[[int, RecordInfo], None]
) -> tuple[int, int, bool]:
    """Validate records from ``start``; returns (end, records, whether bad bytes ended it)."""
    size = commit_log.segment_size
    limit = size - END_BLANK_MIN
    offset = start
    count = 0
    while True:
        seg = commit_log.segment_at(offset)
        if seg is None:
            return offset, count, False
        pos = offset - seg.base
        if pos > limit:
            return offset, count, True
        total, magic = read_total_and_magic(seg.mm, pos)
        if magic == BLANK_MAGIC and total == size - pos:
            offset = seg.base + size
            continue
        if total == 0 and magic == 0:
            return offset, count, False
        info = inspect_record(seg.mm, pos, limit, offset)
        if info is None:
            return offset, count, True
        on_record(offset, info)
        offset += info.size
        count += 1


def recover(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    checkpoint: Checkpoint | None,
    new_queue: Callable[[str, int], ConsumeQueue],
    tags_code: Callable[[str, str, int], int],
) -> RecoveryReport:
    """Validate the log from a safe point, rebuild queue entries, cut a torn tail."""
    reason = ""
    full = True
    start = commit_log.min_offset
    damaged = [cq.damaged for cq in queues.values() if cq.damaged]
    if checkpoint is None:
        reason = "no checkpoint"
    elif damaged:
        reason = damaged[0]
    else:
        short = [
            (t, q, m)
            for t, q, m in checkpoint.queue_maxima
            if (cq := queues.get((t, q))) is None or cq.max_offset < m
        ]
        offset = checkpoint.commit_log_offset
        if short:
            t, q, m = short[0]
            reason = f"consume queue {t}:{q} has fewer than the {m} entries checkpointed"
        elif offset < commit_log.min_offset:
            reason = "the checkpoint precedes the commit log's first segment"
        elif not _is_boundary(commit_log, offset):
            reason = f"the checkpoint offset {offset} is not a record boundary"
        else:
            full = False
            start = offset
            reason = "incremental from the checkpoint"

    written = 0

    def dispatch(strict: bool) -> Callable[[int, RecordInfo], None]:
        def on_record(offset: int, info: RecordInfo) -> None:
            nonlocal written
            key = (info.topic, info.queue_id)
            cq = queues.get(key)
            if cq is None:
                cq = new_queue(info.topic, info.queue_id)
            code = tags_code(info.topic, info.properties_raw, info.store_timestamp)
            q = info.queue_offset
            if q < cq.max_offset:
                if q < cq.min_offset:
                    return  # its consume queue file was already retired
                if cq.entry(q) == (offset, info.size, code):
                    return
            elif q > cq.max_offset and strict:
                raise _Gap(info.topic, info.queue_id, cq.max_offset, q)
            cq.write_at(q, offset, info.size, code)
            written += 1

        return on_record

    try:
        end, scanned, bad = _scan(commit_log, start, dispatch(strict=not full))
    except _Gap as gap:
        log.warning("%s: rebuilding every consume queue from the commit log", gap)
        full = True
        reason = str(gap)
        start = commit_log.min_offset
        end, scanned, bad = _scan(commit_log, start, dispatch(strict=False))

    commit_log.truncate(end)
    trimmed = 0
    for cq in list(queues.values()):
        trimmed += cq.trim_beyond(end)
        cq.correct_min(commit_log.min_offset)
    return RecoveryReport(
        scan_start=start,
        commit_log_end=end,
        records_scanned=scanned,
        entries_written=written,
        entries_trimmed=trimmed,
        truncated_from=end if bad else None,
        full_rebuild=full,
        reason=reason,
    )
