"""The ``jsonl`` sink: append one JSON object per message to a file.

Writes are group-committed (:mod:`rmqk.plugins.sinks.groupcommit`): a flush
starts as soon as a batch waits, batches that arrive while it runs wait for
the next one, and every flush ends with fsync, so a batch is acknowledged only
when its lines are on disk. A worker of ``processes = N`` writes ``<stem>.w<i><suffix>``
(``out.w1.jsonl``) instead, so N writers never share one file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rmqk.optionspec import OptionSpec, declared_options
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.jsonl_options import JsonlOptions, parse_jsonl_options
from rmqk.plugins.sinks.records import message_record
from rmqk.workers import worker_path

__all__ = ["JsonlSink"]


class JsonlSink(GroupCommitSink):
    sink_name: ClassVar[str] = "jsonl"
    # The sink_options it takes: the kernel checks a consumer's table against them.
    option_specs: ClassVar[tuple[OptionSpec, ...]] = declared_options(JsonlOptions)

    def __init__(self, options: Mapping[str, Any]) -> None:
        parsed = parse_jsonl_options(options)
        # Under `processes = N` each worker appends to its own file (out.w0.jsonl, ...).
        self.path = Path(worker_path(parsed.path))
        self.body_format = parsed.body_format
        self.fsync = parsed.fsync
        self._fd: int | None = None
        # No row or byte limit and no wait: each flush takes whatever is waiting.
        super().__init__(FlushTriggers(), target=str(self.path))

    def open_output(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write_batch(self, flush: Flush) -> int:
        assert self._fd is not None
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
        return flush.rows

    def close_output(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
