"""Bringing the store back to a consistent state when it opens.

The checkpoint (``checkpoint.json``) says: every commit log byte below
``commitLogOffset`` is fsynced, and every record below it has its consume queue
entry fsynced too; it also lists each queue's max offset at that moment. It is
written by the flush thread after those fsyncs, and on close.

Opening then does, whatever the way the previous process ended:

1. Find the end of the commit log, from the checkpoint offset when it is a record
   boundary, else from the log's start. The consume queues play no part in this
   choice: they are derived data and their damage is repaired, never paid for
   with commit log bytes.
2. Walk the log from there, validating each record (magic, sizes that add up,
   body CRC, the PHYSICALOFFSET field equal to the record's position) and writing
   its consume queue entry where it is missing or different. A record that fails
   in the middle of the log is skipped and reported (a log line, and
   ``RecoveryReport.bad_records``), never a reason to drop what follows it:
   a whole frame whose body CRC fails keeps its queue entry (the consumer's
   bad-record handling skips it); unreadable bytes are stepped over to the next
   valid record, found by its magic and self-referencing PHYSICALOFFSET. Only
   bytes that no valid record follows are a torn tail.
3. When a consume queue is short of what the checkpoint lists, has a missing
   file, or the walk meets a queue offset ahead of its queue, re-dispatch every
   record from the log's start up to the end found in 1 (a rebuild).
4. Cut the torn tail (later segments deleted, the rest of the segment zeroed so
   no stale bytes can pass for records later).
5. Check every consume queue entry against the record it points at (its offset,
   size, topic, queue id and queue offset, and its tags code recomputed from the
   record; see entry_check.py) and rebuild the entries that do not match from the
   records the commit log holds between their good neighbours, one WARNING per run
   of rebuilt entries. Issue 25: one flipped byte in an entry's commit log offset,
   below the checkpoint, made its message undeliverable.
6. Drop consume queue entries pointing past the new end.

Apache's recoverNormally/recoverAbnormally stop at the first record that fails
checkMessageAndReturnSize and truncate everything after it; this store goes
beyond that so that one damaged record cannot take acknowledged messages after
it with it. Nothing acknowledged is lost: with ``flush="sync"`` an acknowledged
record was fsynced before the put returned, so it precedes any torn tail; with
``flush="async"`` a process kill loses nothing either (the page cache survives
it), only a power loss can.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from rmqk.wire.message_codec import MAGIC_CODE_V1, MAGIC_CODE_V2

from .commitlog import END_BLANK_MIN, CommitLog, Segment
from .consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue
from .entry_check import ELSEWHERE, OK, examine, judge
from .files import all_zero, read_at, replace_file
from .records import BLANK_MAGIC, RecordInfo, inspect_record, read_total_and_magic

__all__ = [
    "Checkpoint",
    "RecoveryReport",
    "check_queue_entries",
    "judge_entry",
    "read_checkpoint",
    "rebuild_entries",
    "recover",
    "scan_records",
    "write_checkpoint",
]

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
    bad_records: int = 0  # damaged records (or unreadable ranges) skipped, not truncated
    # Consume queue entries that did not describe their records (step 5): rebuilt from the
    # commit log, or left as they were because the log holds no record of theirs.
    entries_rebuilt: int = 0
    entries_unrepaired: int = 0


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


class _Scan:
    """One walk over the commit log: counts, and the damage it stepped over.

    Damage is only "in the middle" once a valid record follows it; damage that
    nothing valid follows is the torn tail, and the walk ends where it starts.
    """

    def __init__(self, commit_log: CommitLog) -> None:
        self.log = commit_log
        self.records = 0
        self.bad_records = 0
        self.torn = False
        # Damage seen since the last valid record: (start, end, why, whole frame or None).
        self._pending: list[tuple[int, int, str, RecordInfo | None]] = []

    def _settle(self, on_record: Callable[[int, RecordInfo], None]) -> None:
        for start, end, why, info in self._pending:
            self.bad_records += 1
            log.error(
                "commit log bytes [%d, %d) are %s: skipped, the records after them are kept",
                start,
                end,
                why,
            )
            if info is not None:
                # Its queue keeps the entry, so queue offsets stay contiguous; the
                # consumer's bad-record handling skips the record itself.
                on_record(start, info)
        self._pending.clear()

    def _end(self, offset: int, torn: bool) -> int:
        if self._pending:
            offset = self._pending[0][0]
            torn = True
            self._pending.clear()
        self.torn = self.torn or torn
        return offset

    def run(
        self, start: int, stop: int | None, on_record: Callable[[int, RecordInfo], None]
    ) -> int:
        """Validate records from ``start`` (up to ``stop``, if given); returns the end."""
        log_ = self.log
        size = log_.segment_size
        limit = size - END_BLANK_MIN
        offset = start
        while stop is None or offset < stop:
            seg = log_.segment_at(offset)
            if seg is None:
                return self._end(offset, False)
            pos = offset - seg.base
            if pos <= limit:
                total, magic = _header(seg, pos)
                if magic == BLANK_MAGIC and total == size - pos:
                    self._settle(on_record)
                    offset = seg.base + size
                    continue
                info = _record(seg, pos, limit, offset, check_crc=True)
                if info is not None:
                    self._settle(on_record)
                    on_record(offset, info)
                    offset += info.size
                    self.records += 1
                    continue
                info = _record(seg, pos, limit, offset, check_crc=False)
                if info is not None:
                    why = "a record whose body fails its CRC"
                    self._pending.append((offset, offset + info.size, why, info))
                    offset += info.size
                    continue
            found = None if all_zero(seg.fd, pos, size) else _next_record(seg, pos + 1)
            if found is None and seg is not log_.segments[-1]:
                found = size  # a later segment exists: this one was finished
            if found is None:
                return self._end(offset, not all_zero(seg.fd, pos, size))
            why = "zeros (a hole)" if all_zero(seg.fd, pos, found) else "unreadable"
            self._pending.append((offset, seg.base + found, why, None))
            offset = seg.base + found
        self._settle(on_record)
        return offset


_MAGICS = tuple(struct.pack(">i", m) for m in (MAGIC_CODE_V1, MAGIC_CODE_V2, BLANK_MAGIC))


def _header(seg: Segment, pos: int) -> tuple[int, int]:
    data = read_at(seg.fd, pos, 8)
    return read_total_and_magic(data, 0) if len(data) == 8 else (0, 0)


def _record(
    seg: Segment, pos: int, limit: int, offset: int, *, check_crc: bool
) -> RecordInfo | None:
    """The record at ``pos`` if it is a whole valid one (read with pread, see read_at)."""
    total, magic = _header(seg, pos)
    if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2) or not 0 < total <= limit - pos:
        return None
    data = read_at(seg.fd, pos, total)
    return inspect_record(data, 0, len(data), offset, check_crc=check_crc)


def _next_record(seg: Segment, pos: int) -> int | None:
    """The position of the first valid record (or end marker) in ``seg`` after ``pos``."""
    size = len(seg.mm)
    limit = size - END_BLANK_MIN
    rest = read_at(seg.fd, pos, size - pos)  # only read when non-zero bytes are there
    nxt = {m: rest.find(m, 4) for m in _MAGICS}
    while True:
        live = [(at, m) for m, at in nxt.items() if at >= 0]
        if not live:
            return None
        at, magic = min(live)
        candidate = at - 4
        if magic == _MAGICS[2]:
            if read_total_and_magic(rest, candidate)[0] == size - (pos + candidate):
                return pos + candidate
        elif (
            inspect_record(
                rest, candidate, limit - pos, seg.base + pos + candidate, check_crc=False
            )
            is not None
        ):
            return pos + candidate
        nxt[magic] = rest.find(magic, at + 1)


def scan_records(
    commit_log: CommitLog, start: int, stop: int, on_record: Callable[[int, RecordInfo], None]
) -> int:
    """Call ``on_record`` for each valid record in [start, stop), stepping over damage."""
    return _Scan(commit_log).run(start, stop, on_record)


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
    total, magic = _header(seg, pos)
    if total == 0 and magic == 0:
        return True
    if magic == BLANK_MAGIC:
        return total == commit_log.segment_size - pos
    limit = commit_log.segment_size - END_BLANK_MIN
    return _record(seg, pos, limit, offset, check_crc=False) is not None


_RECORD_HEAD = struct.Struct(">iiiiiqq")  # total magic crc queueId flag queueOffset phys


def _is_its_record(
    commit_log: CommitLog, cq: ConsumeQueue, index: int, phys: int, size: int
) -> bool:
    """Whether a queue entry points at the head of the record it indexes."""
    if phys < commit_log.min_offset:
        return True  # retention removed it: nothing to check against, and max must stay
    seg = commit_log.segment_at(phys)
    if seg is None:
        return False
    head = read_at(seg.fd, phys - seg.base, _RECORD_HEAD.size)
    if len(head) != _RECORD_HEAD.size:
        return False
    total, magic, _crc, qid, _flag, qoff, at = _RECORD_HEAD.unpack(head)
    return magic in (MAGIC_CODE_V1, MAGIC_CODE_V2) and (total, qid, qoff, at) == (
        size,
        cq.queue_id,
        index,
        phys,
    )


def _rebuild_reason(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    checkpoint: Checkpoint | None,
) -> str:
    """Why every queue must be re-dispatched from the log's start ("" if none must)."""
    if checkpoint is None:
        return "no checkpoint"
    damaged = [cq.damaged for cq in queues.values() if cq.damaged]
    if damaged:
        return damaged[0]
    for t, q, m in checkpoint.queue_maxima:
        cq = queues.get((t, q))
        if cq is None or cq.max_offset < m:
            return f"consume queue {t}:{q} has fewer than the {m} entries checkpointed"
    if checkpoint.commit_log_offset < commit_log.min_offset:
        return "the checkpoint precedes the commit log's first segment"
    return ""


def recover(
    commit_log: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    checkpoint: Checkpoint | None,
    new_queue: Callable[[str, int], ConsumeQueue],
    tags_code: Callable[[str, str, int], int],
) -> RecoveryReport:
    """Find the log's end, repair queue entries from the log, cut a torn tail."""
    log_min = commit_log.min_offset
    start = log_min
    if (
        checkpoint is not None
        and checkpoint.commit_log_offset >= log_min
        and _is_boundary(commit_log, checkpoint.commit_log_offset)
    ):
        start = checkpoint.commit_log_offset
    reason = _rebuild_reason(commit_log, queues, checkpoint)
    if not reason and start != checkpoint.commit_log_offset:  # type: ignore[union-attr]
        reason = f"the checkpoint offset {checkpoint.commit_log_offset} is not a record boundary"  # type: ignore[union-attr]
    written = 0
    gaps: list[str] = []

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
            existing = cq.entry(q)
            if existing == (offset, info.size, code):
                return
            if (
                existing is not None
                and existing[0] != offset
                and _is_its_record(commit_log, cq, q, existing[0], existing[1])
            ):
                # The entry already indexes a record that is its own; a second record
                # claiming the same place is damaged (its queue id or offset bytes).
                # Java's dispatcher does not build an entry twice either.
                return
        elif q > cq.max_offset and not gaps:
            gaps.append(
                f"consume queue {info.topic}:{info.queue_id} ends at {cq.max_offset} but "
                f"the commit log continues it at {q}"
            )
        cq.write_at(q, offset, info.size, code)
        written += 1

    scan = _Scan(commit_log)
    end = scan.run(start, None, on_record)
    if not reason and gaps:
        reason = gaps[0]
        log.warning("%s: rebuilding every consume queue from the commit log", reason)
    full = bool(reason)
    if full and start != log_min:
        # Re-dispatch what precedes the checkpoint; the log's end is already known.
        scan.run(log_min, start, on_record)
    scan_start = log_min if full else start

    commit_log.truncate(end)
    rebuilt = unrepaired = 0
    for cq in list(queues.values()):
        fixed, left = check_queue_entries(commit_log, cq, end, tags_code)
        rebuilt += fixed
        unrepaired += left
    trimmed = 0
    for cq in list(queues.values()):
        trimmed += cq.trim_beyond(end, functools.partial(_is_its_record, commit_log, cq))
        cq.correct_min(commit_log.min_offset)
    return RecoveryReport(
        scan_start=scan_start,
        commit_log_end=end,
        records_scanned=scan.records,
        entries_written=written,
        entries_trimmed=trimmed,
        truncated_from=end if scan.torn else None,
        full_rebuild=full,
        reason=reason or "incremental from the checkpoint",
        bad_records=scan.bad_records,
        entries_rebuilt=rebuilt,
        entries_unrepaired=unrepaired,
    )


# -- consume queue entries against their records (step 5) ------------------------------

TagsCode = Callable[[str, str, int], int]


def _record_bytes(commit_log: CommitLog, end: int, phys: int, size: int) -> bytes | None:
    """Up to ``size`` log bytes at ``phys`` (fewer at a segment's or the data's end),
    read with pread (see read_at); None when ``phys`` is not in [log start, ``end``)."""
    if phys < commit_log.min_offset or phys >= end or size <= 0:
        return None
    seg = commit_log.segment_at(phys)
    if seg is None:
        return None
    pos = phys - seg.base
    return os.pread(seg.fd, min(size, commit_log.segment_size - pos, end - phys), pos)


def judge_entry(
    commit_log: CommitLog, end: int, cq: ConsumeQueue, index: int, phys: int, size: int
) -> int:
    """entry_check's verdict on entry ``index`` = (``phys``, ``size``) of ``cq``."""
    data = _record_bytes(commit_log, end, phys, size)
    if data is None:
        return ELSEWHERE
    return judge(data, 0, len(data), phys, size, cq.queue_id, index, cq.topic.encode())


def _entries(cq: ConsumeQueue, first: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
    """(index, phys, size, tags) of the entries in [first, stop) whose file exists."""
    chunk = 4096
    for f in list(cq.files):
        lo = max(first, f.base_index)
        hi = min(stop, f.base_index + cq.entries_per_file)
        for start in range(lo, hi, chunk):
            n = min(chunk, hi - start)
            data = read_at(f.fd, (start - f.base_index) * ENTRY_SIZE, n * ENTRY_SIZE)
            for i, (phys, size, tags) in enumerate(ENTRY.iter_unpack(data)):
                yield start + i, phys, size, tags


def check_queue_entries(
    commit_log: CommitLog, cq: ConsumeQueue, end: int, tags_code: TagsCode
) -> tuple[int, int]:
    """Check each entry of ``cq`` against its record; rebuild runs that do not match.

    An entry before every live one may point below the log's start: retention
    removed its record (correct_min moves the queue's minimum past it). Below the
    start after a live entry, an offset can only be damage. Returns (entries
    rebuilt or given their tags code back, entries left as they were).
    """
    log_min = commit_log.min_offset
    seg_size = commit_log.segment_size
    topic = cq.topic.encode()
    topic_name = cq.topic
    qid = cq.queue_id
    pread = os.pread
    rebuilt = unrepaired = 0
    live_seen = False
    prev_phys = log_min  # where the record before a run starts: a record boundary
    run_start = -1
    for index, phys, size, tags in _entries(cq, cq.min_offset, cq.max_offset):
        if phys < log_min and not live_seen:
            continue
        live_seen = True
        verdict = ELSEWHERE
        if phys < end and size > 0:
            seg = commit_log.segment_at(phys)
            if seg is not None:
                pos = phys - seg.base
                # pread, not the mapping: see read_at.
                data = pread(seg.fd, min(size, seg_size - pos, end - phys), pos)
                verdict, props_at, store_ts = examine(
                    data, 0, len(data), phys, size, qid, index, topic
                )
        if verdict != OK:
            if run_start < 0:
                run_start = index
            continue
        if run_start >= 0:
            fixed, left = rebuild_entries(
                commit_log, cq, run_start, index, prev_phys, phys, tags_code
            )
            rebuilt += fixed
            unrepaired += left
            run_start = -1
        try:
            props = data[props_at:].decode("utf-8")
        except UnicodeDecodeError:
            props = None
        code = tags if props is None else tags_code(topic_name, props, store_ts)
        if code != tags:
            log.warning(
                "consume queue %s:%d entry %d (%s) has tags code %d, its record says %d: "
                "rewritten from the commit log",
                cq.topic,
                cq.queue_id,
                index,
                _file_name(cq, index),
                tags,
                code,
            )
            cq.write_at(index, phys, size, code)
            rebuilt += 1
        prev_phys = phys
    if run_start >= 0:
        fixed, left = rebuild_entries(
            commit_log, cq, run_start, cq.max_offset, prev_phys, end, tags_code
        )
        rebuilt += fixed
        unrepaired += left
    return rebuilt, unrepaired


def _file_name(cq: ConsumeQueue, index: int) -> str:
    f = cq.file_for(index)
    return str(f.path) if f is not None else f"{cq.directory} (no file)"


def rebuild_entries(
    commit_log: CommitLog,
    cq: ConsumeQueue,
    first: int,
    stop: int,
    lo: int,
    hi: int,
    tags_code: TagsCode,
) -> tuple[int, int]:
    """Rewrite entries [first, stop) of ``cq`` from the records in log bytes [lo, hi).

    ``lo`` is a record boundary at or before the record of entry ``first`` (the
    record of the good entry before it, or the log's start) and ``hi`` the record of
    the good entry after ``stop - 1`` (or the log's end): queue offsets grow with
    log offsets, so the records of the run are in between. An entry whose record is
    not there (the log lost it too) stays as it was and is remembered in
    ``cq.unrepaired``, so that serving neither looks for it again nor hands out what
    it points at. Returns (entries rewritten, entries left).
    """
    found: set[int] = set()

    def on_record(offset: int, info: RecordInfo) -> None:
        q = info.queue_offset
        if info.queue_id != cq.queue_id or not first <= q < stop or info.topic != cq.topic:
            return
        code = tags_code(info.topic, info.properties_raw, info.store_timestamp)
        cq.write_at(q, offset, info.size, code)
        found.add(q)

    scan_records(commit_log, lo, hi, on_record)
    # Only entries in files that exist: a damaged record's queue offset can have put
    # one entry far past the rest (a sparse file), and the indexes between are no
    # entries at all. Listing them would take memory without bound.
    missing = [i for i in _indexes_in_files(cq, first, stop) if i not in found]
    cq.unrepaired.difference_update(found)
    cq.unrepaired.update(missing)
    if found:
        log.warning(
            "consume queue %s:%d entries %d-%d (%s) did not describe their commit log "
            "records: %d rebuilt from the records in commit log bytes [%d, %d)",
            cq.topic,
            cq.queue_id,
            first,
            stop - 1,
            _file_name(cq, first),
            len(found),
            lo,
            hi,
        )
    if missing:
        log.error(
            "consume queue %s:%d entries %s (%s) do not describe their commit log records "
            "and the log holds no record of theirs in bytes [%d, %d): left as they are "
            "(one whose record is damaged is served as stored, the others are not served)",
            cq.topic,
            cq.queue_id,
            _ranges(missing),
            _file_name(cq, missing[0]),
            lo,
            hi,
        )
    return len(found), len(missing)


def _indexes_in_files(cq: ConsumeQueue, first: int, stop: int) -> Iterator[int]:
    """The indexes in [first, stop) whose consume-queue file exists."""
    for f in sorted(cq.files, key=lambda f: f.base_index):
        yield from range(
            max(first, f.base_index), min(stop, f.base_index + cq.entries_per_file)
        )


def _ranges(indexes: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5, 9`` (at most 10 ranges, then a count)."""
    runs: list[list[int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs[:10])
    return text if len(runs) <= 10 else f"{text} and {len(runs) - 10} more runs"
