"""Consume queues: per (topic, queue id), one 20-byte entry per message.

An entry is ``commitLogOffset:i64 size:i32 tagsCode:i64`` (big-endian), entry
``n`` describing the message with queue offset ``n``. Files hold
``entries_per_file`` entries and are named by the byte offset of their first
entry (20 digits), as Java names them, under ``<root>/<topic>/<queueId>/``.
Like the commit log they are sparse full-size files written with ``pwrite`` and
read through a shared mapping. A consume queue is derived data: recovery
rebuilds whatever the commit log holds and the queue does not.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path

from .files import MappedFile, all_zero, fsync_dir, numbered_files, read_at

__all__ = ["ENTRY", "ENTRY_SIZE", "ConsumeQueue", "CqFile"]

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20
_ZERO_ENTRY = bytes(ENTRY_SIZE)
_SIZE_FIELD = struct.Struct(">i")


class CqFile(MappedFile):
    """One open consume queue file."""

    __slots__ = ("base_index", "dirty")

    def __init__(self, path: Path, base_index: int, byte_size: int, *, create: bool) -> None:
        self.base_index = base_index
        self.dirty = False
        super().__init__(
            path,
            byte_size,
            create=create,
            mismatch=lambda actual: (
                f"consume queue file {path} has {actual} bytes, expected {byte_size} "
                "(cq_entries_per_file x 20); open the store with the size it was written with"
            ),
        )

    def zero_from(self, pos: int) -> None:
        """Make every byte from ``pos`` on zero (and unallocated), if any is not."""
        size = len(self.mm)
        if pos >= size or all_zero(self.fd, pos, size):
            return
        self.mm.close()
        # Shrinking and regrowing frees the blocks: it never needs disk space.
        os.ftruncate(self.fd, pos)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size, access=mmap.ACCESS_READ)
        self.dirty = True


class ConsumeQueue:
    """One logical queue. Not thread-safe: the store serialises writers."""

    __slots__ = (
        "by_number",
        "damaged",
        "directory",
        "entries_per_file",
        "file_bytes",
        "files",
        "max_offset",
        "min_offset",
        "queue_id",
        "topic",
        "unrepaired",
    )

    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        if entries_per_file < 1:
            raise ValueError(f"cq_entries_per_file must be positive, got {entries_per_file}")
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.entries_per_file = entries_per_file
        self.file_bytes = entries_per_file * ENTRY_SIZE
        self.files: list[CqFile] = []  # in order
        self.by_number: dict[int, CqFile] = {}  # base_index // entries_per_file -> file
        self.damaged = ""  # why the files on disk cannot be trusted, if they cannot
        self.min_offset = 0
        self.max_offset = 0
        # Entries that do not describe their records and that no record in the commit log
        # could rebuild (recovery.rebuild_entries): serving neither looks again nor trusts them.
        self.unrepaired: set[int] = set()

    # -- opening -------------------------------------------------------------------

    def load(self, commit_log_min: int = 0) -> None:
        """Open existing files and find the end of the written entries.

        ``commit_log_min`` > 0 means retention has removed the log's start: a queue
        rebuilt since may then begin with unwritten entries for messages gone with it.
        """
        byte_bases = numbered_files(
            self.directory,
            self.file_bytes,
            kind="consume queue",
            misaligned=lambda entry: (
                f"consume queue file {entry} does not start at a multiple of "
                f"{self.file_bytes} bytes; open the store with the cq_entries_per_file "
                "it was written with"
            ),
        )
        for base in (byte_base // ENTRY_SIZE for byte_base in byte_bases):
            path = self.directory / f"{base * ENTRY_SIZE:020d}"
            self._add_file(CqFile(path, base, self.file_bytes, create=False))
        if not self.files:
            return
        for prev, nxt in itertools.pairwise(self.files):
            if nxt.base_index != prev.base_index + self.entries_per_file:
                self.damaged = f"consume queue file missing before {nxt.path}"
        self.max_offset = self._scan_end(commit_log_min > 0)
        self.min_offset = self.files[0].base_index

    def _add_file(self, f: CqFile) -> None:
        self.by_number[f.base_index // self.entries_per_file] = f
        self.files.append(f)
        if len(self.files) > 1 and self.files[-2].base_index > f.base_index:
            self.files.sort(key=lambda x: x.base_index)

    def _drop_file(self, f: CqFile) -> None:
        self.files.remove(f)
        del self.by_number[f.base_index // self.entries_per_file]
        f.close()
        f.path.unlink()

    def _scan_end(self, log_trimmed: bool) -> int:
        """Where the written entries end, found as Java's ConsumeQueue.recover does.

        The last three files are read linearly from their start and the end is the
        first entry that is not a written one (commit log offset >= 0 and size > 0);
        older files were full when the next one began. Nothing past that end is
        trusted: a stray byte in the unused part of a file must not pass for an entry
        (a binary search over unverified bytes once took one flipped byte at entry
        150,000 as the queue's only message). The bytes past the end are zeroed and
        later files dropped, as truncateDirtyFiles does, so a later append cannot make
        them look written. Entries lost that way are derived data: recovery re-indexes
        them from the commit log.
        """
        first = self.files[0]
        start = max(0, len(self.files) - 3)
        end = self.files[start].base_index
        for i in range(start, len(self.files)):
            f = self.files[i]
            if f.base_index != end:
                break
            # A rebuilt queue's first file starts with unwritten entries for the messages
            # that retention had already removed: the queue starts after them. While the
            # log is whole, no queue starts that way: a zero first entry is damage.
            skip_leading = log_trimmed and f is first
            written = self._written_prefix(f, skip_leading=skip_leading)
            end = f.base_index + written
            if written < self.entries_per_file:
                break
        for f in [f for f in self.files if f.base_index >= end and f is not first]:
            self._drop_file(f)
        at_end = self.file_for(end)
        if at_end is not None:
            at_end.zero_from((end - at_end.base_index) * ENTRY_SIZE)
        return end

    def _written_prefix(self, f: CqFile, *, skip_leading: bool) -> int:
        count = 0
        leading = skip_leading
        chunk_entries = 4096
        for start in range(0, self.entries_per_file, chunk_entries):
            n = min(chunk_entries, self.entries_per_file - start)
            data = read_at(f.fd, start * ENTRY_SIZE, n * ENTRY_SIZE)
            for phys, size, _tags in ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE]):
                if phys >= 0 and size > 0:
                    leading = False
                elif not (leading and phys == 0 and size == 0):
                    return 0 if leading else count
                count += 1
        return 0 if leading else count

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files.clear()
        self.by_number.clear()

    # -- reading -------------------------------------------------------------------

    def file_for(self, index: int) -> CqFile | None:
        return self.by_number.get(index // self.entries_per_file)

    def entry(self, index: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tags code) of entry ``index``, if it is readable."""
        if not self.min_offset <= index < self.max_offset:
            return None
        f = self.file_for(index)
        if f is None:
            return None
        phys, size, tags = ENTRY.unpack_from(f.mm, (index - f.base_index) * ENTRY_SIZE)
        return int(phys), int(size), int(tags)

    def roll_next(self, index: int) -> int:
        """The first index of the file after the one holding ``index`` (rollNextFile)."""
        return index + self.entries_per_file - index % self.entries_per_file

    # -- writing -------------------------------------------------------------------

    def _file_for_write(self, index: int) -> CqFile:
        f = self.file_for(index)
        if f is not None:
            return f
        base = index - index % self.entries_per_file
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.files:
            self.min_offset = max(self.min_offset, base)
            self.max_offset = max(self.max_offset, base)
        f = CqFile(self.directory / f"{base * ENTRY_SIZE:020d}", base, self.file_bytes, create=True)
        self._add_file(f)
        fsync_dir(self.directory)
        return f

    def append(self, phys: int, size: int, tags_code: int) -> None:
        self.write_at(self.max_offset, phys, size, tags_code)

    def write_at(self, index: int, phys: int, size: int, tags_code: int) -> None:
        f = self._file_for_write(index)
        os.pwrite(f.fd, ENTRY.pack(phys, size, tags_code), (index - f.base_index) * ENTRY_SIZE)
        f.dirty = True
        if index >= self.max_offset:
            self.max_offset = index + 1

    def forget_from(self, index: int) -> None:
        """Clear the entries at and after ``index`` written by a put that failed."""
        for i in range(index, self.max_offset):
            f = self.file_for(i)
            if f is not None:
                # These bytes were just written, so their blocks exist: no space needed.
                os.pwrite(f.fd, _ZERO_ENTRY, (i - f.base_index) * ENTRY_SIZE)
        self.max_offset = max(index, self.min_offset)

    def sync(self) -> None:
        for f in list(self.files):
            if f.dirty:
                f.dirty = False
                os.fdatasync(f.fd)

    # -- recovery and retention ----------------------------------------------------

    def trim_beyond(
        self, commit_log_end: int, points_at_its_record: Callable[[int, int, int], bool]
    ) -> int:
        """Remove trailing entries that are unwritten, point past ``commit_log_end`` or
        do not point at their own record (``points_at_its_record(index, phys, size)``):
        a stray byte right after the last entry can look written."""
        removed = 0
        while self.max_offset > self.min_offset:
            index = self.max_offset - 1
            f = self.file_for(index)
            if f is not None:
                phys, size, _tags = ENTRY.unpack_from(f.mm, (index - f.base_index) * ENTRY_SIZE)
                if (
                    size > 0
                    and phys + size <= commit_log_end
                    and points_at_its_record(index, phys, size)
                ):
                    break
                os.pwrite(f.fd, _ZERO_ENTRY, (index - f.base_index) * ENTRY_SIZE)
                f.dirty = True
            self.max_offset = index
            removed += 1
        # Files wholly past the end would otherwise define max_offset at the next load.
        while len(self.files) > 1 and self.files[-1].base_index >= self.max_offset:
            self._drop_file(self.files[-1])
        if self.max_offset <= self.min_offset:
            self.min_offset = self.max_offset
        return removed

    def correct_min(self, commit_log_min: int) -> int:
        """Delete files whose entries all precede ``commit_log_min`` and move ``min_offset``.

        Java's deleteExpiredFile + correctMinOffset, except that a queue whose every
        entry precedes the commit log's start becomes empty (min == max) instead of
        keeping a stale minimum. The first kept file is read linearly, as Java does:
        a bisection over damaged entries could land anywhere and move the minimum
        (and with it every consumer that asks for it) past live messages.
        Returns the number of files deleted.
        """
        removed = 0
        while len(self.files) > 1:
            first = self.files[0]
            last = read_at(first.fd, (self.entries_per_file - 1) * ENTRY_SIZE, ENTRY_SIZE)
            phys, size, _ = ENTRY.unpack(last)
            wholly_before = size > 0 and phys + size <= commit_log_min
            if not wholly_before and self._first_live(first, commit_log_min) is not None:
                break
            self._drop_file(first)
            removed += 1
        if removed:
            fsync_dir(self.directory)
        if not self.files:
            self.min_offset = self.max_offset
            return removed
        first = self.files[0]
        live = self._first_live(first, commit_log_min)
        self.min_offset = self.max_offset if live is None else min(live, self.max_offset)
        return removed

    def _first_live(self, f: CqFile, commit_log_min: int) -> int | None:
        """The first index of ``f`` below ``max_offset`` whose entry is in the log."""
        count = min(self.entries_per_file, self.max_offset - f.base_index)
        if count <= 0:
            return None
        phys, size, _ = ENTRY.unpack(read_at(f.fd, 0, ENTRY_SIZE))
        if size > 0 and phys >= commit_log_min:
            return f.base_index  # the usual case, without reading the whole file
        data = read_at(f.fd, 0, count * ENTRY_SIZE)
        for i, (phys, size, _tags) in enumerate(ENTRY.iter_unpack(data)):
            if size > 0 and phys >= commit_log_min:
                return f.base_index + i
        return None
