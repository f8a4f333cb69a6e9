"""The embedded broker's on-disk message store: commit log, consume queues, recovery,
consumer offsets, topic configs and delay-level scheduling."""

from __future__ import annotations

from .encoding import tags_code_of
from .files import StoreError
from .message_store import MessageStore
from .offsets import ConsumerOffsets, OffsetEntry
from .recovery import RecoveryReport
from .results import GetMessageStatus, GetResult, PutMessageStatus, PutResult, StoreStats
from .retention import RetentionPolicy
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
    "RetentionPolicy",
    "ScheduleTick",
    "StoreError",
    "StoreStats",
    "TopicConfig",
    "TopicConfigs",
    "parse_delay_levels",
    "tags_code_of",
]
