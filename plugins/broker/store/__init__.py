"""The embedded broker's on-disk message store: commit log, consume queues, recovery,
consumer offsets, topic configs and delay-level scheduling."""

from __future__ import annotations

from .files import StoreError
from .message_store import (
    GetMessageStatus,
    GetResult,
    MessageStore,
    PutMessageStatus,
    PutResult,
    StoreStats,
    tags_code_of,
)
from .offsets import ConsumerOffsets, OffsetEntry
from .recovery import RecoveryReport
from .schedule import SCHEDULE_TOPIC, ScheduleTick, parse_delay_levels
from .topics import DataVersion, TopicConfig, TopicConfigs

__all__ = [
    "SCHEDULE_TOPIC",
    "ConsumerOffsets",
    "DataVersion",
    "GetMessageStatus",
    "GetResult",
    "MessageStore",
    "OffsetEntry",
    "PutMessageStatus",
    "PutResult",
    "RecoveryReport",
    "ScheduleTick",
    "StoreError",
    "StoreStats",
    "TopicConfig",
    "TopicConfigs",
    "parse_delay_levels",
    "tags_code_of",
]
