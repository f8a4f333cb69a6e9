"""A group-commit sink's buffered batches, and building their parts ahead of the flush.

A sink whose writes need the rows in another form (Arrow columns) would build
a whole flush when it is due: for a flush of 100,000 rows that stalls the
event loop for a quarter of a second, and the last flush's building is a
serial tail after the last message arrives. :class:`PartBuilder` instead builds
parts of about ``part_rows`` rows on the event loop as batches arrive, one part
per turn of the loop; a flush then slices what is built (Arrow slices are
views) and builds only the few batches that arrived last.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt

__all__ = ["Part", "PartBuilder", "Pending"]

log = logging.getLogger("rmqk.plugins.sinks.groupcommit")

Batches = Sequence[tuple[MessageQueue, Sequence[MessageExt]]]


class Part(Protocol):
    """What a sink builds of batches: one row per message, in order (an Arrow batch)."""

    @property
    def num_rows(self) -> int: ...

    def slice(self, offset: int = 0, length: int | None = None) -> Any: ...


class _Buffer(Protocol):
    def _withdraw(self, entry: Pending) -> None: ...


class Pending(asyncio.Future[None]):
    """One buffered batch, and the future ``submit`` returns for it.

    The batch is its own future: a sink keeps a whole window of batches (some
    6,000) in flight, and every object each one holds up is walked by each full
    collection of the cyclic garbage collector. So no separate future, and no
    done callback to withdraw a cancelled batch: :meth:`cancel` does it.
    """

    __slots__ = ("at", "built", "bytes", "messages", "owner", "part", "queue", "row")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        owner: _Buffer,
        queue: MessageQueue,
        messages: Sequence[MessageExt],
        at: float,
    ) -> None:
        super().__init__(loop=loop)
        self.owner = owner
        self.queue = queue
        self.messages = messages
        self.at = at
        self.bytes = sum([len(m.body) for m in messages])
        # Taken by the builder (or by a flush, or withdrawn): no longer to build ahead.
        self.built = False
        # The part holding this batch's rows from row ``row`` on, once built.
        self.part: Any = None
        self.row = 0

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel, and take the batch out of the buffer if no flush has taken it yet.

        Every cancellation comes through here: a direct call, and a task (or
        ``wait_for``, ``gather``) cancelled while awaiting this future.
        """
        if not super().cancel(msg):
            return False
        self.owner._withdraw(self)
        return True


class PartBuilder:
    """Builds parts of about ``part_rows`` rows of the batches buffered, in arrival order."""

    def __init__(self, build: Callable[[Batches], Part], part_rows: int, name: str) -> None:
        self._build = build
        self.part_rows = part_rows
        self._name = name
        # Batches not built yet, in arrival order (some may have left: see Pending.built).
        self._unbuilt: deque[Pending] = deque()
        self._unbuilt_rows = 0
        self._task: asyncio.Task[None] | None = None

    def added(self, entry: Pending, loop: asyncio.AbstractEventLoop) -> None:
        """A batch was buffered: build once a whole part's rows wait."""
        self._unbuilt.append(entry)
        self._unbuilt_rows += len(entry.messages)
        if self._unbuilt_rows >= self.part_rows and self._task is None:
            self._task = loop.create_task(self._build_ahead(), name=self._name)

    def left(self, entry: Pending) -> None:
        """A batch left the buffer (a flush took it, or it was withdrawn): not to build."""
        if not entry.built:
            entry.built = True
            self._unbuilt_rows -= len(entry.messages)

    async def _build_ahead(self) -> None:
        try:
            while self._unbuilt_rows >= self.part_rows:
                self._build_next()
                await asyncio.sleep(0)
        finally:
            self._task = None

    def _build_next(self) -> None:
        run: list[Pending] = []
        rows = 0
        while self._unbuilt and rows < self.part_rows:
            entry = self._unbuilt.popleft()
            if entry.built:
                continue
            self.left(entry)
            run.append(entry)
            rows += len(entry.messages)
        if not run:
            return
        try:
            part = self._build([(e.queue, e.messages) for e in run])
        except Exception as exc:
            # Their flush builds them again, and fails with the error if it comes back.
            log.debug("%s: building ahead failed: %r", self._name, exc)
            return
        row = 0
        for entry in run:
            entry.part = part
            entry.row = row
            row += len(entry.messages)

    async def assemble(self, batch: Sequence[Pending]) -> list[Any]:
        """A flush's parts in row order: slices of what was built ahead, the rest built now.

        Raises what building raises (the flush fails).
        """
        parts: list[Any] = []
        i = 0
        while i < len(batch):
            entry = batch[i]
            j = i + 1
            if entry.part is None:
                rows = len(entry.messages)
                while j < len(batch) and batch[j].part is None and rows < self.part_rows:
                    rows += len(batch[j].messages)
                    j += 1
                parts.append(self._build([(e.queue, e.messages) for e in batch[i:j]]))
                if j < len(batch):
                    await asyncio.sleep(0)  # keep each pause of the loop short
            else:
                part, start = entry.part, entry.row
                end = start + len(entry.messages)
                while j < len(batch) and batch[j].part is part and batch[j].row == end:
                    end += len(batch[j].messages)
                    j += 1
                whole = start == 0 and end == part.num_rows
                parts.append(part if whole else part.slice(start, end - start))
            i = j
        return parts
