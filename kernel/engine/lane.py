"""A plain ``def`` listener's calls, drained by its pool threads and answered in bulk (issue 29).

A thread hop per group of batches (``run_in_executor``: a concurrent future and its
asyncio twin, a pool thread woken, the loop woken for the result) made a plain
listener cost 1.3x (batch 32) to 2x (batch 1) the CPU a message of an ``async def``
one: the loop and the pool handed the GIL back and forth at every group. Here the
loop only appends calls to a deque; a drain loop on a pool thread takes them until
none is left, and hands outcomes back in bulk, one loop wake-up for all that finished
since the loop last took them (at the latest every :data:`POST_CALLS` calls or
:data:`POST_MS`, and whenever the deque runs dry). While quick calls come thick and
fast and no drain loop runs, one starts :data:`HAND_OFF_DELAY_MS` after a put, with
whatever else was put meanwhile: a wake-up of a pool thread and one of the loop for
every pull cost more than the listener's work.

One drain loop runs while calls are quick: threads contending for the GIL cost
more than such calls. When calls are slow, or one has run longer than the patience
with calls queued behind it, drain loops are started up to the pool's size, so a
hung call holds up only its own batch, as in Java's thread pool. A drain loop beyond
what is wanted (calls quick again, the pool shrunk) ends after its call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.spi.consume import ListenerOutcome

if TYPE_CHECKING:
    from rmqk.engine.listener import ListenerInvoker

__all__ = ["HAND_OFF_DELAY_MS", "POST_CALLS", "POST_MS", "QUICK_CALL_MS", "CallLane"]

log = logging.getLogger("rmqk.engine.listener")

# Calls quicker than this on average run on one drain loop.
QUICK_CALL_MS = 0.5
# What a call counts as once one outlasted the patience (well above QUICK_CALL_MS).
SLOW_CALL_MS = 5.0
# Quick calls put less than BUSY_PUT_GAP_MS apart (on average) wait HAND_OFF_DELAY_MS for
# company before a drain loop is started for them: a wake-up of the pool and one of the
# loop for each pull cost a plain listener 1.5x the CPU of an async one at batch 32; a
# millisecond makes them a few pulls each (1.1x). Slower puts start a call at once: at
# 1,000 pulls a second the delay had raised the p50 latency by 0.5 ms.
HAND_OFF_DELAY_MS = 1.0
BUSY_PUT_GAP_MS = 0.5
# Outcomes go back to the loop at the latest after this many calls or this long.
POST_CALLS = 64
POST_MS = 5.0

Call = tuple[Any, MessageQueue, list[MessageExt], Any]  # token, queue, messages, context


class CallLane:
    """Calls of one sync listener, without consume hooks, on its pool (see the module)."""

    def __init__(
        self,
        invoker: ListenerInvoker,
        pool_size: Callable[[], int],
        submit: Callable[..., Any],
        settle: Callable[[list[Any]], None],
        on_start: Callable[[Any], bool] | None = None,
        patience_s: float = 0.25,
    ) -> None:
        self._invoker = invoker
        self._pool_size = pool_size
        self._submit = submit
        self._settle = settle
        self._on_start = on_start
        self._patience_s = patience_s
        self._loop = asyncio.get_running_loop()
        self._work: deque[Call] = deque()
        self._lock = threading.Lock()
        # Outcomes of finished calls not yet taken by the loop. A deque: drain loops
        # append, the loop pops, each exactly once, with no lock; the loop is woken for
        # them in groups (_wake), and takes them at each patience check in any case, so a
        # call that hangs never holds up the outcomes of those before it.
        self._done: deque[tuple[Any, MessageQueue, ListenerOutcome | None]] = deque()
        self._wake_pending = False
        self._drainers = 0  # drain loops started and not ended (under the lock)
        # When each drain loop's call began (perf_counter), 0.0 between calls.
        self._began: dict[int, float] = {}
        # Moving average of a call; starts quick: one drain loop until seen otherwise.
        self.call_ms = 0.0
        self._watch: asyncio.TimerHandle | None = None
        self._spawn_handle: asyncio.Handle | None = None
        self._last_put = 0.0  # loop time of the last put
        self._put_gap = 1.0  # seconds between puts, averaged
        self._deferred: set[asyncio.Task[None]] = set()
        # Loop-only counts: what went in, what came out (settled or taken back).
        self._put = 0
        self._out = 0

    def running(self) -> int:
        """Calls begun (or being answered) whose outcome has not been settled yet."""
        return self._put - self._out - len(self._work)

    def put(self, calls: Sequence[Call]) -> bool:
        """Queue calls (on the loop); a drain loop starts if fewer run than wanted.

        False, and nothing queued, while the client has consume hooks: each call
        then goes through ``deliver``, the hooks around it.
        """
        if self._invoker.hooks_enabled():
            return False
        work = self._work
        work.extend(calls)
        self._put += len(calls)
        now = self._loop.time()
        # Moving average of the time between puts: bursts of pulls do not flip it.
        self._put_gap += (min(now - self._last_put, 1.0) - self._put_gap) * 0.2
        self._last_put = now
        lull = self._put_gap >= BUSY_PUT_GAP_MS / 1000
        if self._drainers or lull or len(work) >= POST_CALLS or self.call_ms >= QUICK_CALL_MS:
            self._spawn()
        elif self._spawn_handle is None:
            # Quick calls coming thick and fast, and no drain loop running: one starts
            # a moment later, with what else came meanwhile (see HAND_OFF_DELAY_MS).
            self._spawn_handle = self._loop.call_later(
                HAND_OFF_DELAY_MS / 1000, self._delayed_spawn
            )
        return True

    def _delayed_spawn(self) -> None:
        self._spawn_handle = None
        self._spawn()

    def take_back(self) -> list[Any]:
        """Remove the calls not begun and return their tokens (the service stops)."""
        tokens = []
        while True:
            try:  # one at a time: a drain loop may take one meanwhile
                tokens.append(self._work.popleft()[0])
            except IndexError:
                break
        self._out += len(tokens)
        return tokens

    def settle_now(self) -> None:
        """Settle the outcomes handed back and not yet taken (at stop)."""
        self._take()

    def _want(self) -> int:
        return 1 if self.call_ms < QUICK_CALL_MS else self._pool_size()

    def _spawn(self) -> None:
        """Start drain loops up to the number wanted, and the patience check (on the loop)."""
        self._more()
        if self._watch is None and self._drainers:
            self._watch = self._loop.call_later(self._patience_s, self._check)

    def _more(self) -> None:
        """Start drain loops up to the number wanted (on the loop, or in a drain loop that
        finds calls slow with others waiting)."""
        with self._lock:
            n = min(self._want() - self._drainers, len(self._work))
            if n <= 0:
                return
            self._drainers += n
        started = 0
        try:
            for _ in range(n):
                # The listener runs in a copy of the loop's context, as run_in_executor
                # would run it; one each, since a context is entered by one thread at a time.
                self._submit(self._drain, contextvars.copy_context())
                started += 1
        finally:
            if started < n:
                with self._lock:
                    self._drainers -= n - started

    def _drain(self, context: contextvars.Context) -> None:
        try:
            context.run(self._drain_loop)
        except BaseException:
            # Not a listener's failure (those are outcomes): this drain loop's own.
            log.exception("a drain loop of the listener pool failed")
            with self._lock:
                self._drainers -= 1

    def _drain_loop(self) -> None:
        work, lock, began = self._work, self._lock, self._began
        invoker, on_start = self._invoker, self._on_start
        listener, wants_context = invoker.listener, invoker.wants_context
        clock = time.perf_counter
        post_s = POST_MS / 1000
        me = threading.get_ident()
        done = self._done.append
        unposted = 0  # outcomes since this drain loop last woke the loop
        first = 0.0
        try:
            while True:
                try:
                    token, queue, msgs, context = work.popleft()
                except IndexError:
                    if unposted:
                        self._wake()
                        unposted = 0
                    with lock:
                        if not work:
                            # Whoever puts next sees one drain loop fewer and starts one.
                            self._drainers -= 1
                            return
                    continue
                # Quick calls begin within moments of their put, where the caller has
                # done what on_start does; slow ones may wait, so it runs as they begin.
                if on_start is not None and self.call_ms >= QUICK_CALL_MS and not on_start(token):
                    done((token, queue, None))
                    unposted += 1
                    continue
                start = began[me] = clock()
                try:
                    status = listener(msgs, context) if wants_context else listener(msgs)
                    error = None
                except Exception as exc:
                    status, error = None, exc
                end = clock()
                began[me] = 0.0
                ms = (end - start) * 1000
                self.call_ms += (ms - self.call_ms) * 0.3
                done((token, queue, ListenerOutcome(status, error, ms)))
                if not unposted:
                    first = end
                unposted += 1
                # A slow call's outcome goes back at once: the next call may be slow too.
                if unposted >= POST_CALLS or end - first >= post_s or ms >= QUICK_CALL_MS:
                    self._wake()
                    unposted = 0
                    if work and self.call_ms >= QUICK_CALL_MS:
                        self._more()  # slow calls queued: the rest of the pool joins in
                if self._drainers > 1 and self._drainers > self._want():
                    with lock:
                        if self._drainers > self._want():
                            self._drainers -= 1  # surplus: the calls are quick, or the pool shrank
                            return
        finally:
            began.pop(me, None)
            if unposted:
                self._wake()

    def _wake(self) -> None:
        """Have the loop take the outcomes (from a drain loop): one wake-up at a time.

        A benign race: two drain loops may both wake it (it then takes twice). None is
        lost: the loop clears the flag before it pops, so an outcome appended after the
        pops sees the flag clear, and one appended before is popped."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._take)
        except RuntimeError:
            # The loop closed under a call that outlived the stop's wait: its batch
            # was never acknowledged, so it is consumed again.
            log.debug("a listener outcome after the loop closed: left unacknowledged")

    def _take(self) -> None:
        self._wake_pending = False
        pop = self._done.popleft
        done = []
        while True:
            try:
                done.append(pop())
            except IndexError:
                break
        if not done:
            return
        invoker = self._invoker
        ready: list[tuple[Any, ListenerOutcome | None]] = []
        for token, queue, outcome in done:
            if outcome is not None:
                if outcome.exception is not None:
                    invoker.report_failure(outcome.exception, queue)
                elif isinstance(outcome.status, asyncio.Future):
                    # A deferred acknowledgement, answered as deliver answers one.
                    task = self._loop.create_task(self._answer(token, queue, outcome))
                    self._deferred.add(task)
                    task.add_done_callback(self._deferred.discard)
                    continue
            ready.append((token, outcome))
        self._out += len(ready)
        if ready:
            self._settle(ready)

    async def _answer(self, token: Any, queue: MessageQueue, outcome: ListenerOutcome) -> None:
        start = time.perf_counter() - outcome.duration_ms / 1000
        answered = await self._invoker._answer(outcome.status, start, queue)
        self._out += 1
        self._settle([(token, answered)])

    def _check(self) -> None:
        """Every patience while drain loops run: take what they handed back, and start
        more beside a call that has run longer than the patience."""
        self._watch = None
        self._take()
        now = time.perf_counter()
        if self._work and any(b and now - b > self._patience_s for b in list(self._began.values())):
            self.call_ms = max(self.call_ms, SLOW_CALL_MS)
            self._spawn()
        if self._watch is None and (self._drainers or self._done):
            self._watch = self._loop.call_later(self._patience_s, self._check)

    def close(self) -> None:
        if self._spawn_handle is not None:
            self._spawn_handle.cancel()
            self._spawn_handle = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for task in list(self._deferred):
            task.cancel()
