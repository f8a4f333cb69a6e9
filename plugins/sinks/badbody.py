"""Bodies a sink cannot parse: kept raw in a corrupt-record column, counted, or fatal.

Every sink that parses bodies (``body_format = "json"``: the ``jsonl`` and
``spark`` sinks) follows one rule, modelled on Spark's PERMISSIVE mode with
``columnNameOfCorruptRecord``:

* a body that parses gets its columns (or value) and a null corrupt-record
  column (``corrupt_record_column``, default ``_corrupt_record``);
* a body that does not has null body columns and the raw body in the
  corrupt-record column; it is counted (:class:`BadBodyCounter`, reported to the
  consumer's statistics: the ``rmqk_bad_bodies_total`` metric and the line
  ``rmqk run`` stops with) and logged (a WARNING, the first of each flush);
* with ``on_bad_body = "fail"`` such a body halts the sink instead:
  :class:`BadBodyError` (a :class:`~rmqk.model.errors.SinkHalted`) fails the flush
  before anything of it is written, and the consumer stops without committing
  the offset.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection

from rmqk.model import MessageQueue
from rmqk.model.errors import SinkHalted
from rmqk.model.message import MessageExt
from rmqk.spi.options import OptionInvalid

__all__ = [
    "BAD_BODY_ACTIONS",
    "CORRUPT_RECORD_COLUMN",
    "BadBodyCounter",
    "BadBodyError",
    "check_column_name",
    "why_unparsed",
]

BAD_BODY_ACTIONS = ("keep", "fail")
CORRUPT_RECORD_COLUMN = "_corrupt_record"

ON_BAD_BODY_DOC = (
    "With body_format = 'json', what a body that does not parse does: keep (null body "
    "columns, the raw body in corrupt_record_column, counted in rmqk_bad_bodies_total) or "
    "fail (the consumer stops with an error naming the message; its offset is not committed)."
)
CORRUPT_RECORD_COLUMN_DOC = (
    "With body_format = 'json': the column holding the raw body of a message whose body "
    "does not parse (null for those that do), as Spark's columnNameOfCorruptRecord."
)


def check_column_name(value: str) -> str:
    """A corrupt-record column name: a plain identifier (it becomes a column or a key)."""
    if not value or not (value[0].isalpha() or value[0] == "_"):
        raise OptionInvalid(f"must be a column name (a letter or _ first), got {value!r}")
    if not all(ch.isalnum() or ch == "_" for ch in value) or not value.isascii():
        raise OptionInvalid(f"must be a column name of letters, digits and _, got {value!r}")
    return value


class BadBodyError(SinkHalted):
    """A body the sink cannot parse, with ``on_bad_body = "fail"``."""

    def __init__(self, sink: str, queue: MessageQueue, msg: MessageExt, why: str) -> None:
        super().__init__(
            f"{sink} sink: the body of message {msg.msg_id} (topic {msg.topic}, queue "
            f"{queue.broker_name}/{queue.queue_id}, offset {msg.queue_offset}) does not parse "
            f"with body_format = 'json': {why}; on_bad_body = 'fail' stops the consumer "
            "without committing its offset (on_bad_body = 'keep' keeps such bodies raw in "
            "the corrupt-record column)"
        )
        self.topic = msg.topic
        self.queue = queue
        self.queue_offset = msg.queue_offset
        self.msg_id = msg.msg_id
        self.why = why


def why_unparsed(body: bytes, schema: str | None = None) -> str:
    """Why ``body`` is not a JSON document (of ``schema``'s shape), in a few words."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start})"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc})" if text.strip() else "empty, not JSON"
    if schema is None:
        return "not JSON"
    if not isinstance(value, dict):
        return f"a JSON {_json_kind(value)}, not an object"
    return f"a value does not fit body_schema ({schema})"


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


class BadBodyCounter:
    """Bad bodies per topic, reported to the consumers that watch them.

    Counted from a writer thread; each topic's count goes to the first consumer
    watching it (a sink shared by several consumers of one process).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_topic: dict[str, int] = {}
        self._watchers: list[tuple[Collection[str], Callable[[str, int], None]]] = []

    @property
    def total(self) -> int:
        return sum(self.by_topic.values())

    def watch(self, topics: Collection[str], report: Callable[[str, int], None]) -> None:
        with self._lock:
            self._watchers.append((topics, report))

    def add(self, counts: dict[str, int]) -> None:
        with self._lock:
            for topic, n in counts.items():
                self.by_topic[topic] = self.by_topic.get(topic, 0) + n
            watchers = list(self._watchers)
        for topic, n in counts.items():
            report = next((r for t, r in watchers if topic in t), None)
            if report is None and watchers:
                # A retry topic's message carries its real topic; a consumer of no
                # such topic still gets it rather than nobody.
                report = watchers[0][1]
            if report is not None:
                report(topic, n)
