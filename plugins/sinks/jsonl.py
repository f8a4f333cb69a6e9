"""The ``jsonl`` sink: append one JSON object per message to a file.

Writes are group-committed: batches that arrive while a flush is running wait
for the next one, and every flush ends with fsync, so ``write`` returns only
when its lines are on disk (and the consumer acknowledges only then).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rmqk.message import MessageExt
from rmqk.model import MessageQueue
from rmqk.plugins.sinks.jsonl_options import parse_jsonl_options
from rmqk.plugins.sinks.records import message_record

__all__ = ["JsonlSink"]


class JsonlSink:
    def __init__(self, options: Mapping[str, Any]) -> None:
        parsed = parse_jsonl_options(options)
        self.path = Path(parsed.path)
        self.body_format = parsed.body_format
        self.fsync = parsed.fsync
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flushing: asyncio.Task[None] | None = None
        self._fd: int | None = None
        self.rows_written = 0

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        if self._fd is None:
            await self.start()
        data = b"".join(
            json.dumps(message_record(queue, m, self.body_format), ensure_ascii=False).encode()
            + b"\n"
            for m in messages
        )
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((data, fut))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_all())
        await fut
        self.rows_written += len(messages)

    async def _flush_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write_sync, b"".join(d for d, _ in batch))
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    def _write_sync(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(self._fd)

    async def close(self) -> None:
        if self._flushing is not None:
            await self._flushing
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
