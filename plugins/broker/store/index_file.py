"""One message index file, laid out as Apache's IndexFile (store/index/IndexFile.java).

Layout (big-endian)::

    header (40 bytes): beginTimestamp:i64 endTimestamp:i64 beginPhyOffset:i64
                       endPhyOffset:i64 hashSlotCount:i32 indexCount:i32
    hash slots:        hash_slots x i32, the number of the newest entry of the slot
    entries:           max_entries x (keyHash:i32 phyOffset:i64 timeDiff:i32 prevIndex:i32)

Entry numbers start at 1 (0 means "none"), ``indexCount`` is one more than the
number of entries. An entry's ``timeDiff`` is in whole seconds since
``beginTimestamp``; ``prevIndex`` chains the entries of one slot, newest first.
Only the key's hash is stored, so two keys with the same hash are both answered
and the client keeps the messages whose keys match (as Java's MQAdminImpl does).

The file is created sparse and written with ``pwrite``; reads use ``pread``, not a
mapping, so that a read of a hole on a full tmpfs cannot raise SIGBUS (see
``files.read_at``). The header is kept in memory and written by :meth:`sync`
only, so what is on disk is always a state some flush vouched for, plus entries
and slots written since; the index service tells the two apart on open.
"""

from __future__ import annotations

import array
import operator
import os
import struct
import sys
from pathlib import Path

import attrs

from .files import read_at

__all__ = [
    "HEADER_SIZE",
    "IndexFile",
    "IndexHeader",
    "index_key_hash",
    "java_string_hash",
]

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_INT_MAX = 0x7FFF_FFFF


_MASK = 0xFFFF_FFFF
# 31**(n-1), ..., 31**1, 31**0 modulo 2**32, grown on demand: the hash of n code units
# is their dot product with the last n of these, computed in C by map and sum.
_powers: list[int] = [1]
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _descending_powers(n: int) -> list[int]:
    global _powers
    if len(_powers) < n:
        target = max(n, 2 * len(_powers))
        grown = list(reversed(_powers))
        while len(grown) < target:
            grown.append(grown[-1] * 31 & _MASK)
        _powers = grown[::-1]
    return _powers[len(_powers) - n :]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, wrapping as an int32."""
    if text.isascii():
        units: bytes | array.array[int] = text.encode("ascii")
    else:
        units = array.array("H", text.encode(_UTF16_NATIVE, "surrogatepass"))
    h = int(sum(map(operator.mul, units, _descending_powers(len(units))))) & _MASK
    return h - (1 << 32) if h & 0x8000_0000 else h


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: |hashCode|, where Java's abs(MIN_VALUE) stays negative -> 0."""
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


@attrs.define
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @classmethod
    def unpack(cls, data: bytes) -> IndexHeader:
        header = cls(*_HEADER.unpack(data))
        if header.index_count <= 0:
            header.index_count = 1
        return header


def file_size(hash_slots: int, max_entries: int) -> int:
    return HEADER_SIZE + hash_slots * SLOT_SIZE + max_entries * ENTRY_SIZE


class IndexFile:
    """Hash slots and chained entries of one file. Not thread-safe: the service locks."""

    def __init__(
        self,
        path: Path,
        hash_slots: int,
        max_entries: int,
        *,
        create: bool,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> None:
        self.path = path
        self.name = path.name
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self._entries_at = HEADER_SIZE + hash_slots * SLOT_SIZE
        # The slots of the file being written, kept in memory so a put reads no file.
        self._slots: array.array[int] | None = None
        size = file_size(hash_slots, max_entries)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(self.fd, size)
                self.header = IndexHeader()
                # A new file continues the previous one's range (Java's constructor).
                if end_phy_offset > 0:
                    self.header.begin_phy_offset = self.header.end_phy_offset = end_phy_offset
                if end_timestamp > 0:
                    self.header.begin_timestamp = self.header.end_timestamp = end_timestamp
            else:
                actual = os.fstat(self.fd).st_size
                if actual != size:
                    raise ValueError(
                        f"{actual} bytes, not the {size} of {hash_slots} hash slots and "
                        f"{max_entries} entries"
                    )
                self.header = IndexHeader.unpack(read_at(self.fd, 0, HEADER_SIZE))
                if self.header.index_count > max_entries + 1:
                    raise ValueError(f"its header counts {self.header.index_count} entries")
        except BaseException:
            os.close(self.fd)
            if create:
                path.unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ writing

    @property
    def full(self) -> bool:
        return self.header.index_count >= self.max_entries

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry; False when the file is full (IndexFile.putKey)."""
        h = self.header
        if h.index_count >= self.max_entries:
            return False
        key_hash = index_key_hash(key)
        slot = key_hash % self.hash_slots
        slots = self._slots
        if slots is None:
            slots = self._slots = self.read_slots()
        head = slots[slot]
        if head <= 0 or head > h.index_count:
            head = 0
        diff = (store_timestamp - h.begin_timestamp) // 1000
        if h.begin_timestamp <= 0:
            diff = 0
        diff = min(max(diff, 0), _INT_MAX)
        number = h.index_count
        entry = _ENTRY.pack(key_hash, phy_offset, diff, head)
        os.pwrite(self.fd, entry, self._entries_at + number * ENTRY_SIZE)
        os.pwrite(self.fd, _SLOT.pack(number), HEADER_SIZE + slot * SLOT_SIZE)
        slots[slot] = number
        # As Java: the first entry (re)sets the file's beginning, after its timeDiff
        # was taken against the beginning inherited from the previous file.
        if number <= 1:
            h.begin_phy_offset = phy_offset
            h.begin_timestamp = store_timestamp
        if head == 0:
            h.hash_slot_count += 1
        h.index_count = number + 1
        h.end_phy_offset = phy_offset
        h.end_timestamp = store_timestamp
        if h.index_count >= self.max_entries:
            self._slots = None  # full: no more puts
        return True

    def sync(self, header: bytes) -> None:
        """Write ``header`` (a :meth:`IndexHeader.pack` taken earlier) and fsync the file."""
        os.pwrite(self.fd, header, 0)
        os.fdatasync(self.fd)

    # ------------------------------------------------------------------ reading

    def _read_int(self, pos: int) -> int:
        data = os.pread(self.fd, SLOT_SIZE, pos)
        return int(_SLOT.unpack(data)[0]) if len(data) == SLOT_SIZE else 0

    def time_matched(self, begin: int, end: int) -> bool:
        h = self.header
        return (
            (begin < h.begin_timestamp and end > h.end_timestamp)
            or h.begin_timestamp <= begin <= h.end_timestamp
            or h.begin_timestamp <= end <= h.end_timestamp
        )

    def select(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """Append to ``out`` the offsets of entries of ``key``'s hash stored in [begin, end].

        Walks the slot's chain newest first, as IndexFile.selectPhyOffset, and stops
        at the first entry older than ``begin``.
        """
        h = self.header
        key_hash = index_key_hash(key)
        number = self._read_int(HEADER_SIZE + (key_hash % self.hash_slots) * SLOT_SIZE)
        if number <= 0 or number > h.index_count or h.index_count <= 1:
            return
        while len(out) < max_num:
            data = os.pread(self.fd, ENTRY_SIZE, self._entries_at + number * ENTRY_SIZE)
            if len(data) != ENTRY_SIZE:
                return
            hash_read, phy, diff, prev = _ENTRY.unpack(data)
            if diff < 0:
                return
            time_read = h.begin_timestamp + diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= 0 or prev > h.index_count or prev == number or time_read < begin:
                return
            number = prev

    def read_slots(self) -> array.array[int]:
        data = read_at(self.fd, HEADER_SIZE, self.hash_slots * SLOT_SIZE)
        slots = array.array("i")
        slots.frombytes(data.ljust(self.hash_slots * SLOT_SIZE, b"\0"))
        if sys.byteorder == "little":
            slots.byteswap()
        return slots

    def slots_below_count(self) -> bool:
        """Whether every hash slot names an entry the header counts (nothing written after it)."""
        return max(self.read_slots(), default=0) < self.header.index_count

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        self._slots = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
