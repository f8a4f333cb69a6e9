"""The ``jsonl`` sink: append one JSON object per message to a file.

Writes are group-committed (:mod:`rmqk.plugins.sinks.groupcommit`): a flush
starts as soon as a batch waits, batches that arrive while it runs wait for
the next one, and every flush ends with fsync, so a batch is acknowledged only
when its lines are on disk. A worker of ``processes = N`` writes ``<stem>.w<i><suffix>``
(``out.w1.jsonl``) instead, so N writers never share one file. With
``body_format = "json"`` a body that is not JSON is kept raw in
``corrupt_record_column``, or halts the consumer (``on_bad_body``; see
:mod:`rmqk.plugins.sinks.badbody`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar

from rmqk.model.errors import ConfigError
from rmqk.plugins.sinks.badbody import BadBodyCounter, BadBodyError, why_unparsed
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.jsonl_options import (
    JsonlOptions,
    jsonl_option_problems,
    parse_jsonl_options,
)
from rmqk.plugins.sinks.records import is_bad, message_record
from rmqk.spi.contracts import SinkContext
from rmqk.spi.factory import PluginFactory
from rmqk.spi.workers import worker_path

__all__ = ["JSONL_SINK", "JsonlSink"]

log = logging.getLogger("rmqk.plugins.sinks.jsonl")


class JsonlSink(GroupCommitSink):
    sink_name: ClassVar[str] = "jsonl"

    def __init__(self, options: Mapping[str, Any] | JsonlOptions) -> None:
        parsed = options if isinstance(options, JsonlOptions) else parse_jsonl_options(options)
        # Under `processes = N` each worker appends to its own file (out.w0.jsonl, ...).
        self.path = Path(worker_path(parsed.path))
        self.body_format = parsed.body_format
        self.fsync = parsed.fsync
        self.on_bad_body = parsed.on_bad_body
        self.corrupt_record_column = parsed.corrupt_record_column
        self.bad_bodies = BadBodyCounter()
        # Bad bodies per topic of the flush being written, counted once it is on disk.
        self._bad: dict[str, int] = {}
        self._fd: int | None = None
        # No row or byte limit and no wait: each flush takes whatever is waiting.
        super().__init__(FlushTriggers(), target=str(self.path))

    def open_output(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def watch_bad_bodies(self, topics: Collection[str], report: Callable[[str, int], None]) -> None:
        self.bad_bodies.watch(topics, report)

    def write_batch(self, flush: Flush) -> int:
        assert self._fd is not None
        if self.body_format == "json":
            data = self._json_lines(flush)
        else:
            data = b"".join(
                json.dumps(message_record(queue, m, self.body_format), ensure_ascii=False).encode()
                + b"\n"
                for queue, messages in flush.batches
                for m in messages
            )
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.fsync:
            os.fsync(self._fd)
        if self._bad:
            self.bad_bodies.add(self._bad)
            self._bad = {}
        return flush.rows

    def _json_lines(self, flush: Flush) -> bytes:
        """The lines of a flush with parsed bodies; bad ones kept raw, or the halt."""
        column = self.corrupt_record_column
        lines: list[bytes] = []
        bad: dict[str, int] = {}
        first: tuple[Any, Any] | None = None
        for queue, messages in flush.batches:
            for m in messages:
                record = message_record(queue, m, "json", column)
                if is_bad(record, column):
                    if self.on_bad_body == "fail":
                        # Nothing of this flush is written: the consumer stops here.
                        raise BadBodyError(self.sink_name, queue, m, why_unparsed(m.body))
                    bad[m.topic] = bad.get(m.topic, 0) + 1
                    if first is None:
                        first = (queue, m)
                lines.append(json.dumps(record, ensure_ascii=False).encode() + b"\n")
        if first is not None:
            queue, m = first
            log.warning(
                "jsonl sink: %d bodies of this flush to %s are not JSON, kept raw in %s "
                "(the first: message %s, topic %s, queue %s/%s, offset %s: %s)",
                sum(bad.values()),
                self.path,
                column,
                m.msg_id,
                m.topic,
                queue.broker_name,
                queue.queue_id,
                m.queue_offset,
                why_unparsed(m.body),
            )
        # Counted once the lines are on disk (write_batch).
        self._bad = bad
        return b"".join(lines)

    def close_output(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def build_jsonl_sink(context: SinkContext, options: JsonlOptions) -> JsonlSink:
    """The registered factory of ``jsonl``: the checks across options, then the sink."""
    problems = jsonl_option_problems(options)
    if problems:
        raise ConfigError(problems)
    return JsonlSink(options)


# The sink_options it takes are declared: the kernel checks a consumer's table.
JSONL_SINK: PluginFactory[SinkContext, JsonlSink] = PluginFactory(
    "jsonl", build_jsonl_sink, options=JsonlOptions
)
