"""Reading the store: pulls from a consume queue, store times, lookups by offset.

A mixin of :class:`~.message_store.MessageStore`: reads take no lock and run on
the broker's event loop thread, the one that also writes.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Callable

from rmqk.wire.message_codec import MAGIC_CODE_V1, MAGIC_CODE_V2

from . import entry_check
from .commitlog import CommitLog
from .consumequeue import ENTRY, ConsumeQueue
from .records import MIN_RECORD_SIZE, read_total_and_magic, store_timestamp_of
from .results import GetMessageStatus, GetResult

__all__ = ["StoreReads"]

# DefaultMessageStore.getMessage scans at most max(16000, maxMsgNums * 20) bytes of
# consume queue per call, i.e. 800 entries unless more messages were asked for.
_MIN_SCAN_ENTRIES = 800

# What serving checks of each record it hands out (see _all_sound): the first 36 bytes.
_SERVE_HEAD = struct.Struct(">ii4xi4xqq")  # total magic queueId queueOffset physicalOffset
_HEAD_BYTES = 36


@functools.lru_cache(maxsize=256)
def _entries_struct(count: int) -> struct.Struct:
    """``count`` consume queue entries unpacked at once into one flat tuple."""
    return struct.Struct(">" + "qiq" * count)


class StoreReads:
    """The read side of the message store, over its consume queues and commit log."""

    commit_log: CommitLog
    _queues: dict[tuple[str, int], ConsumeQueue]

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        max_total_bytes: int = 256 * 1024,
        tag_filter: Callable[[int], bool] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """DefaultMessageStore.getMessage: up to ``max_msgs`` records from ``offset``.

        The first matching message is returned even when it alone exceeds
        ``max_total_bytes``. Entries whose tag code ``tag_filter`` rejects are
        skipped, and at most max(800, max_msgs) entries of one consume queue
        file are examined, so a pull over non-matching messages answers
        NO_MATCHED_MESSAGE with ``next_begin_offset`` moved past them.
        ``record_filter`` then judges each stored record (isMatchedByCommitLog).
        An unknown queue answers like an empty one (NO_MESSAGE_IN_QUEUE), since
        Java creates consume queues on lookup; NO_MATCHED_LOGIC_QUEUE is never
        produced.
        """
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0, (), 0)
        min_offset = cq.min_offset
        max_offset = cq.max_offset
        if max_offset == 0:
            return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, 0, (), 0)
        if offset < min_offset:
            return GetResult(
                GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset, (), 0
            )
        if offset == max_offset:
            return GetResult(
                GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset, (), 0
            )
        if offset > max_offset:
            return GetResult(
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset, (), 0
            )
        f = cq.file_for(offset)
        if f is None:
            return GetResult(
                GetMessageStatus.OFFSET_FOUND_NULL,
                cq.roll_next(offset),
                min_offset,
                max_offset,
                (),
                0,
            )
        available = min(max_offset, f.base_index + cq.entries_per_file) - offset
        scan = min(available, max(_MIN_SCAN_ENTRIES, max_msgs))
        start = (offset - f.base_index) * 20
        entries = f.mm[start : start + scan * 20]

        log_ = self.commit_log
        seg_size = log_.segment_size
        segments = log_.segments
        first_index = log_.first_index
        topic_b = topic.encode()
        records: list[bytes] = []
        append = records.append
        total = 0
        scanned = 0
        count = min(scan, max(max_msgs, 1))
        flat = _entries_struct(count).unpack_from(entries)
        if (
            tag_filter is None
            and record_filter is None
            and flat[0] >= log_.min_offset
            and self._all_sound(queue_id, offset, flat)
        ):
            # The common pull: no filter, nothing removed (entries only grow, so if the
            # first is still in the log, all are), every entry its record's. Only the
            # size cap can stop early.
            first_phys = flat[0]
            seg_number = first_phys // seg_size
            sizes = flat[1::3]
            total = sum(sizes)
            if seg_number == flat[-3] // seg_size and (total <= max_total_bytes or count == 1):
                seg = segments[seg_number - first_index]
                mm = seg.mm
                base = seg.base
                return GetResult(
                    GetMessageStatus.FOUND,
                    offset + count,
                    min_offset,
                    max_offset,
                    tuple(
                        [mm[p - base : p - base + n] for p, n in zip(flat[::3], sizes, strict=True)]
                    ),
                    total,
                )
            total = 0
            for phys, size in zip(flat[::3], sizes, strict=True):
                if total and total + size > max_total_bytes:
                    break
                seg = segments[phys // seg_size - first_index]
                pos = phys - seg.base
                append(seg.mm[pos : pos + size])
                total += size
                scanned += 1
            return GetResult(
                GetMessageStatus.FOUND,
                offset + scanned,
                min_offset,
                max_offset,
                tuple(records),
                total,
            )
        n_segments = len(segments)
        write_end = log_.write_offset
        log_min = log_.min_offset
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        count = 0
        skip_below = -1
        # An entry below the log's start is a removed message only at the queue's head:
        # after an entry still in the log, it is damage (entries only grow).
        before = cq.entry(offset - 1)
        prev_phys = -1 if before is None else before[0]
        for phys, size, tags in ENTRY.iter_unpack(entries):
            index = offset + scanned
            if phys < skip_below:
                scanned += 1
                continue
            if total and (count >= max_msgs or total + size > max_total_bytes):
                break
            if tag_filter is not None and not tag_filter(tags):
                # Not checked against its record: that costs a read per entry, which
                # the tags code exists to save. Recovery checks tags codes.
                if not total:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                scanned += 1
                prev_phys = phys
                continue
            removed = 0 <= phys < log_min and prev_phys < log_min
            prev_phys = phys
            idx = phys // seg_size - first_index
            verdict = (
                entry_check.OK if removed else self._verdict(queue_id, topic_b, index, phys, size)
            )
            if verdict != entry_check.OK:
                if index not in cq.unrepaired and self._repair_entry(cq, index):
                    # Entries were rewritten from the commit log: read them again.
                    return self.get_messages(
                        topic,
                        queue_id,
                        offset,
                        max_msgs,
                        max_total_bytes,
                        tag_filter,
                        record_filter,
                    )
                if (
                    verdict == entry_check.ELSEWHERE
                    or size < MIN_RECORD_SIZE
                    or phys + size > write_end
                ):
                    # Its record is not in the log and what it points at is not its
                    # record: not served (logged and counted when the rebuild failed).
                    scanned += 1
                    continue
                # Its own record, damaged: served as stored, as recovery keeps a record
                # whose body fails its CRC; the consumer's bad-record handling skips it.
            if not removed and 0 <= idx < n_segments and size > 0 and phys + size <= write_end:
                seg = segments[idx]
                pos = phys - seg.base
                record = seg.mm[pos : pos + size]
                if record_filter is not None and not record_filter(record):
                    if not total:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                    scanned += 1
                    continue
                append(record)
                total += size
                count += 1
                status = GetMessageStatus.FOUND
                skip_below = -1
            else:
                if not total:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                skip_below = phys + seg_size - phys % seg_size
            scanned += 1
        return GetResult(status, offset + scanned, min_offset, max_offset, tuple(records), total)

    def _repair_entry(self, cq: ConsumeQueue, index: int) -> bool:
        raise NotImplementedError

    def _verdict(self, queue_id: int, topic: bytes, index: int, phys: int, size: int) -> int:
        """entry_check's verdict on one entry, read through the mapping (see below)."""
        log_ = self.commit_log
        seg = log_.segment_at(phys)
        end = log_.write_offset
        if seg is None or not log_.min_offset <= phys < end:
            return entry_check.ELSEWHERE
        pos = phys - seg.base
        avail = min(log_.segment_size - pos, end - phys)
        return entry_check.judge(seg.mm, pos, avail, phys, size, queue_id, index, topic)

    def _all_sound(self, queue_id: int, offset: int, flat: tuple[int, ...]) -> bool:
        """Whether the record head at each entry of ``flat`` (entries from queue offset
        ``offset``) names that entry: position, size, queue id and queue offset.

        Issue 25: a flipped byte in an entry's offset served bytes from the middle of
        another record, which the consumer skipped as undecodable. One unpack per entry
        (the topic and the tags code are checked at recovery and, for filtered pulls,
        by the slow path's full check): about a microsecond per entry served.
        """
        log_ = self.commit_log
        seg_size = log_.segment_size
        segments = log_.segments
        first_index = log_.first_index
        last_head = min(log_.write_offset, (first_index + len(segments)) * seg_size) - _HEAD_BYTES
        head = _SERVE_HEAD.unpack_from
        for phys, size, index in zip(flat[::3], flat[1::3], itertools.count(offset)):
            idx = phys // seg_size - first_index
            if idx < 0 or phys > last_head or phys % seg_size > seg_size - _HEAD_BYTES:
                return False
            seg = segments[idx]
            got = head(seg.mm, phys - seg.base)
            # The records this broker writes carry the V1 magic; a V2 one is rare.
            if got != (size, MAGIC_CODE_V1, queue_id, index, phys) and got != (
                size,
                MAGIC_CODE_V2,
                queue_id,
                index,
                phys,
            ):
                return False
        return True

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return 0 if cq is None else cq.min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get((topic, queue_id))
        return 0 if cq is None else cq.max_offset

    @property
    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset

    def _store_time(self, phys: int, size: int) -> int:
        seg = self.commit_log.segment_at(phys)
        if seg is None or size < MIN_RECORD_SIZE or phys + size > self.commit_log.write_offset:
            return -1
        return store_timestamp_of(seg.mm, phys - seg.base)

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's oldest message; -1 if it has none."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return -1
        entry = cq.entry(cq.min_offset)
        if entry is None:
            return -1
        return self._store_time(entry[0], entry[1])

    def store_time_at(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time of one message (getMessageStoreTimeStamp); -1 if it is not there."""
        cq = self._queues.get((topic, queue_id))
        entry = None if cq is None else cq.entry(queue_offset)
        return -1 if entry is None else self._store_time(entry[0], entry[1])

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """ConsumeQueue.getOffsetInQueueByTime: a binary search on store timestamps.

        As in Java, the answer is the message stored at ``timestamp_ms`` or, when
        there is none, the nearer of its two neighbours (the earlier one on a
        tie); past the last message it is the last message's offset, not the max
        offset. Unlike Java, which searches one consume queue file, this searches
        the whole queue, and of several messages stored in the same millisecond
        it answers the first. 0 for an empty or unknown queue.
        """
        cq = self._queues.get((topic, queue_id))
        if cq is None or cq.max_offset <= cq.min_offset:
            return 0
        low, high = cq.min_offset, cq.max_offset - 1
        log_min = self.commit_log.min_offset
        left = right = target = -1
        left_ts = right_ts = -1
        while high >= low:
            mid = (low + high) // 2
            entry = cq.entry(mid)
            if entry is None:
                return 0
            phys, size, _ = entry
            if phys < log_min:
                low = mid + 1
                left = mid
                continue
            ts = self._store_time(phys, size)
            if ts < 0:
                return 0
            if ts == timestamp_ms:
                target = mid
                break
            if ts > timestamp_ms:
                high = mid - 1
                right, right_ts = mid, ts
            else:
                low = mid + 1
                left, left_ts = mid, ts
        if target >= 0:
            while target > cq.min_offset:
                before = cq.entry(target - 1)
                if before is None or self._store_time(before[0], before[1]) != timestamp_ms:
                    break
                target -= 1
            return target
        if left_ts == -1:
            return right if right >= 0 else cq.min_offset
        if right_ts == -1:
            return left
        return right if abs(timestamp_ms - left_ts) > abs(timestamp_ms - right_ts) else left

    def look_message(self, commit_log_offset: int) -> bytes | None:
        """The whole record starting at ``commit_log_offset`` (VIEW_MESSAGE_BY_ID)."""
        log_ = self.commit_log
        if not log_.min_offset <= commit_log_offset <= log_.write_offset - MIN_RECORD_SIZE:
            return None
        seg = log_.segment_at(commit_log_offset)
        if seg is None:
            return None
        total, magic = read_total_and_magic(seg.mm, commit_log_offset - seg.base)
        if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2) or total < MIN_RECORD_SIZE:
            return None
        return log_.read(commit_log_offset, total)
