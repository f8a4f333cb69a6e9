"""Listener exceptions, returned failures and consume timeouts: exact retry and DLQ counts."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic
from test_faults_support import id_of, listener_failure_scenario, produce_ids, wait_until

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lane import QUICK_CALL_MS
from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)


async def test_failures_retry_and_dead_letter_exactly(tmp_path: Path) -> None:
    result = await listener_failure_scenario(tmp_path, total=300, max_reconsume_times=2)
    print(result.summary())
    assert result.deliveries_by_kind == result.expected_deliveries_by_kind
    assert result.retry_topic_messages == result.expected_retry_topic_messages == 186
    assert result.dlq_messages == result.expected_dlq_messages == 60
    assert result.reconsume_times_ok


@pytest.mark.parametrize(("kind", "hang_at"), [("async", 10), ("sync", 10), ("sync", 150)], ids=str)
async def test_hung_listener_call_stalls_only_its_batch(
    tmp_path: Path, kind: str, hang_at: int
) -> None:
    """A listener call that hangs holds up its own batch only, as in Java's thread pool.

    A plain listener's calls are taken to be quick until seen otherwise, so one pool
    thread drains them (rmqk.engine.lane): the hung call must make the lane start
    more beside it, at the start (10) as after many quick calls (150).
    """
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as broker:
        await create_topic(broker, "Hang", 1)
        await produce_ids(broker.namesrv_addr, "Hang", range(200))
        seen: Counter[int] = Counter()
        lock = threading.Lock()
        release = asyncio.Event()
        release_thread = threading.Event()
        c = AsyncPushConsumer(
            "g-hang",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        c.subscribe("Hang")

        def note(msgs: list[MessageExt]) -> bool:
            ids = [id_of(m.body) for m in msgs]
            with lock:
                seen.update(ids)
            return hang_at in ids

        async def handle_async(msgs: list[MessageExt]) -> None:
            if note(msgs):
                await release.wait()

        quick_at_hang: list[bool] = []

        def handle_sync(msgs: list[MessageExt]) -> None:
            if note(msgs):
                service: Any = c.consume_service
                quick_at_hang.append(service._lane.call_ms < QUICK_CALL_MS)
                release_thread.wait(30)

        c.register_listener(handle_async if kind == "async" else handle_sync)
        await c.start()
        try:
            await wait_until(lambda: len(seen) == 200, 10, f"the rest while {hang_at} hangs")
            if kind == "sync":
                assert quick_at_hang == [True]  # the case this run is about
        finally:
            release.set()
            release_thread.set()
            await c.shutdown()
