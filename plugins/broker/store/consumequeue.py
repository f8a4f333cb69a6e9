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
import os
import struct
from pathlib import Path

from .files import MappedFile, fsync_dir, numbered_files

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

    # -- opening -------------------------------------------------------------------

    def load(self) -> None:
        """Open existing files and find the end of the written entries."""
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
        last = self.files[-1]
        self.max_offset = last.base_index + self._written_entries(last)
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

    def _written_entries(self, f: CqFile) -> int:
        # Entries are appended in order, so written ones (size > 0) form a prefix of the
        # file; a hole left by a power loss is refilled by recovery's re-dispatch.
        lo, hi = 0, self.entries_per_file
        mm = f.mm
        while lo < hi:
            mid = (lo + hi) // 2
            if _SIZE_FIELD.unpack_from(mm, mid * ENTRY_SIZE + 8)[0] > 0:
                lo = mid + 1
            else:
                hi = mid
        return lo

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

    def sync(self) -> None:
        for f in list(self.files):
            if f.dirty:
                f.dirty = False
                os.fdatasync(f.fd)

    # -- recovery and retention ----------------------------------------------------

    def trim_beyond(self, commit_log_end: int) -> int:
        """Remove trailing entries that are unwritten or point past ``commit_log_end``."""
        removed = 0
        while self.max_offset > self.min_offset:
            index = self.max_offset - 1
            f = self.file_for(index)
            if f is not None:
                phys, size, _tags = ENTRY.unpack_from(f.mm, (index - f.base_index) * ENTRY_SIZE)
                if size > 0 and phys + size <= commit_log_end:
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
        keeping a stale minimum. Returns the number of files deleted.
        """
        removed = 0
        while len(self.files) > 1:
            first = self.files[0]
            phys, size, _ = ENTRY.unpack_from(first.mm, (self.entries_per_file - 1) * ENTRY_SIZE)
            if size > 0 and phys >= commit_log_min:
                break
            self._drop_file(first)
            removed += 1
        if removed:
            fsync_dir(self.directory)
        if not self.files:
            self.min_offset = self.max_offset
            return removed
        first = self.files[0]
        # Entries grow with the commit log, so "points at or after the log's start" is
        # false then true along the file: binary search for the first true.
        lo = first.base_index
        hi = min(first.base_index + self.entries_per_file, self.max_offset)
        mm = first.mm
        while lo < hi:
            mid = (lo + hi) // 2
            phys, size, _ = ENTRY.unpack_from(mm, (mid - first.base_index) * ENTRY_SIZE)
            if size > 0 and phys >= commit_log_min:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = min(lo, self.max_offset)
        return removed
