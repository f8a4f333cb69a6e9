"""A commit log and staged files beside a directory output, for exactly-once file sinks.

A sink on :class:`~rmqk.plugins.sinks.groupcommit.GroupCommitSink` that writes
files (the ``spark`` sink's Parquet) commits each flush with this log. Layout
under the output directory (Spark's readers skip names starting with ``_``, so
none of it shows up in the data)::

    <path>/_rmqk/commits.log               one line per committed flush
    <path>/_rmqk/owners/<owner>.lock       held (flock) by a live writer
    <path>/_rmqk/staging/<owner>/<seq>/    a flush's files before they are published

A flush is written to its staging directory, then committed by appending a
line to the log (fsync'd; the log is the point of truth), then published by
renaming its files into the output, then acknowledged. Whatever the moment of
a crash:

* before the log line: the staged files belong to no commit; the next writer
  deletes them, and the messages, never acknowledged, are consumed again;
* after the log line: the next writer publishes the staged files (renames are
  idempotent per file), and the messages consumed again are skipped because
  the log covers their (topic, broker, queue, offset).

A log line records the flush's offset ranges
(:class:`~rmqk.plugins.sinks.offsetranges.OffsetRange`); a replay after
changing the subscription does not bring back offsets it filtered out.

Each line is ``<crc32 hex> <json>``, preceded by a newline so a torn line from
a crash never merges with the next one; lines that do not check out are
ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import attrs

from rmqk.model.errors import RmqkError
from rmqk.plugins.sinks.offsetranges import OffsetRange

__all__ = [
    "CommitEntry",
    "CommitLog",
    "StagingArea",
    "control_dir",
    "data_files",
    "now_ms",
]

log = logging.getLogger("rmqk.plugins.sinks.commitlog")

CONTROL_DIR = "_rmqk"


def control_dir(output: str | os.PathLike[str]) -> Path:
    return Path(output) / CONTROL_DIR


@attrs.frozen
class CommitEntry:
    """One committed flush."""

    flush_id: str
    owner: str
    seq: int
    rows: int
    files: tuple[str, ...]
    ranges: tuple[OffsetRange, ...]
    time_ms: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "flush": self.flush_id,
                "owner": self.owner,
                "seq": self.seq,
                "rows": self.rows,
                "files": list(self.files),
                "ranges": [[r.topic, r.broker, r.queue_id, r.first, r.last] for r in self.ranges],
                "time": self.time_ms,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CommitEntry:
        data = json.loads(text)
        return cls(
            flush_id=str(data["flush"]),
            owner=str(data["owner"]),
            seq=int(data["seq"]),
            rows=int(data["rows"]),
            files=tuple(str(f) for f in data["files"]),
            ranges=tuple(
                OffsetRange(str(t), str(b), int(q), int(f), int(last))
                for t, b, q, f, last in data["ranges"]
            ),
            time_ms=int(data.get("time", 0)),
        )


class CommitLog:
    """The append-only log of committed flushes, shared by every writer of one output."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "commits.log"
        self._position = 0
        self._partial = b""
        self._ensured = False

    def ensure(self) -> None:
        # Once per object: the log is never deleted, and each check is syscalls that
        # give the GIL up in the writer thread (a wait for the event loop to hand it back).
        if self._ensured:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.close(fd)
            _fsync_dir(self.directory)
        self._ensured = True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive across processes: one writer commits (or reconciles) at a time."""
        self.ensure()
        fd = os.open(self.directory / "commits.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read_new(self) -> list[CommitEntry]:
        """Entries appended since the last call (all of them on the first call)."""
        self.ensure()
        with open(self.path, "rb") as f:
            f.seek(self._position)
            data = f.read()
        if not data:
            return []
        self._position += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        # The last piece has no newline yet: a line being written, or a torn one.
        self._partial = lines.pop()
        entries = []
        for raw in lines:
            entry = _parse_line(raw)
            if entry is not None:
                entries.append(entry)
        return entries

    def read_all(self) -> list[CommitEntry]:
        return CommitLog(self.directory).read_new()

    def append(self, entry: CommitEntry) -> None:
        payload = entry.to_json()
        crc = zlib.crc32(payload.encode()) & 0xFFFFFFFF
        line = f"\n{crc:08x} {payload}\n".encode()
        self.ensure()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)


def _parse_line(raw: bytes) -> CommitEntry | None:
    text = raw.strip()
    if not text:
        return None
    crc_text, _, payload = text.partition(b" ")
    try:
        if int(crc_text, 16) != zlib.crc32(payload) & 0xFFFFFFFF:
            raise ValueError("checksum mismatch")
        return CommitEntry.from_json(payload.decode())
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("skipping a damaged commit log line (%s): %.80r", exc, text)
        return None


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove_emptied(root: Path, files: tuple[str, ...]) -> None:
    """Remove a published flush's staging folder, emptied of ``files`` by the renames.

    rmdir of the folders the files were in, deepest first (rmtree would list and
    stat each of them); anything else left there (a retried publish, a stray
    file) falls back to rmtree.
    """
    folders: set[str] = set()
    for rel in files:
        parent = os.path.dirname(rel)
        while parent:
            folders.add(parent)
            parent = os.path.dirname(parent)
    try:
        for folder in sorted(folders, key=lambda f: (-f.count(os.sep), f)):
            os.rmdir(root / folder)
        os.rmdir(root)
    except OSError:
        shutil.rmtree(root, ignore_errors=True)


def data_files(root: Path) -> list[str]:
    """Files under ``root`` that are data (no ``_SUCCESS``, ``.crc`` or temporary files),
    as paths relative to it, partition directories included."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        for name in filenames:
            if name.startswith(("_", ".")):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


@attrs.frozen
class ReconcileReport:
    published: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()


class StagingArea:
    """One writer's staging directories, and recovery of those a dead writer left."""

    def __init__(self, output: Path, owner: str) -> None:
        self.output = output
        self.owner = owner
        self.root = control_dir(output)
        self.log = CommitLog(self.root)
        self._lock_fd: int | None = None

    @property
    def owner_dir(self) -> Path:
        return self.root / "staging" / self.owner

    def acquire(self) -> None:
        """Take this owner's lock; a writer holds it for as long as it lives."""
        owners = self.root / "owners"
        owners.mkdir(parents=True, exist_ok=True)
        fd = os.open(owners / f"{self.owner}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RmqkError(f"staging owner {self.owner} is in use by another writer") from None
        self._lock_fd = fd
        self.log.ensure()

    def release(self) -> None:
        if self._lock_fd is None:
            return
        with contextlib.suppress(OSError):
            if self.owner_dir.exists() and not any(self.owner_dir.iterdir()):
                self.owner_dir.rmdir()
        with contextlib.suppress(OSError):
            (self.root / "owners" / f"{self.owner}.lock").unlink()
        os.close(self._lock_fd)
        self._lock_fd = None

    def flush_dir(self, seq: int) -> Path:
        return self.owner_dir / f"{seq:08d}"

    def discard(self, seq: int) -> None:
        shutil.rmtree(self.flush_dir(seq), ignore_errors=True)

    def publish(self, entry: CommitEntry) -> None:
        """Move a committed flush's files into the output; safe to repeat.

        One rename per file when its folder exists (the usual case); the checks
        run only when a rename fails. Each syscall in the writer thread gives the
        GIL up, and getting it back from a busy event loop is what a flush's
        fixed cost mostly was.
        """
        src_root = self.root / "staging" / entry.owner / f"{entry.seq:08d}"
        missing = []
        for rel in entry.files:
            src = src_root / rel
            dst = self.output / rel
            try:
                os.replace(src, dst)
            except FileNotFoundError:
                if src.exists():
                    # A partition folder this output does not have yet.
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(src, dst)
                elif not dst.exists():
                    missing.append(rel)
        if missing:
            raise RmqkError(
                f"flush {entry.flush_id} is committed but {len(missing)} of its files are in "
                f"neither {src_root} nor {self.output}: {', '.join(missing[:3])}"
            )
        _remove_emptied(src_root, entry.files)

    def reconcile(self) -> ReconcileReport:
        """Finish or undo what dead writers left in staging (live writers hold their lock)."""
        staging = self.root / "staging"
        if not staging.exists():
            return ReconcileReport()
        published: list[str] = []
        discarded: list[str] = []
        with self.log.locked():
            committed = {(e.owner, e.seq): e for e in self.log.read_all()}
            for owner_dir in sorted(p for p in staging.iterdir() if p.is_dir()):
                owner = owner_dir.name
                if owner == self.owner:
                    continue
                lock_path = self.root / "owners" / f"{owner}.lock"
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue  # a live writer
                    for flush in sorted(p for p in owner_dir.iterdir() if p.is_dir()):
                        try:
                            seq = int(flush.name)
                        except ValueError:
                            continue
                        entry = committed.get((owner, seq))
                        if entry is not None:
                            self.publish(entry)
                            published.append(entry.flush_id)
                        else:
                            shutil.rmtree(flush, ignore_errors=True)
                            discarded.append(f"{owner}-{seq}")
                    shutil.rmtree(owner_dir, ignore_errors=True)
                    with contextlib.suppress(OSError):
                        lock_path.unlink()
                finally:
                    os.close(fd)
        if published or discarded:
            log.warning(
                "recovered the staging area of %s: published %d committed flush(es), "
                "discarded %d uncommitted one(s)",
                self.output,
                len(published),
                len(discarded),
            )
        return ReconcileReport(tuple(published), tuple(discarded))


def now_ms() -> int:
    return int(time.time() * 1000)
