"""What the message store answers: put and get results with Java's status names."""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from . import recovery

__all__ = [
    "BatchMessage",
    "GetMessageStatus",
    "GetResult",
    "PutMessageStatus",
    "PutResult",
    "StoreStats",
    "failed",
]


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class PutMessageStatus(enum.Enum):
    """Java's PutMessageStatus values that this store can produce."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@attrs.frozen
class PutResult:
    ok: bool
    commit_log_offset: int
    queue_offset: int
    store_timestamp: int
    msg_id: str  # the offset message id
    size: int
    error: str | None
    status: PutMessageStatus = PutMessageStatus.PUT_OK
    topic: str = ""  # where it was stored: SCHEDULE_TOPIC_XXXX for a delayed message
    queue_id: int = -1


@attrs.frozen
class GetResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes, ...]  # each a complete stored record
    total_size: int


@attrs.frozen
class StoreStats:
    """Figures for the broker's runtime info and for tests."""

    commit_log_min_offset: int
    commit_log_max_offset: int
    segments: int
    queues: int
    recovery: recovery.RecoveryReport | None
    # Consume queue entries found not to describe their records since the store opened
    # (recovery and serving): rebuilt from the commit log, or left (no record of theirs).
    cq_entries_rebuilt: int = 0
    cq_entries_unrepaired: int = 0


class BatchMessage(Protocol):
    """One message of a batch: the codec's ``BatchEntry`` fits."""

    @property
    def flag(self) -> int: ...

    @property
    def body(self) -> bytes: ...

    @property
    def properties_raw(self) -> str: ...


def failed(status: PutMessageStatus, error: str) -> PutResult:
    return PutResult(False, -1, -1, 0, "", 0, error, status)
