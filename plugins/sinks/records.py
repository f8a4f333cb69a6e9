"""One consumed message as a flat record, shared by the sinks that write rows."""

from __future__ import annotations

import base64
import json
from typing import Any

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt, MessageProperty

__all__ = ["BODY_FORMATS", "EXCLUDED_PROPERTIES", "RECORD_KEYS", "is_bad", "message_record"]

# Properties a record leaves out of ``properties``: the ones with a field of their own
# (tags, keys, the unique id as msg_id) and the ones a consumer adds on each delivery
# (MIN_OFFSET, MAX_OFFSET, CONSUME_START_TIME), so a redelivered message gives the same
# record in every sink, as the Spark sink's rows do.
EXCLUDED_PROPERTIES = frozenset(
    {
        MessageProperty.TAGS,
        MessageProperty.KEYS,
        MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageProperty.MIN_OFFSET,
        MessageProperty.MAX_OFFSET,
        MessageProperty.CONSUME_START_TIMESTAMP,
    }
)

BODY_FORMATS = ("text", "base64", "json")
# The keys of every record, in order.
RECORD_KEYS = (
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "msg_id",
    "keys",
    "tags",
    "properties",
    "body",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
)


def _body(body: bytes, body_format: str) -> Any:
    if body_format == "base64":
        return base64.b64encode(body).decode("ascii")
    return body.decode("utf-8", errors="replace")


def _json_body(body: bytes) -> tuple[Any, bool]:
    """The parsed body and True, or None and False when it is not UTF-8 JSON."""
    try:
        return json.loads(body.decode("utf-8")), True
    except ValueError:  # UnicodeDecodeError is one
        return None, False


def message_record(
    queue: MessageQueue,
    msg: MessageExt,
    body_format: str = "text",
    corrupt_record_column: str = "_corrupt_record",
) -> dict[str, Any]:
    """The record of ``msg``. With ``body_format = "json"`` it has ``corrupt_record_column``
    too: None when the body parsed, else the raw body (its text; base64 for a body that is
    not UTF-8, with ``<column>_base64`` true) and a None ``body``.
    """
    record = {
        "topic": msg.topic,
        "broker": queue.broker_name,
        "queue_id": queue.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "keys": msg.keys,
        "tags": msg.tags,
        "properties": {
            k: v for k, v in msg.properties.items() if k not in EXCLUDED_PROPERTIES
        },
        "body": None,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "reconsume_times": msg.reconsume_times,
    }
    if body_format != "json":
        record["body"] = _body(msg.body, body_format)
        return record
    value, parsed = _json_body(msg.body)
    if parsed:
        record["body"] = value
        record[corrupt_record_column] = None
        return record
    try:
        record[corrupt_record_column] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        # JSON text cannot hold these bytes as they are: base64 keeps them, and says so.
        record[corrupt_record_column] = base64.b64encode(msg.body).decode("ascii")
        record[f"{corrupt_record_column}_base64"] = True
    return record


def is_bad(record: dict[str, Any], corrupt_record_column: str) -> bool:
    """Whether ``record`` (json body_format) holds a body that did not parse."""
    return record.get(corrupt_record_column) is not None
