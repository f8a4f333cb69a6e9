"""The lane a plain listener's calls take to its pool (rmqk.engine.lane, issue 29)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from rmqk.engine.lane import QUICK_CALL_MS
from rmqk.engine.listener import ListenerInvoker
from rmqk.model import MessageQueue
from rmqk.model.errors import ClientError
from rmqk.spi.consume import ListenerOutcome

pytestmark = pytest.mark.timeout(60)

MQ = MessageQueue("T", "b", 0)


class Settled:
    """What the lane handed back, in the order the loop got it."""

    def __init__(self) -> None:
        self.outcomes: dict[Any, ListenerOutcome | None] = {}
        self.handed: list[int] = []  # the size of each hand-back

    def __call__(self, done: list[tuple[Any, ListenerOutcome | None]]) -> None:
        assert threading.current_thread() is threading.main_thread()  # on the loop
        self.handed.append(len(done))
        for token, outcome in done:
            assert token not in self.outcomes, f"{token} settled twice"
            self.outcomes[token] = outcome


async def until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_quick_calls_run_on_one_thread_and_come_back_in_bulk() -> None:
    threads: set[int] = set()
    calls: list[int] = []

    def listener(msgs: list[Any]) -> None:
        threads.add(threading.get_ident())
        calls.append(msgs[0])

    invoker = ListenerInvoker(listener, "g", 8)
    settled = Settled()
    lane = invoker.lane(settled)
    try:
        for start in range(0, 2048, 32):  # as pulls of 32 at batch size 1 arrive
            assert lane.put([(i, MQ, [i], None) for i in range(start, start + 32)])
            await asyncio.sleep(0)
        await until(lambda: len(settled.outcomes) == 2048, 10, "every outcome")
    finally:
        invoker.shutdown(wait=True)
    assert sorted(calls) == list(range(2048))  # each call exactly once
    assert calls == sorted(calls)  # one drain loop: in the order put
    assert len(threads) == 1
    assert all(o is not None and o.status is None and o.exception is None
               for o in settled.outcomes.values())  # fmt: skip
    # Handed back in groups, not a loop wake-up per call.
    assert len(settled.handed) < 2048 / 4, settled.handed
    assert lane.running() == 0
    assert lane.call_ms < QUICK_CALL_MS


async def test_a_hung_call_holds_up_only_its_own_batch() -> None:
    release = threading.Event()
    started_hang = threading.Event()

    def listener(msgs: list[Any]) -> None:
        if msgs[0] == 50:
            started_hang.set()
            release.wait(20)

    invoker = ListenerInvoker(listener, "g", 4)
    settled = Settled()
    lane = invoker.lane(settled)
    try:
        lane.put([(i, MQ, [i], None) for i in range(50)])
        await until(lambda: len(settled.outcomes) == 50, 10, "the calls before the hang")
        lane.put([(i, MQ, [i], None) for i in range(50, 200)])
        await until(started_hang.is_set, 10, "the hung call")
        # The others run beside it on more threads, and come back while it hangs.
        await until(lambda: len(settled.outcomes) == 199, 10, "every call but the hung one")
        assert 50 not in settled.outcomes
        assert lane.running() == 1
        assert lane.call_ms >= QUICK_CALL_MS  # calls are no longer taken to be quick
    finally:
        release.set()
    await until(lambda: len(settled.outcomes) == 200, 10, "the hung call's outcome")
    invoker.shutdown(wait=True)
    assert lane.running() == 0


async def test_the_outcomes_before_a_hang_in_the_same_thread_are_not_held_up() -> None:
    release = threading.Event()

    def listener(msgs: list[Any]) -> None:
        if msgs[0] == 10:
            release.wait(20)

    invoker = ListenerInvoker(listener, "g", 2)
    settled = Settled()
    lane = invoker.lane(settled)
    try:
        # One put: calls 0..9 run quickly on the one drain loop, then 10 hangs there.
        lane.put([(i, MQ, [i], None) for i in range(11)])
        await until(lambda: len(settled.outcomes) == 10, 2, "the ten calls before the hang")
    finally:
        release.set()
    await until(lambda: len(settled.outcomes) == 11, 10, "the hung call's outcome")
    invoker.shutdown(wait=True)


async def test_a_failure_is_an_outcome_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def listener(msgs: list[Any]) -> str | None:
        if msgs[0] % 2:
            raise ValueError(f"odd {msgs[0]}")
        return "RECONSUME_LATER" if msgs[0] == 4 else None

    invoker = ListenerInvoker(listener, "g", 2, name="mod:listener")
    settled = Settled()
    lane = invoker.lane(settled)
    with caplog.at_level(logging.WARNING, logger="rmqk.engine.listener"):
        lane.put([(i, MQ, [i], None) for i in range(6)])
        await until(lambda: len(settled.outcomes) == 6, 10, "every outcome")
    invoker.shutdown(wait=True)
    failed = {t: o for t, o in settled.outcomes.items() if o is not None and o.exception}
    assert sorted(failed) == [1, 3, 5]
    assert all(isinstance(o.exception, ValueError) for o in failed.values())
    assert settled.outcomes[4] is not None and settled.outcomes[4].status == "RECONSUME_LATER"
    # Logged once with its traceback, on the loop, naming the listener and the queue.
    logged = [r for r in caplog.records if "raised ValueError on" in r.getMessage()]
    assert len(logged) == 1 and "mod:listener" in logged[0].getMessage()
    assert str(MQ) in logged[0].getMessage()


async def test_calls_not_begun_are_taken_back_at_stop() -> None:
    gate = threading.Event()

    def listener(msgs: list[Any]) -> None:
        gate.wait(20)

    invoker = ListenerInvoker(listener, "g", 1)
    settled = Settled()
    lane = invoker.lane(settled)
    lane.put([(i, MQ, [i], None) for i in range(100)])
    await until(lambda: lane.running() == 1, 10, "the first call to begin")
    taken = lane.take_back()
    assert taken == list(range(1, 100))  # not begun: the caller leaves them unacknowledged
    gate.set()
    await until(lambda: lane.running() == 0, 10, "the call under way")
    assert list(settled.outcomes) == [0]
    invoker.shutdown(wait=True)


async def test_a_slow_call_begins_with_on_start_which_may_skip_it() -> None:
    seen: list[int] = []

    def listener(msgs: list[Any]) -> None:
        seen.append(msgs[0])
        time.sleep(0.002)  # slow: more than QUICK_CALL_MS

    def on_start(token: int) -> bool:
        return token % 3 != 0

    invoker = ListenerInvoker(listener, "g", 2)
    settled = Settled()
    lane = invoker.lane(settled, on_start)
    lane.put([(0, MQ, [0], None)])  # the first call, taken to be quick, shows it is not
    await until(lambda: len(settled.outcomes) == 1, 10, "the first call")
    lane.put([(i, MQ, [i], None) for i in range(1, 30)])
    await until(lambda: len(settled.outcomes) == 30, 10, "every outcome")
    invoker.shutdown(wait=True)
    skipped = sorted(t for t, o in settled.outcomes.items() if o is None)
    assert skipped == [i for i in range(3, 30, 3)]
    assert sorted(seen) == [0] + [i for i in range(1, 30) if i % 3]


async def test_with_consume_hooks_on_a_lane_takes_nothing() -> None:
    class Hook:
        def consume_message_before(self, ctx: Any) -> None:
            pass

    invoker = ListenerInvoker(lambda msgs: None, "g", 1, interceptors=[Hook()])
    lane = invoker.lane(Settled())
    assert lane.put([(0, MQ, [0], None)]) is False  # each call must go through deliver
    assert lane.running() == 0
    invoker.shutdown(wait=True)


async def test_an_async_listener_has_no_lane() -> None:
    async def listener(msgs: list[Any]) -> None:
        pass

    invoker = ListenerInvoker(listener, "g", 1)
    with pytest.raises(ClientError, match="is async: it has no pool"):
        invoker.lane(Settled())


async def test_slow_calls_put_at_once_spread_over_the_pool() -> None:
    """Taken to be quick at first, the calls show they are not: the drain loop running
    them starts the rest of the pool at once, with no further put to do it."""
    lock = threading.Lock()
    running = peak = 0

    def listener(msgs: list[Any]) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1

    invoker = ListenerInvoker(listener, "g", 4)
    settled = Settled()
    lane = invoker.lane(settled)
    lane.put([(i, MQ, [i], None) for i in range(60)])
    await until(lambda: len(settled.outcomes) == 60, 10, "every outcome")
    invoker.shutdown(wait=True)
    assert peak == 4  # the pool's size, never more


async def test_deliver_group_still_works_with_a_deprecation_warning() -> None:
    """Removed from the consume-service contract in issue 29; a third-party service that
    called it still gets every batch delivered, and is told what to use instead."""
    got: list[int] = []
    invoker = ListenerInvoker(lambda msgs: got.append(msgs[0]), "g", 2)
    with pytest.warns(DeprecationWarning, match=r"host.listener.lane\(settle\)"):
        outcomes = await invoker.deliver_group([(MQ, [i], None) for i in range(5)])
    invoker.shutdown(wait=True)
    assert got == [0, 1, 2, 3, 4]
    assert [o.exception for o in outcomes] == [None] * 5
