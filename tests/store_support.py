"""A small-segment message store for the store tests: records cross segment ends quickly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmqk.plugins.broker.store import MessageStore, PutResult

SEGMENT = 16 * 1024
OPTIONS: dict[str, Any] = {
    "segment_size": SEGMENT,
    "max_message_size": 8192,
    "cq_entries_per_file": 100,
    "store_host": "127.0.0.1:10911",
}


def make_store(root: Path, **options: Any) -> MessageStore:
    return MessageStore(root, **{**OPTIONS, **options})


def segment_path(root: Path, offset: int) -> Path:
    """The commit log segment file that holds ``offset``."""
    return root / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def put_record(
    store: MessageStore, topic: str, queue_id: int, i: int, body: bytes, properties_raw: str
) -> PutResult:
    """Put the ``i``-th record (born at ``i`` ms) as a client from 10.0.0.1 sends it."""
    return store.put_message(
        topic=topic,
        queue_id=queue_id,
        body=body,
        flag=0,
        properties_raw=properties_raw,
        sys_flag=0,
        born_timestamp=i,
        born_host="10.0.0.1:1",
    )
