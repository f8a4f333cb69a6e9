"""The contract of an ``rmqk`` sub-command, as a plugin registers one.

A plugin's ``rmqk_register_commands(register)`` calls ``register(name, Command(...))``;
the command line (:mod:`rmqk.app.cli`) builds its parser from every registration.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable

import attrs

from rmqk.model.message import MessageExt

__all__ = ["Command", "message_json", "positive_int"]


@attrs.frozen
class Command:
    """One ``rmqk`` sub-command.

    ``add_arguments(parser)`` declares its options; ``run(args)`` does the work
    and returns the exit status. ``examples`` are shown at the end of ``--help``.
    """

    help: str
    run: Callable[[argparse.Namespace], int]
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    description: str | None = None
    examples: tuple[str, ...] = ()


def positive_int(text: str) -> int:
    """An argparse type: an integer of 1 or more (a bad one is a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer of 1 or more, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _body(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def message_json(msg: MessageExt) -> str:
    """One JSON line under MessageExt's attribute names; a non-UTF-8 body is base64-encoded."""
    obj: dict[str, object] = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "properties": dict(msg.properties),
        **_body(msg.body),
    }
    return json.dumps(obj, ensure_ascii=False)
