"""The poll buffer: fetched batches of every held queue, in the order they came."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from rmqk.engine.lite_pull.queues import QueueState
from rmqk.model.message import MessageExt
from rmqk.spi.aio import wait_event

__all__ = ["Batch", "PollBuffer"]


class Batch:
    """One non-empty pull response waiting for poll (Java's ConsumeRequest)."""

    __slots__ = ("generation", "messages", "state")

    def __init__(self, state: QueueState, generation: int, messages: list[MessageExt]) -> None:
        self.state = state
        self.generation = generation
        self.messages = messages


class PollBuffer:
    """Batches shared by all queues; ``poll`` waits on it for the next one."""

    __slots__ = ("_batches", "_ready")

    def __init__(self) -> None:
        self._batches: deque[Batch] = deque()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._batches)

    def put(self, batch: Batch) -> None:
        self._batches.append(batch)
        self._ready.set()

    def wake(self) -> None:
        """Let a waiting poll look again (queues resumed, consumer closing)."""
        self._ready.set()

    def take(self, is_current: Callable[[QueueState, int], bool]) -> Batch | None:
        """Pop the oldest batch of a queue that is held, current and not paused."""
        buffer = self._batches
        skipped: list[Batch] = []
        found: Batch | None = None
        while buffer:
            batch = buffer.popleft()
            if not is_current(batch.state, batch.generation):
                continue
            if batch.state.paused:
                skipped.append(batch)
                continue
            found = batch
            break
        buffer.extendleft(reversed(skipped))
        return found

    async def wait(self, timeout_s: float) -> None:
        self._ready.clear()
        await wait_event(self._ready, timeout_s)

    def discard(self, state: QueueState) -> None:
        """Forget every batch of ``state``'s queue (dropped or repositioned)."""
        self._batches = deque(b for b in self._batches if b.state is not state)

    def clear(self) -> None:
        self._batches.clear()
