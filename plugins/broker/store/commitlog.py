"""The commit log: every stored record, in arrival order, in fixed-size segment files.

Segments are named by the commit log offset of their first byte (20 digits, as in
Java), created at full size as sparse files, written with ``pwrite`` and read
through a read-only shared mapping, so a read is a slice of the page cache and a
``kill -9`` loses nothing that was written. A record never straddles two
segments: when one does not fit, the rest of the segment is marked with a BLANK
record (as Java's CommitLog does) and the record goes to the next segment, whose
base offset is a multiple of the segment size.
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import struct
from pathlib import Path

from .files import MappedFile, StoreError, fsync_dir, numbered_files
from .records import BLANK_MAGIC

__all__ = ["END_BLANK_MIN", "CommitLog", "Segment"]

# Java's END_FILE_MIN_BLANK_LENGTH: room always left at a segment's end for the BLANK marker.
END_BLANK_MIN = 8
_BLANK = struct.Struct(">ii")


class Segment(MappedFile):
    """One open segment file."""

    __slots__ = ("base",)

    def __init__(self, path: Path, base: int, size: int, *, create: bool) -> None:
        self.base = base
        super().__init__(
            path,
            size,
            create=create,
            mismatch=lambda actual: (
                f"commit log segment {path} has {actual} bytes but segment_size is {size}; "
                "open the store with the segment size it was written with"
            ),
        )


def segment_name(base: int) -> str:
    return f"{base:020d}"


class CommitLog:
    """Segments plus the write position. Not thread-safe: the store serialises writers."""

    def __init__(self, directory: Path, segment_size: int) -> None:
        if segment_size < 4096:
            raise ValueError(f"segment_size must be at least 4096 bytes, got {segment_size}")
        self.directory = directory
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        self.first_index = 0  # base // segment_size of segments[0]
        self.write_offset = 0
        self.synced_offset = 0

    # -- opening -------------------------------------------------------------------

    def load(self) -> None:
        """Open the existing segments (validation is recovery's job)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        bases = numbered_files(
            self.directory,
            self.segment_size,
            kind="commit log",
            misaligned=lambda entry: (
                f"commit log segment {entry} does not start at a multiple of "
                f"segment_size {self.segment_size}; open the store with the segment "
                "size it was written with"
            ),
            ignore_tmp=True,
        )
        for prev, nxt in itertools.pairwise(bases):
            if nxt != prev + self.segment_size:
                raise StoreError(
                    f"commit log segments are not contiguous: {segment_name(prev)} is "
                    f"followed by {segment_name(nxt)} in {self.directory}"
                )
        for base in bases:
            path = self.directory / segment_name(base)
            self.segments.append(Segment(path, base, self.segment_size, create=False))
        if self.segments:
            self.first_index = self.segments[0].base // self.segment_size
            self.write_offset = self.synced_offset = self.segments[0].base

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments.clear()

    # -- positions -----------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else self.write_offset

    @property
    def max_offset(self) -> int:
        return self.write_offset

    def segment_at(self, offset: int) -> Segment | None:
        idx = offset // self.segment_size - self.first_index
        if 0 <= idx < len(self.segments):
            return self.segments[idx]
        return None

    def roll_next(self, offset: int) -> int:
        """The base offset of the segment after the one holding ``offset``."""
        return offset + self.segment_size - offset % self.segment_size

    # -- reading -------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset``, or ``None`` if they are not (or no longer) stored."""
        if size <= 0 or offset < 0 or offset + size > self.write_offset:
            return None
        seg = self.segment_at(offset)
        if seg is None:
            return None
        pos = offset - seg.base
        if pos + size > self.segment_size:
            return None
        return seg.mm[pos : pos + size]

    # -- writing -------------------------------------------------------------------

    def reserve(self, length: int) -> int:
        """The offset where a record (or batch) of ``length`` bytes will be written.

        Rolls to a new segment, closing the current one with a BLANK record, when
        the bytes would not fit with :data:`END_BLANK_MIN` to spare.
        """
        if length + END_BLANK_MIN > self.segment_size:
            raise ValueError(
                f"{length} bytes cannot fit in a commit log segment of {self.segment_size}"
            )
        offset = self.write_offset
        active = self.segments[-1] if self.segments else None
        if active is not None and active.base <= offset < active.base + self.segment_size:
            pos = offset - active.base
            if pos + length + END_BLANK_MIN <= self.segment_size:
                return offset
            blank = self.segment_size - pos
            os.pwrite(active.fd, _BLANK.pack(blank, BLANK_MAGIC), pos)
            offset = active.base + self.segment_size
            self.write_offset = offset
        self._create_segment(offset)
        return offset

    def _create_segment(self, base: int) -> None:
        path = self.directory / segment_name(base)
        seg = Segment(path, base, self.segment_size, create=True)
        if not self.segments:
            self.first_index = base // self.segment_size
        self.segments.append(seg)
        fsync_dir(self.directory)

    def write(self, offset: int, data: bytes | bytearray) -> None:
        """Write bytes reserved with :meth:`reserve` (they never cross a segment end)."""
        seg = self.segments[-1]
        written = os.pwrite(seg.fd, data, offset - seg.base)
        if written != len(data):
            # A short pwrite on a regular file means the disk filled up.
            raise OSError(
                errno.ENOSPC, f"short write to {seg.path}: {written} of {len(data)} bytes"
            )
        self.write_offset = offset + len(data)

    def sync(self, upto: int) -> None:
        """fdatasync every segment holding bytes in ``[synced_offset, upto)``."""
        start = self.synced_offset
        if upto <= start:
            return
        for seg in list(self.segments):
            end = seg.base + self.segment_size
            if end <= start or seg.base >= upto:
                continue
            os.fdatasync(seg.fd)
        self.synced_offset = upto

    # -- recovery and retention ----------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset``: later segments go, the tail is zeroed.

        Zeroing (truncate the file, then size it again) matters: stale bytes past
        the new end must never be read as records by a later recovery.
        """
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.base >= offset:
                seg.close()
                seg.path.unlink()
                continue
            if offset < seg.base + self.segment_size:
                pos = offset - seg.base
                seg.mm.close()
                os.ftruncate(seg.fd, pos)
                os.ftruncate(seg.fd, self.segment_size)
                os.fdatasync(seg.fd)
                seg.mm = mmap.mmap(seg.fd, self.segment_size, access=mmap.ACCESS_READ)
            keep.append(seg)
        if len(keep) != len(self.segments):
            fsync_dir(self.directory)
        self.segments = keep
        self.write_offset = offset
        self.synced_offset = min(self.synced_offset, offset)

    def cut_back(self, offset: int) -> None:
        """Forget the bytes written at and after ``offset`` in the active segment.

        Used when a put fails half-way; unlike :meth:`truncate` it keeps the segment
        files (the flush thread may be syncing them) and does not fsync: the cut
        bytes were never acknowledged, and zeros on disk read as the end of the log.
        Shrinking and regrowing the file frees the blocks, so it needs no disk space.
        """
        seg = self.segments[-1] if self.segments else None
        if seg is not None and seg.base <= offset < seg.base + self.segment_size:
            seg.mm.close()
            os.ftruncate(seg.fd, offset - seg.base)
            os.ftruncate(seg.fd, self.segment_size)
            seg.mm = mmap.mmap(seg.fd, self.segment_size, access=mmap.ACCESS_READ)
        self.write_offset = offset

    def delete_segments(self, predicate_end: int) -> int:
        """Delete whole segments that end at or before ``predicate_end``; never the last one."""
        removed = 0
        while len(self.segments) > 1 and self.segments[0].base + self.segment_size <= predicate_end:
            seg = self.segments.pop(0)
            seg.close()
            seg.path.unlink()
            removed += 1
        if removed:
            self.first_index = self.segments[0].base // self.segment_size
            fsync_dir(self.directory)
        return removed
