"""Delay levels (ScheduleMessageService).

A message sent with ``DELAY=n`` is stored in ``SCHEDULE_TOPIC_XXXX`` queue
``n - 1`` with its real topic and queue id in ``REAL_TOPIC``/``REAL_QID``; its
consume queue entry carries the delivery time (store time + level delay) in
place of the tag hash. This service walks each level's queue in order and, when
an entry is due, stores the message again in its real topic and queue.

What the delivered copy keeps is what Apache 4.9.8 keeps: body, flag, sysFlag,
born timestamp and host, reconsume times, and the properties text of the
scheduled record unchanged, so ``DELAY``, ``REAL_TOPIC`` and ``REAL_QID`` stay
visible to consumers (Java removes ``DELAY`` from the property map only after
it has rendered the text it stores). It gets a new store timestamp, commit log
offset and queue offset, and its tag hash is computed from ``TAGS`` again.

Progress per level is persisted (``delayOffset.json``) periodically and on
close; after a crash, messages delivered since the last write are delivered
again, as on Apache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from rmqk.spi.aio import wait_event

from .files import StoreError, read_json_document, write_json_document

if TYPE_CHECKING:
    from .message_store import MessageStore

__all__ = [
    "SCHEDULE_TOPIC",
    "ScheduleService",
    "ScheduleTick",
    "delay_levels_text",
    "parse_delay_levels",
]

log = logging.getLogger("rmqk.broker.store.schedule")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"^(\d+)(ms|s|m|h|d)$")
# Deliveries per pass before yielding to the event loop.
_MAX_PER_PASS = 2000
# When a re-put fails, try that level again after this long (Java's DELAY_FOR_A_WHILE).
_RETRY_MS = 100


def delay_levels_text(levels: str | Sequence[int]) -> str:
    """Delay levels as the store takes them: Apache's ``"1s 5s ..."`` text (ints are ms)."""
    if isinstance(levels, str):
        return levels
    return " ".join(f"{int(ms)}ms" for ms in levels)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 10s 30s 1m ..."`` as milliseconds per level (level 1 first).

    Units are Java's ``s m h d`` plus ``ms`` (not in Java) for fast tests.
    """
    levels: list[int] = []
    for index, token in enumerate(text.split(), start=1):
        match = _LEVEL.match(token)
        if match is None:
            raise ValueError(
                f"delay level {index} is {token!r}: expected a number followed by one of "
                "ms, s, m, h, d (e.g. '1s 5s 10s 30s 1m')"
            )
        levels.append(int(match.group(1)) * _UNITS[match.group(2)])
    if not levels:
        raise ValueError("delay_levels is empty: at least one level is needed")
    return tuple(levels)


@attrs.frozen
class ScheduleTick:
    """The outcome of one delivery pass."""

    delivered: int
    next_due_ms: int | None  # the earliest pending delivery time, None when nothing waits


class ScheduleService:
    def __init__(self, store: MessageStore, levels: tuple[int, ...], path: Path) -> None:
        self._store = store
        self.levels = levels
        self.path = path
        self._offsets: dict[int, int] = {}
        self._persisted: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._write_lock = threading.Lock()

    @property
    def max_level(self) -> int:
        return len(self.levels)

    def delay_of(self, level: int) -> int:
        return self.levels[min(level, len(self.levels)) - 1]

    def offset_of(self, level: int) -> int:
        """The queue offset in level ``level``'s queue of the next message to deliver."""
        return self._offsets.get(level, 0)

    def offsets(self) -> tuple[tuple[int, int], ...]:
        """(level, next offset) pairs, for GET_ALL_DELAY_OFFSET."""
        return tuple(sorted(dict(self._offsets).items()))

    # -- persistence ---------------------------------------------------------------

    def load(self) -> None:
        document = read_json_document(self.path)
        if document is None:
            return
        try:
            offsets = {int(k): int(v) for k, v in document["offsetTable"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{self.path}: not a delay offset document: {exc}") from None
        self._offsets = offsets
        self._persisted = dict(offsets)

    def persist(self) -> bool:
        with self._write_lock:
            snapshot = dict(self._offsets)
            if snapshot == self._persisted:
                return False
            write_json_document(
                self.path, {"offsetTable": {str(k): v for k, v in sorted(snapshot.items())}}
            )
            self._persisted = snapshot
            return True

    # -- delivery ------------------------------------------------------------------

    def deliver_due(self, now_ms: int | None = None) -> ScheduleTick:
        """Deliver every message whose time has come; never blocks on a timer."""
        store = self._store
        now = store.now_ms() if now_ms is None else now_ms
        delivered = 0
        next_due: int | None = None
        for level in range(1, len(self.levels) + 1):
            cq = store.consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            offset = max(self._offsets.get(level, 0), cq.min_offset)
            if offset > cq.max_offset:
                log.error(
                    "delay level %d offset %d is past its queue's end %d; resetting",
                    level,
                    offset,
                    cq.max_offset,
                )
                offset = cq.max_offset
            limit = self.levels[level - 1]
            while offset < cq.max_offset:
                if delivered >= _MAX_PER_PASS:
                    next_due = now
                    break
                entry = cq.entry(offset)
                if entry is None:
                    offset += 1
                    continue
                phys, size, deliver_at = entry
                # A delivery time further away than the level's delay means the clock
                # went back (or the levels changed): deliver now (correctDeliverTimestamp).
                if deliver_at > now + limit:
                    deliver_at = now
                if deliver_at > now:
                    next_due = deliver_at if next_due is None else min(next_due, deliver_at)
                    break
                if not store.deliver_scheduled(phys, size):
                    retry = now + _RETRY_MS
                    next_due = retry if next_due is None else min(next_due, retry)
                    break
                offset += 1
                delivered += 1
            self._offsets[level] = offset
        return ScheduleTick(delivered, next_due)

    def wake(self) -> None:
        """A delayed message was stored: let :meth:`run` recompute its sleep. Any thread."""
        loop, event = self._loop, self._event
        if loop is None or event is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is shutting down
            loop.call_soon_threadsafe(event.set)

    async def run(self) -> None:
        """Deliver due messages until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        try:
            while True:
                self._event.clear()
                try:
                    tick = self.deliver_due()
                except Exception:
                    log.exception("delay delivery pass failed; retrying in 1 s")
                    tick = ScheduleTick(0, self._store.now_ms() + 1000)
                if tick.next_due_ms is None:
                    timeout = 1.0
                else:
                    timeout = max(0.0, (tick.next_due_ms - self._store.now_ms()) / 1000)
                if timeout == 0.0:
                    await asyncio.sleep(0)
                    continue
                await wait_event(self._event, min(timeout, 1.0))
        finally:
            self._loop = None
            self._event = None
