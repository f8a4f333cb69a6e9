"""The adaptive consume pool: consume_thread_min..consume_thread_max with the backlog.

Java adjusts every minute: while the broker-side backlog of the consumer's queues (the sum of
each process queue's msgAccCnt: max offset minus the newest pulled offset) is above
adjust_thread_pool_nums_threshold the core size grows by one, below 80 % of it it shrinks by one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from engine_support import FAST_RETRY_MARKS, create_topic, produce, push_consumer, wait_for

import rmqk.plugins.consume.concurrent as concurrent_service
from rmqk.engine.pool import ResizablePool
from rmqk.model.message import MessageExt

pytestmark = FAST_RETRY_MARKS

PREFIX = "ConsumeMessageThread"


def live_threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix + "_"))


def test_pool_grows_shrinks_never_below_one_and_runs_every_task() -> None:
    pool = ResizablePool(2, thread_name_prefix="UnitPool")
    try:
        release = threading.Event()
        running = Counter[int]()
        lock = threading.Lock()

        def task(i: int) -> int:
            with lock:
                running[i] += 1
            release.wait()
            return i

        futures = [pool.submit(task, i) for i in range(6)]
        wait_deadline = time.monotonic() + 10
        while live_threads("UnitPool") < 2 and time.monotonic() < wait_deadline:
            time.sleep(0.01)
        assert live_threads("UnitPool") == 2
        assert pool.resize(4) == 4
        # Growing starts threads for the work already waiting as more is submitted.
        futures += [pool.submit(task, i) for i in range(6, 8)]
        while live_threads("UnitPool") < 4 and time.monotonic() < wait_deadline:
            time.sleep(0.01)
        assert live_threads("UnitPool") == 4
        assert pool.resize(0) == 1  # never below one thread
        assert pool.size == 1
        release.set()
        assert sorted(f.result(timeout=10) for f in futures) == list(range(8))
        assert running == Counter(range(8))  # each task ran exactly once
        while live_threads("UnitPool") > 1 and time.monotonic() < wait_deadline + 10:
            time.sleep(0.01)
        assert live_threads("UnitPool") == 1
        assert pool.submit(lambda: 42).result(timeout=10) == 42
    finally:
        pool.shutdown(wait=True)
    assert live_threads("UnitPool") == 0


async def test_pool_grows_to_max_under_backlog_and_back_to_min(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(concurrent_service, "ADJUST_INTERVAL_S", 0.05)
    await create_topic(broker, "Adaptive", 4)
    total = 600
    await produce(broker.namesrv_addr, "Adaptive", (f"m-{i}".encode() for i in range(total)))
    seen: Counter[bytes] = Counter()
    peak = [0]
    lock = threading.Lock()

    def slow(msgs: list[MessageExt]) -> None:
        with lock:
            peak[0] = max(peak[0], live_threads(PREFIX))
        time.sleep(0.02)
        with lock:
            seen.update(m.body for m in msgs)

    c = push_consumer(
        broker,
        "g-adaptive",
        consume_thread_min=2,
        consume_thread_max=5,
        adjust_thread_pool_nums_threshold=50,
        consume_message_batch_max_size=1,
        # Few messages cached a queue: the backlog stays on the broker while the pool works
        # through it, as it does on a real backlog larger than the cache.
        pull_threshold_for_queue=8,
        pull_batch_size=4,
    )
    c.subscribe("Adaptive")
    c.register_listener(slow)

    def threads_at_least(n: int) -> bool:
        count = live_threads(PREFIX)
        with lock:
            peak[0] = max(peak[0], count)
        return count >= n

    def threads_back_to(n: int) -> bool:
        count = live_threads(PREFIX)
        with lock:
            peak[0] = max(peak[0], count)
        return count == n

    await c.start()
    try:
        await wait_for(lambda: threads_at_least(5), 60, "the pool to grow to 5 threads")
        await wait_for(lambda: sum(seen.values()) >= total, 120, "every message")
        await wait_for(lambda: threads_back_to(2), 60, "the pool to shrink back to 2")
    finally:
        await c.shutdown()
    assert peak[0] == 5  # reached, never above consume_thread_max
    assert seen == Counter(f"m-{i}".encode() for i in range(total))  # each exactly once
