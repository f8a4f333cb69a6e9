"""The concurrent consume service's Backlog: FIFO, one wake-up at a time, none lost."""

from __future__ import annotations

import asyncio

import pytest

from rmqk.plugins.consume.backlog import Backlog


async def test_items_come_out_in_order() -> None:
    backlog: Backlog[int] = Backlog()
    assert backlog.empty() and backlog.take() is None
    with pytest.raises(asyncio.QueueEmpty):
        backlog.get_nowait()
    for i in range(4):
        backlog.put_nowait(i)
    assert backlog.qsize() == 4
    assert [backlog.take(), backlog.get_nowait(), await backlog.get(), backlog.take()] == [
        0,
        1,
        2,
        3,
    ]
    assert backlog.empty()


async def _idle_workers(
    backlog: Backlog[int], n: int, log: list[tuple[int, int]]
) -> list[asyncio.Task[None]]:
    async def worker(me: int) -> None:
        while True:
            item = await backlog.get()
            log.append((me, item))

    tasks = [asyncio.create_task(worker(i)) for i in range(n)]
    await asyncio.sleep(0)
    return tasks


async def test_a_burst_wakes_one_worker_who_takes_what_it_can() -> None:
    backlog: Backlog[int] = Backlog()
    log: list[tuple[int, int]] = []
    tasks = await _idle_workers(backlog, 5, log)
    for i in range(10):
        backlog.put_nowait(i)
    # asyncio.Queue would have woken all five; here one is on its way.
    assert len(backlog._idle) == 4
    await asyncio.sleep(0.01)
    # The first worker never suspends between items, so it took them all, in order.
    assert log == [(0, i) for i in range(10)]
    assert len(backlog._idle) == 5 and backlog._waking == 0
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_workers_join_in_while_the_ones_before_are_busy() -> None:
    backlog: Backlog[int] = Backlog()
    release = asyncio.Event()
    holding: list[int] = []

    async def worker() -> None:
        while True:
            holding.append(await backlog.get())
            await release.wait()  # a listener that suspends

    tasks = [asyncio.create_task(worker()) for _ in range(3)]
    await asyncio.sleep(0)
    for i in range(5):
        backlog.put_nowait(i)
    await asyncio.sleep(0.01)
    assert sorted(holding) == [0, 1, 2]  # every worker holds one: as many at once as before
    release.set()
    await asyncio.sleep(0.01)
    assert sorted(holding) == [0, 1, 2, 3, 4]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_woken_worker_cancelled_before_it_runs_passes_the_wake_up_on() -> None:
    backlog: Backlog[int] = Backlog()
    log: list[tuple[int, int]] = []
    tasks = await _idle_workers(backlog, 2, log)
    backlog.put_nowait(7)
    tasks[0].cancel()  # woken (its future is done) but not yet run
    await asyncio.sleep(0.01)
    assert log == [(1, 7)]
    assert backlog._waking == 0
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # A worker cancelled while idle leaves nothing behind.
    assert not backlog._idle
