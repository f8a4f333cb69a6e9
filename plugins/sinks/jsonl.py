"""The ``jsonl`` sink: append one JSON object per message to a file.

Writes are group-committed (:mod:`rmqk.plugins.sinks.groupcommit`): a flush
starts as soon as a batch waits, batches that arrive while it runs wait for
the next one, and every flush ends with fsync, so a batch is acknowledged only
when its lines are on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rmqk.errors import ConfigError, ConfigProblem
from rmqk.plugins.sinks.groupcommit import Flush, FlushTriggers, GroupCommitSink
from rmqk.plugins.sinks.records import BODY_FORMATS, message_record

__all__ = ["JsonlSink"]

_KEYS = {"path", "fsync", "body_format"}


class JsonlSink(GroupCommitSink):
    sink_name: ClassVar[str] = "jsonl"

    def __init__(self, options: Mapping[str, Any]) -> None:
        problems = [
            ConfigProblem(
                "<sink_options>",
                "jsonl",
                key,
                f"unknown key; allowed keys: {', '.join(sorted(_KEYS))}",
            )
            for key in options
            if key not in _KEYS
        ]
        path = options.get("path")
        if not isinstance(path, str) or not path:
            problems.append(
                ConfigProblem("<sink_options>", "jsonl", "path", "required: the file to append to")
            )
        body_format = options.get("body_format", "text")
        if body_format not in BODY_FORMATS:
            problems.append(
                ConfigProblem(
                    "<sink_options>",
                    "jsonl",
                    "body_format",
                    f"must be one of {', '.join(BODY_FORMATS)}, got {body_format!r}",
                )
            )
        fsync = options.get("fsync", True)
        if not isinstance(fsync, bool):
            problems.append(
                ConfigProblem(
                    "<sink_options>", "jsonl", "fsync", f"must be true or false, got {fsync!r}"
                )
            )
        if problems:
            raise ConfigError(problems)
        self.path = Path(str(path))
        self.body_format = str(body_format)
        self.fsync = bool(fsync)
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
