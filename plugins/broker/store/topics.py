"""Topic configuration (TopicConfigManager): queue counts and permissions per topic.

Every change bumps the data version (the broker reports it to the name server)
and is written to disk at once, as Java persists on each update. Which topics
exist at start-up (system topics, auto-creation with 4 queues) is the broker's
decision, not the store's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from rmqk.model import PERM_READ, PERM_WRITE

from .files import StoreError, read_json_document, write_json_document

log = logging.getLogger("rmqk.broker.store")

__all__ = ["DataVersion", "TopicConfig", "TopicConfigs"]


def _positive_queue_count(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= 1024:
        raise ValueError(f"{attr.name} must be between 0 and 1024, got {value}")


@attrs.frozen
class TopicConfig:
    """One topic's configuration; the defaults are Java's TopicConfig defaults."""

    topic_name: str
    read_queue_nums: int = attrs.field(default=16, validator=_positive_queue_count)
    write_queue_nums: int = attrs.field(default=16, validator=_positive_queue_count)
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        """Field names as Java's fastjson writes them (the GET_ALL_TOPIC_CONFIG body)."""
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(data["topicName"]),
            read_queue_nums=int(data.get("readQueueNums", 16)),
            write_queue_nums=int(data.get("writeQueueNums", 16)),
            perm=int(data.get("perm", PERM_READ | PERM_WRITE)),
            topic_filter_type=str(data.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(data.get("topicSysFlag", 0)),
            order=bool(data.get("order", False)),
        )


@attrs.frozen
class DataVersion:
    timestamp: int
    counter: int

    def to_json(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}


class TopicConfigs:
    """Thread-safe table of :class:`TopicConfig`, persisted as JSON."""

    def __init__(self, path: Path, clock: Callable[[], int] | None = None) -> None:
        self.path = path
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._table: dict[str, TopicConfig] = {}
        self._version = DataVersion(self._clock(), 0)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one writer of the file at a time
        self._persisted = self._version
        self._persist_failing = False

    @property
    def data_version(self) -> DataVersion:
        return self._version

    def load(self) -> None:
        document = read_json_document(self.path)
        if document is None:
            return
        try:
            table = {
                name: TopicConfig.from_json(entry)
                for name, entry in document["topicConfigTable"].items()
            }
            version = document.get("dataVersion") or {}
            data_version = DataVersion(
                int(version.get("timestamp", self._clock())), int(version.get("counter", 0))
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{self.path}: not a topic config document: {exc}") from None
        with self._lock:
            self._table = table
            self._version = data_version
            self._persisted = data_version

    def persist(self) -> None:
        with self._write_lock:
            with self._lock:
                document = {
                    "dataVersion": self._version.to_json(),
                    "topicConfigTable": {n: c.to_json() for n, c in sorted(self._table.items())},
                }
                version = self._version
            write_json_document(self.path, document)
            self._persisted = version

    def _persist_or_retry_later(self) -> None:
        # Apache's ConfigManager.persist logs a failed write and goes on: the change
        # holds in memory and the flush thread writes it once the disk allows
        # (persist_pending), so a full disk never fails a heartbeat or a topic creation.
        try:
            self.persist()
        except OSError as exc:
            if not self._persist_failing:
                log.warning("cannot write %s (%s): retrying in the background", self.path, exc)
            self._persist_failing = True

    def persist_pending(self) -> None:
        """Write the document if a change has not reached the disk yet."""
        if self._persisted != self._version:
            self.persist()
            if self._persist_failing:
                log.warning("%s written again", self.path)
            self._persist_failing = False

    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def all(self) -> tuple[TopicConfig, ...]:
        with self._lock:
            return tuple(c for _, c in sorted(self._table.items()))

    def put(self, config: TopicConfig, *, persist: bool = True) -> TopicConfig | None:
        """Create or replace a topic's config; returns the previous one.

        ``persist=False`` leaves the write to the caller's next :meth:`persist` (or
        the flush thread's :meth:`persist_pending`), so that many topics created by
        one request cost one write.
        """
        with self._lock:
            previous = self._table.get(config.topic_name)
            self._table[config.topic_name] = config
            self._next_version()
        if persist:
            self._persist_or_retry_later()
        return previous

    def create(
        self,
        topic: str,
        *,
        read_queue_nums: int = 16,
        write_queue_nums: int = 16,
        perm: int = PERM_READ | PERM_WRITE,
        topic_sys_flag: int = 0,
        order: bool = False,
    ) -> TopicConfig:
        """Create or update ``topic`` with these settings (UPDATE_AND_CREATE_TOPIC)."""
        config = TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
            order=order,
        )
        self.put(config)
        return config

    def delete(self, topic: str) -> bool:
        with self._lock:
            removed = self._table.pop(topic, None) is not None
            if removed:
                self._next_version()
        if removed:
            self._persist_or_retry_later()
        return removed

    def _next_version(self) -> None:
        self._version = DataVersion(self._clock(), self._version.counter + 1)
