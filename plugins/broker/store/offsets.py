"""Consumer offsets committed to the broker (ConsumerOffsetManager).

Kept in memory, keyed like Java's ``topic@group`` table, and written to a JSON
document (atomically, with a ``.bak``) periodically and on close. The broker
overwrites an offset on every commit, whatever its value, as Java's does.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs

from .files import StoreError, read_json_document, write_json_document

__all__ = ["ConsumerOffsets", "OffsetEntry"]

_KEY_SEPARATOR = "@"


@attrs.frozen
class OffsetEntry:
    group: str
    topic: str
    queue_id: int
    offset: int


class ConsumerOffsets:
    """Thread-safe: the flush thread persists while the broker's loop commits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._table: dict[tuple[str, str], dict[int, int]] = {}  # (topic, group) -> qid -> offset
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one writer of the file at a time
        self._version = 0
        self._persisted_version = 0

    def load(self) -> None:
        document = read_json_document(self.path)
        table: dict[tuple[str, str], dict[int, int]] = {}
        if document is not None:
            try:
                for key, queues in document["offsetTable"].items():
                    topic, sep, group = key.partition(_KEY_SEPARATOR)
                    if not sep:
                        raise ValueError(f"key {key!r} is not 'topic@group'")
                    table[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise StoreError(f"{self.path}: not a consumer offset document: {exc}") from None
        with self._lock:
            self._table = table
            self._persisted_version = self._version

    def persist(self, *, force: bool = False) -> bool:
        """Write the document if anything changed since the last write; True if written."""
        with self._write_lock:
            with self._lock:
                if not force and self._version == self._persisted_version:
                    return False
                version = self._version
                document = {
                    "offsetTable": {
                        f"{topic}{_KEY_SEPARATOR}{group}": {
                            str(q): o for q, o in sorted(queues.items())
                        }
                        for (topic, group), queues in sorted(self._table.items())
                    }
                }
            write_json_document(self.path, document)
            self._persisted_version = version
            return True

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._table.setdefault((topic, group), {})[queue_id] = offset
            self._version += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for the queue."""
        queues = self._table.get((topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def remove(self, group: str, topic: str | None = None) -> int:
        """Forget a group's offsets (of one topic, or all); returns the queues removed."""
        with self._lock:
            keys = [k for k in self._table if k[1] == group and (topic is None or k[0] == topic)]
            removed = sum(len(self._table.pop(k)) for k in keys)
            if removed:
                self._version += 1
        return removed

    def groups_of_topic(self, topic: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted({g for t, g in self._table if t == topic}))

    def topics_of_group(self, group: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted({t for t, g in self._table if g == group}))

    def entries(self) -> tuple[OffsetEntry, ...]:
        with self._lock:
            return tuple(
                OffsetEntry(group, topic, qid, offset)
                for (topic, group), queues in sorted(self._table.items())
                for qid, offset in sorted(queues.items())
            )
