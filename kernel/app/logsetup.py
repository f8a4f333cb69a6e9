"""Logging for rmqk: one logger per component, records with structured fields.

Every module logs through ``logging.getLogger("rmqk.<component>")``; nothing but
the CLI prints. A record carries the structured fields :data:`FIELDS`
(``group``, ``consumer``, ``topic``, ``broker``, ``queue``, ``client_id``) when
they are known, from three places, first wins:

* ``extra={"group": ..., "topic": ...}`` on the logging call;
* a :class:`~rmqk.model.MessageQueue` among the call's arguments (the engine
  logs ``"... %s", mq``), which gives ``topic``, ``broker`` and ``queue``;
* the log context of the running task (:func:`log_context`): the runtime binds
  ``group`` and ``consumer`` around a consumer's start, so every task the
  consumer creates (pull loops, consume workers, timers) inherits them.

:func:`configure_logging` installs one handler writing text or JSON lines
(``rmqk --log-format json``), which is what the CLI calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import IO, Any

from rmqk.model import MessageQueue

__all__ = [
    "FIELDS",
    "FORMATS",
    "LEVELS",
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "bind_log_context",
    "configure_logging",
    "current_log_context",
    "log_context",
    "record_fields",
    "reset_log_context",
]

FIELDS: tuple[str, ...] = ("group", "consumer", "topic", "broker", "queue", "client_id")
LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS: tuple[str, ...] = ("text", "json")

_EMPTY: Mapping[str, object] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "rmqk_log_context", default=_EMPTY
)
# Marks the handler configure_logging installed, so a second call replaces it.
_HANDLER_MARK = "_rmqk_handler"
_FIELDS_ATTR = "rmqk_fields"


def _check_fields(fields: Mapping[str, object]) -> None:
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown log field(s) {', '.join(unknown)}; fields: {', '.join(FIELDS)}")


def current_log_context() -> Mapping[str, object]:
    """The fields bound to the running task (or thread)."""
    return _context.get()


def bind_log_context(**fields: object) -> contextvars.Token[Mapping[str, object]]:
    """Add fields to the current context; returns a token for :func:`reset_log_context`."""
    _check_fields(fields)
    merged = {**_context.get(), **{k: v for k, v in fields.items() if v is not None}}
    return _context.set(MappingProxyType(merged))


def reset_log_context(token: contextvars.Token[Mapping[str, object]]) -> None:
    _context.reset(token)


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Bind fields while the block runs; tasks created inside keep them afterwards."""
    token = bind_log_context(**fields)
    try:
        yield
    finally:
        reset_log_context(token)


def _queue_fields(record: logging.LogRecord) -> dict[str, object]:
    args = record.args
    values: tuple[object, ...]
    if isinstance(args, tuple):
        values = args
    elif isinstance(args, Mapping):
        values = tuple(args.values())
    else:
        return {}
    for value in values:
        if isinstance(value, MessageQueue):
            return {"topic": value.topic, "broker": value.broker_name, "queue": value.queue_id}
    return {}


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields of ``record``, in :data:`FIELDS` order."""
    cached = getattr(record, _FIELDS_ATTR, None)
    if isinstance(cached, dict):
        return cached
    found: dict[str, object] = {}
    for name in FIELDS:
        value = record.__dict__.get(name)
        if value is not None:
            found[name] = value
    for source in (_queue_fields(record), _context.get()):
        for name, value in source.items():
            found.setdefault(name, value)
    ordered = {name: found[name] for name in FIELDS if name in found}
    setattr(record, _FIELDS_ATTR, ordered)
    return ordered


class ContextFilter(logging.Filter):
    """Stamps each record with its fields while still in the task that logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record_fields(record)
        return True


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(record_fields(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [group=g topic=T queue=3]: message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rmqk_text_fields)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        record.rmqk_text_fields = f" [{text}]" if text else ""
        return super().format(record)


def configure_logging(
    level: str = "WARNING", fmt: str = "text", stream: IO[str] | None = None
) -> logging.Handler:
    """Send log records to ``stream`` (stderr) as text or JSON lines.

    ``level`` applies to rmqk's loggers; other libraries' loggers (py4j, asyncio)
    log at WARNING or above, so ``--log-level DEBUG`` shows rmqk's debugging only.
    Calling it again replaces the handler it installed before.
    """
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    numeric = logging.getLevelName(level)
    root.setLevel(max(numeric, logging.WARNING))
    logging.getLogger("rmqk").setLevel(numeric)
    return handler
