"""One consumed message as a flat record, shared by the sinks that write rows."""

from __future__ import annotations

import base64
from typing import Any

from rmqk.message import MessageExt
from rmqk.model import MessageQueue

__all__ = ["BODY_FORMATS", "message_record"]

BODY_FORMATS = ("text", "base64", "json")


def _body(body: bytes, body_format: str) -> Any:
    if body_format == "base64":
        return base64.b64encode(body).decode("ascii")
    text = body.decode("utf-8", errors="replace")
    if body_format == "json":
        import json

        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def message_record(
    queue: MessageQueue, msg: MessageExt, body_format: str = "text"
) -> dict[str, Any]:
    return {
        "topic": msg.topic,
        "broker": queue.broker_name,
        "queue_id": queue.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "keys": msg.keys,
        "tags": msg.tags,
        "properties": dict(msg.properties),
        "body": _body(msg.body, body_format),
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "reconsume_times": msg.reconsume_times,
    }
