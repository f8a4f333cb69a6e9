"""Held pull requests (PullRequestHoldService).

A pull that finds nothing new with the suspend flag set is parked here instead
of answered. It is answered (by re-running it, never suspending again):

* as soon as a message the pull's filter matches arrives in its queue. As
  Apache's notifyMessageArriving does with the arriving message's tags code,
  only the new consume-queue entries are looked at: their tags codes are read
  once per arrival and each held pull's ``has_match`` judges them (a pull
  without a tag filter, ``has_match`` None, matches every arrival, as
  ExpressionMessageFilter does). With few pulls held on the queue
  (``INLINE_MAX_HELD``) this runs inside the put that stored the message, before
  the sender's response is written, which takes a loop pass off the delivery
  latency; with more it runs at the next turn of the event loop, off the send
  path, once for a burst of arrivals. Either way a send costs no store scan per
  held pull;
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

from rmqk.wire.protocol import RemotingCommand

__all__ = ["HeldPull", "PullHoldService"]

log = logging.getLogger("rmqk.broker.longpoll")


# Past this many unexamined arrivals in one queue, a held pull is re-run rather
# than its new entries read: the pull's own scan then decides.
MAX_ARRIVAL_SCAN = 1024

# Up to this many pulls held on a queue are answered inside the put that fed it.
INLINE_MAX_HELD = 64

# has_match(queue offset, tags code): whether the entry there would be pulled.
ArrivalMatch = Callable[[int, int], bool]
# tags_codes(topic, queue id, start, end): the entries' tags codes, None if unreadable.
TagsCodes = Callable[[str, int, int, int], "list[int] | None"]


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
    has_match: ArrivalMatch | None
    suspended_at: float = attrs.field(factory=time.monotonic)
    # Entries below this queue offset were judged on their arrival already.
    checked_to: int = attrs.field(default=attrs.Factory(lambda self: self.offset, takes_self=True))


class PullHoldService:
    def __init__(
        self,
        execute: Callable[[HeldPull], None],
        max_offset: Callable[[str, int], int],
        *,
        tags_codes: TagsCodes | None = None,
        check_interval: float = 5.0,
    ) -> None:
        self._execute = execute
        self._max_offset = max_offset
        self._tags_codes = tags_codes
        self.check_interval = check_interval
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._dirty: dict[tuple[str, int], int] = {}  # queue → newest max offset heard of
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
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            key = (topic, queue_id)
            held = self._held.get(key)
            if held is not None and len(held) <= INLINE_MAX_HELD:
                # Few held pulls: answering them inside the put takes a whole pass of
                # the loop off their delivery latency, at a bounded cost to the send.
                self._arrived(key, max_offset)
            else:
                self._mark(key, max_offset)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._mark, (topic, queue_id), max_offset)

    def _mark(self, key: tuple[str, int], max_offset: int) -> None:
        if key not in self._held:
            return
        if max_offset > self._dirty.get(key, -1):
            self._dirty[key] = max_offset
        if not self._wake_scheduled and self._loop is not None:
            # After the put that stored the message has answered its sender; a burst
            # of arrivals is coalesced into one pass.
            self._wake_scheduled = True
            self._loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        dirty, self._dirty = self._dirty, {}
        for key, max_offset in dirty.items():
            try:
                self._arrived(key, max_offset)
            except Exception:
                log.exception("checking held pulls on %s failed", key)

    def _arrived(self, key: tuple[str, int], max_offset: int) -> None:
        """notifyMessageArriving: judge only what arrived since each pull's last look."""
        pulls = self._held.pop(key, None)
        if not pulls:
            return
        start = min(p.checked_to for p in pulls)
        codes: list[int] | None = None
        if self._tags_codes is not None and 0 <= max_offset - start <= MAX_ARRIVAL_SCAN:
            codes = self._tags_codes(key[0], key[1], start, max_offset)
        now = time.monotonic()
        verdicts: dict[tuple[ArrivalMatch, int], bool] = {}
        keep: list[HeldPull] = []
        for pull in pulls:
            if pull.conn.closed:
                continue
            has_match = pull.has_match
            if max_offset <= pull.checked_to:
                ready = False
            elif has_match is None or codes is None:
                ready = True
            else:
                first = pull.checked_to - start
                # Pulls of one subscription share a filter: judge each entry once.
                verdict = verdicts.get((has_match, first))
                if verdict is None:
                    verdict = any(has_match(start + i, codes[i]) for i in range(first, len(codes)))
                    verdicts[(has_match, first)] = verdict
                ready = verdict
                pull.checked_to = max_offset
            if ready or now >= pull.suspended_at + pull.timeout:
                self._answer(key, pull)
            else:
                keep.append(pull)
        if keep:
            self._held.setdefault(key, []).extend(keep)

    def _answer(self, key: tuple[str, int], pull: HeldPull) -> None:
        try:
            self._execute(pull)
        except Exception:
            log.exception("answering held pull on %s failed", key)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            for key in list(self._held):
                self._check(key)

    def _check(self, key: tuple[str, int]) -> None:
        """The periodic check: anything new, matched or not, answers, as Apache's does."""
        pulls = self._held.pop(key, None)
        if not pulls:
            return
        now = time.monotonic()
        keep: list[HeldPull] = []
        try:
            newest = self._max_offset(key[0], key[1])
        except Exception:
            log.exception("checking held pulls on %s failed", key)
            newest = None
        for pull in pulls:
            if pull.conn.closed:
                continue
            if newest is None or newest > pull.offset or now >= pull.suspended_at + pull.timeout:
                self._answer(key, pull)
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
