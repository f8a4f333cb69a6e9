"""Held pull requests (PullRequestHoldService).

A pull that finds nothing new with the suspend flag set is parked here instead
of answered. It is answered (by re-running it, never suspending again):

* as soon as a message the pull's filter matches arrives in its queue: the
  store's arrival listener answers it right there, inside the put that stored
  the message (before that send's own response is written), as Apache's
  notifyMessageArriving does from the dispatch; a pull without a tag filter
  (``has_match`` None) matches every arrival, as ExpressionMessageFilter does;
* at the periodic check (every ``check_interval`` seconds, 5 s as on Apache)
  once anything new is in the queue, matched or not, or once the pull's
  ``suspendTimeoutMillis`` has passed. So, as on Apache, a suspended pull may be
  held up to ``check_interval`` longer than its suspend time.

Arrival callbacks may come from any thread; they are moved onto the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from rmqk.protocol import RemotingCommand

__all__ = ["HeldPull", "PullHoldService"]

log = logging.getLogger("rmqk.broker.longpoll")


@attrs.define(eq=False)
class HeldPull:
    """One suspended PULL_MESSAGE and what is needed to answer it later."""

    conn: Any
    request: RemotingCommand
    serialize_type: int
    topic: str
    queue_id: int
    offset: int
    timeout: float
    has_match: Callable[[], bool] | None
    suspended_at: float = attrs.field(factory=time.monotonic)


class PullHoldService:
    def __init__(
        self,
        execute: Callable[[HeldPull], None],
        max_offset: Callable[[str, int], int],
        *,
        check_interval: float = 5.0,
    ) -> None:
        self._execute = execute
        self._max_offset = max_offset
        self.check_interval = check_interval
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake_scheduled = False

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._task = self._loop.create_task(self._run(), name="rmqk-pull-hold")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._held.clear()

    def hold(self, pull: HeldPull) -> None:
        self._held.setdefault((pull.topic, pull.queue_id), []).append(pull)

    def on_message_arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's listener: a queue grew. Safe to call from any thread."""
        key = (topic, queue_id)
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            # Answering now, not at the next loop iteration, takes a whole pass of
            # the loop (and the sender's response write) off the delivery latency.
            if key in self._held:
                self._check(key, arrival=True)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._mark, key)

    def _mark(self, key: tuple[str, int]) -> None:
        if key not in self._held:
            return
        self._dirty.add(key)
        if not self._wake_scheduled and self._loop is not None:
            # Coalesce a burst of arrivals from another thread into one pass.
            self._wake_scheduled = True
            self._loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            self._check(key, arrival=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            for key in list(self._held):
                self._check(key, arrival=False)

    def _check(self, key: tuple[str, int], *, arrival: bool) -> None:
        pulls = self._held.pop(key, None)
        if not pulls:
            return
        now = time.monotonic()
        keep: list[HeldPull] = []
        newest: int | None = None
        for pull in pulls:
            if pull.conn.closed:
                continue
            ready = False
            try:
                if newest is None or newest <= pull.offset:
                    newest = self._max_offset(pull.topic, pull.queue_id)
                if newest > pull.offset:
                    # On arrival only a matching message answers the pull; the
                    # periodic check answers on anything new, as Apache's does.
                    has_match = pull.has_match
                    ready = has_match() if arrival and has_match is not None else True
            except Exception:
                log.exception("checking held pull on %s failed", key)
                ready = True
            if not ready and now >= pull.suspended_at + pull.timeout:
                ready = True
            if ready:
                try:
                    self._execute(pull)
                except Exception:
                    log.exception("answering held pull on %s failed", key)
            else:
                keep.append(pull)
        if keep:
            self._held.setdefault(key, []).extend(keep)

    def drop_connection(self, conn: Any) -> None:
        for key in list(self._held):
            rest = [p for p in self._held[key] if p.conn is not conn]
            if rest:
                self._held[key] = rest
            else:
                del self._held[key]
