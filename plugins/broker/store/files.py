"""File helpers shared by the store: mapped fixed-size files, numbered file names,
atomic replacement of small documents, directory fsync."""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "MappedFile",
    "StoreError",
    "all_zero",
    "fsync_dir",
    "numbered_files",
    "read_at",
    "read_json_document",
    "replace_file",
    "write_json_document",
]


class StoreError(Exception):
    """The message store met something it cannot work with (says what and where)."""


def fsync_dir(path: Path) -> None:
    """Make a file creation, rename or deletion in ``path`` survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


def read_at(fd: int, pos: int, size: int) -> bytes:
    """``size`` bytes at ``pos`` (fewer at the end of the file), read with ``pread``.

    Recovery reads what may be unwritten (sparse) parts of files this way, never
    through the mapping: on tmpfs a read fault on a hole allocates a page, which on
    a full file system is a SIGBUS, and scanning whole sparse files through the
    mapping would fill memory with zero pages.
    """
    parts: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, min(size, _CHUNK), pos)
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
        size -= len(chunk)
    return b"".join(parts)


def all_zero(fd: int, pos: int, end: int) -> bool:
    """Whether every byte of ``[pos, end)`` is zero (read in chunks with ``pread``).

    Holes of a sparse file are skipped unread where the file system tells them
    (SEEK_DATA), so checking the unused part of a large file stays cheap.
    """
    while pos < end:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return True  # nothing but holes from here on
            if exc.errno != errno.EINVAL:  # EINVAL: SEEK_DATA not supported here
                raise
        if pos >= end:
            return True
        chunk = os.pread(fd, min(end - pos, _CHUNK), pos)
        if not chunk:
            return True
        if chunk != _ZEROS[: len(chunk)]:
            return False
        pos += len(chunk)
    return True


class MappedFile:
    """A fixed-size file written with ``pwrite`` and read through a read-only shared mapping.

    Created at full size as a sparse file. ``mismatch`` words the error for an
    existing file of another size (the store was opened with other sizes).
    """

    __slots__ = ("fd", "mm", "path")

    def __init__(
        self, path: Path, size: int, *, create: bool, mismatch: Callable[[int], str]
    ) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            actual = os.fstat(self.fd).st_size
            if create or actual == 0:
                # A crash between creating the file and sizing it leaves it empty.
                os.ftruncate(self.fd, size)
            elif actual != size:
                raise StoreError(mismatch(actual))
            self.mm = mmap.mmap(self.fd, size, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(self.fd)
            if create:
                # Otherwise the next attempt (O_EXCL) would fail for good once space returns.
                path.unlink(missing_ok=True)
            raise

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


def numbered_files(
    directory: Path,
    unit: int,
    *,
    kind: str,
    misaligned: Callable[[Path], str],
    ignore_tmp: bool = False,
) -> list[int]:
    """The byte offsets that name the files of ``directory``, sorted.

    Every name must be digits and a multiple of ``unit``; anything else is a
    StoreError (``kind`` names the directory, ``misaligned`` words that error).
    """
    bases: list[int] = []
    for entry in directory.iterdir():
        if ignore_tmp and entry.name.endswith(".tmp"):
            continue
        if not (entry.is_file() and entry.name.isdigit()):
            raise StoreError(f"unexpected file in {kind} directory: {entry}")
        base = int(entry.name)
        if base % unit:
            raise StoreError(misaligned(entry))
        bases.append(base)
    bases.sort()
    return bases


def replace_file(path: Path, data: bytes, *, keep_backup: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically: a crash leaves the old or the new content.

    The new content goes to a temporary file that is fsynced and renamed over the
    old one; with ``keep_backup`` the old content is kept as ``<name>.bak`` first.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)  # a full disk must not keep a half-written copy
        raise
    os.close(fd)
    if keep_backup and path.exists():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_document(path: Path, document: Any) -> None:
    """Replace ``path`` atomically, keeping the previous version as ``<name>.bak``.

    Java's MixAll.string2File keeps a ``.bak`` too; a crash leaves either the old
    or the new document, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    replace_file(path, data, keep_backup=True)


def read_json_document(path: Path) -> Any | None:
    """The document at ``path``, or its ``.bak`` when it is missing, empty or unreadable.

    Returns ``None`` when neither exists (or both are empty). Raises :class:`StoreError` when both
    exist and neither parses, because silently starting empty would lose state.
    """
    bak = path.with_name(path.name + ".bak")
    problems: list[str] = []
    for candidate in (path, bak):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            problems.append(f"{candidate}: empty")
            continue
        try:
            return json.loads(text)
        except ValueError as exc:
            problems.append(f"{candidate}: not valid JSON ({exc})")
    if any("not valid JSON" in p for p in problems):
        raise StoreError("cannot read store document: " + "; ".join(problems))
    return None
