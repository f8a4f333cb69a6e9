"""Checks a put must pass and the record it becomes: destination, sizes, tag code.

The record is encoded with the remoting codec's ``encode_stored_message`` before
the store takes its write lock; the store patches offsets and store time in place.
"""

from __future__ import annotations

import functools
import re

import attrs

from rmqk.model import java_string_hash
from rmqk.model.message import MessageProperty
from rmqk.wire.message_codec import encode_stored_message

from .results import PutMessageStatus, PutResult, failed

__all__ = ["RecordEncoder", "check_destination", "tags_code_of"]

# TopicValidator (4.9.8): allowed characters and the V1 record's one-byte length.
_TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_MAX_LENGTH = 127
_PROPERTIES_MAX = 0x7FFF


@functools.lru_cache(maxsize=8192)
def _tag_hash(tags: str) -> int:
    return java_string_hash(tags)


def tags_code_of(properties_raw: str) -> int:
    """The consume queue tag code of a message: Java's hashCode of TAGS, 0 without tags."""
    key = MessageProperty.TAGS + "\x01"
    i = properties_raw.find(key)
    while i > 0 and properties_raw[i - 1] != "\x02":
        i = properties_raw.find(key, i + 1)
    if i < 0:
        return 0
    start = i + len(key)
    end = properties_raw.find("\x02", start)
    value = properties_raw[start:] if end < 0 else properties_raw[start:end]
    return _tag_hash(value) if value else 0


@functools.lru_cache(maxsize=4096)
def _valid_topic(topic: str) -> bool:
    return len(topic) <= _TOPIC_MAX_LENGTH and _TOPIC_PATTERN.match(topic) is not None


def check_destination(topic: str, queue_id: int) -> PutResult | None:
    if not _valid_topic(topic):
        return failed(
            PutMessageStatus.MESSAGE_ILLEGAL,
            f"topic {topic!r} is not valid: at most {_TOPIC_MAX_LENGTH} characters "
            "of %|a-zA-Z0-9_-",
        )
    if queue_id < 0:
        return failed(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is negative")
    return None


@attrs.frozen
class RecordEncoder:
    """Encodes a put as a stored record of this broker, or says why it cannot be stored."""

    store_host: str
    max_message_size: int

    def encode(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        properties_raw: str,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
    ) -> bytes | PutResult:
        if len(properties_raw) > _PROPERTIES_MAX // 3:
            props_len = len(properties_raw.encode("utf-8"))
            if props_len > _PROPERTIES_MAX:
                return failed(
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                    f"properties of {props_len} bytes exceed {_PROPERTIES_MAX}",
                )
        try:
            record = encode_stored_message(
                topic=topic,
                body=body,
                flag=flag,
                queue_id=queue_id,
                sys_flag=sys_flag,
                born_timestamp=born_timestamp,
                born_host=born_host,
                store_host=self.store_host,
                reconsume_times=reconsume_times,
                properties_raw=properties_raw,
            )
        except ValueError as exc:
            return failed(PutMessageStatus.MESSAGE_ILLEGAL, str(exc))
        if len(record) > self.max_message_size:
            return failed(
                PutMessageStatus.MESSAGE_ILLEGAL,
                f"message of {len(record)} bytes (stored) exceeds max_message_size "
                f"{self.max_message_size}",
            )
        return record
