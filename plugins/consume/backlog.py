"""The queue between the pull loops and the consume service's workers.

``asyncio.Queue`` wakes one waiting worker for every item put. A pull of 32
messages at listener batch size 1 is 32 chunks, so it woke up to 32 workers,
although a worker whose listener does not suspend takes all of them in one go:
the others then found nothing and went back to waiting, a task switch each for
nothing. :class:`Backlog` wakes one idle worker at a time instead: a put wakes
one when no other is already on its way, and a worker that takes a chunk and
leaves more behind wakes the next. So workers still join in one after another
as soon as the one before suspends (a slow or awaiting listener), up to all of
them, in the order they went idle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, TypeVar

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.spi.consume import ConsumeConcurrentlyContext, QueueView

__all__ = ["Backlog", "Chunk"]

T = TypeVar("T")


class Chunk:
    """One chunk of a pulled batch on its way to the listener.

    A chunk whose listener returned a future also keeps what settling it needs
    (``ctx``): no closure per chunk in flight (see ``_on_settled``).
    """

    __slots__ = ("ctx", "mq", "msgs", "pq", "start")

    # Set by ``_async_worker`` only: a chunk settled inline never pays for them.
    ctx: ConsumeConcurrentlyContext | None
    start: float

    def __init__(self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue) -> None:
        self.msgs = msgs
        self.pq = pq
        self.mq = mq


class Backlog(Generic[T]):
    """A FIFO with the subset of ``asyncio.Queue``'s interface the services use."""

    __slots__ = ("_idle", "_items", "_waking")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        # The futures of the workers waiting for an item, the longest waiting first.
        self._idle: deque[asyncio.Future[None]] = deque()
        # Workers woken that have not run yet: they will take what is there.
        self._waking = 0

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        if not self._waking:
            self._wake()

    def get_nowait(self) -> T:
        """The oldest item; raises ``asyncio.QueueEmpty`` when there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def take(self) -> T | None:
        """What :meth:`get` returns when an item is there, else None (no coroutine)."""
        items = self._items
        if not items:
            return None
        item = items.popleft()
        if items and not self._waking:
            self._wake()
        return item

    async def get(self) -> T:
        """The oldest item, waiting for one; wakes the next idle worker if more are left."""
        items = self._items
        while not items:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    # Woken, then cancelled before running: the wake-up goes to another.
                    self._waking -= 1
                    if items and not self._waking:
                        self._wake()
                else:
                    waiter.cancel()
                    with contextlib.suppress(ValueError):  # taken by _wake, already done
                        self._idle.remove(waiter)
                raise
            self._waking -= 1
        item = items.popleft()
        if items and not self._waking:
            self._wake()
        return item

    def _wake(self) -> None:
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._waking += 1
                return
