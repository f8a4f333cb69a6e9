"""The exactly-once mode's commit log and staged files, beside the output.

Layout under the output directory (Spark's readers skip names starting with
``_``, so none of it shows up in the data)::

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

A log line records, per consumed batch, the queue and the first and last
offset of that batch. Offsets between the two that the batch lacks were
filtered out by the subscription, so the same subscription skips them again;
a replay after changing the subscription does not bring them back.

Each line is ``<crc32 hex> <json>``, preceded by a newline so a torn line from
a crash never merges with the next one; lines that do not check out are
ignored.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

from rmqk.errors import RmqkError

__all__ = [
    "CommitEntry",
    "CommitLog",
    "OffsetIndex",
    "OffsetRange",
    "StagingArea",
    "control_dir",
]

log = logging.getLogger("rmqk.plugins.spark.commitlog")

CONTROL_DIR = "_rmqk"


def control_dir(output: str | os.PathLike[str]) -> Path:
    return Path(output) / CONTROL_DIR


@attrs.frozen
class OffsetRange:
    """Offsets ``first``..``last`` (both included) of one queue."""

    topic: str
    broker: str
    queue_id: int
    first: int
    last: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker, self.queue_id)


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


class OffsetIndex:
    """Which offsets of which queues are committed: merged, sorted intervals per queue."""

    def __init__(self) -> None:
        self._starts: dict[tuple[str, str, int], list[int]] = {}
        self._ends: dict[tuple[str, str, int], list[int]] = {}

    def add(self, r: OffsetRange) -> None:
        starts = self._starts.setdefault(r.key, [])
        ends = self._ends.setdefault(r.key, [])
        first, last = r.first, r.last
        # Merge with every interval that overlaps or touches [first, last].
        i = bisect.bisect_left(ends, first - 1)
        j = i
        while j < len(starts) and starts[j] <= last + 1:
            first = min(first, starts[j])
            last = max(last, ends[j])
            j += 1
        starts[i:j] = [first]
        ends[i:j] = [last]

    def covers(self, topic: str, broker: str, queue_id: int, offset: int) -> bool:
        starts = self._starts.get((topic, broker, queue_id))
        if not starts:
            return False
        i = bisect.bisect_right(starts, offset) - 1
        return i >= 0 and self._ends[(topic, broker, queue_id)][i] >= offset

    def overlaps(self, topic: str, broker: str, queue_id: int, first: int, last: int) -> bool:
        starts = self._starts.get((topic, broker, queue_id))
        if not starts:
            return False
        i = bisect.bisect_right(starts, last) - 1
        return i >= 0 and self._ends[(topic, broker, queue_id)][i] >= first

    def intervals(self, topic: str, broker: str, queue_id: int) -> list[tuple[int, int]]:
        key = (topic, broker, queue_id)
        return list(zip(self._starts.get(key, []), self._ends.get(key, []), strict=True))

    def queues(self) -> list[tuple[str, str, int]]:
        return sorted(self._starts)


class CommitLog:
    """The append-only log of committed flushes, shared by every writer of one output."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "commits.log"
        self._position = 0
        self._partial = b""

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.close(fd)
            _fsync_dir(self.directory)

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
        """Move a committed flush's files into the output; safe to repeat."""
        src_root = self.root / "staging" / entry.owner / f"{entry.seq:08d}"
        missing = []
        for rel in entry.files:
            src = src_root / rel
            dst = self.output / rel
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
            elif not dst.exists():
                missing.append(rel)
        if missing:
            raise RmqkError(
                f"flush {entry.flush_id} is committed but {len(missing)} of its files are in "
                f"neither {src_root} nor {self.output}: {', '.join(missing[:3])}"
            )
        shutil.rmtree(src_root, ignore_errors=True)

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


def ranges_of(batches: Iterable[tuple[str, str, int, int, int]]) -> tuple[OffsetRange, ...]:
    """Offset ranges from ``(topic, broker, queue_id, first, last)``, touching ones merged."""
    by_queue: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for topic, broker, qid, first, last in batches:
        by_queue.setdefault((topic, broker, qid), []).append((first, last))
    out: list[OffsetRange] = []
    for (topic, broker, qid), spans in sorted(by_queue.items()):
        spans.sort()
        cur_first, cur_last = spans[0]
        for first, last in spans[1:]:
            if first <= cur_last + 1:
                cur_last = max(cur_last, last)
            else:
                out.append(OffsetRange(topic, broker, qid, cur_first, cur_last))
                cur_first, cur_last = first, last
        out.append(OffsetRange(topic, broker, qid, cur_first, cur_last))
    return tuple(out)


def now_ms() -> int:
    return int(time.time() * 1000)
