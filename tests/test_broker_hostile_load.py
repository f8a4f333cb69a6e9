"""Issue 19 #6 and #9: one request's cost is bounded and held pulls do not slow sends.

Fault scenarios over real TCP: a 190 KB heartbeat naming 1,000 new groups while
another client sends; thousands of held tag-filtered pulls while messages of other
tags arrive.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from test_broker_hostile_support import heartbeat_body
from test_broker_support import RawClient

from rmqk.model.message import format_properties
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)


async def test_a_heartbeat_of_1000_new_groups_is_cheap_and_blocks_nobody(
    broker: EmbeddedBroker,
) -> None:
    await broker.create_topic("Orders")
    groups = [f"hostile-group-{i:04d}-{'x' * 120}" for i in range(1000)]
    body = heartbeat_body(groups, ["Orders"])
    assert len(body) > 150_000
    persisted: list[float] = []
    topics = broker.store.topics
    real_persist = topics.persist

    def counting_persist() -> None:
        persisted.append(time.monotonic())
        real_persist()

    topics.persist = counting_persist  # type: ignore[method-assign]
    hostile = await RawClient.connect(broker.broker_addr)
    victim = await RawClient.connect(broker.broker_addr)
    try:
        await victim.send_message("Orders", b"warm-up")
        started = time.monotonic()
        heartbeat = asyncio.ensure_future(hostile.call(RequestCode.HEART_BEAT, {}, body))
        await asyncio.sleep(0)  # the heartbeat's frame is written first
        send_started = time.monotonic()
        sent = await asyncio.wait_for(victim.send_message("Orders", b"meanwhile"), 5.0)
        send_took = time.monotonic() - send_started
        answer = await asyncio.wait_for(heartbeat, 20.0)
        took = time.monotonic() - started
    finally:
        await hostile.close()
        await victim.close()
    assert answer.code == ResponseCode.SUCCESS
    assert sent.code == ResponseCode.SUCCESS
    assert took < 10.0, took
    assert send_took < 2.0, send_took
    # One topic-file write for the whole heartbeat, not one per group.
    assert len(persisted) == 1
    on_disk = json.loads((broker.data_dir / "config" / "topics.json").read_text())
    assert all(f"%RETRY%{g}" in on_disk["topicConfigTable"] for g in groups)
    assert all(broker.namesrv.routes.route(f"%RETRY%{g}") for g in groups[::97])


async def test_held_tag_filtered_pulls_cost_a_send_nothing_per_pull(
    broker_factory: Any,
) -> None:
    # A long check interval: only arrivals may answer the held pulls here.
    broker: EmbeddedBroker = await broker_factory(hold_check_interval=60.0)
    await broker.create_topic("Tagged", queues=1)
    held = 2000
    puller = await RawClient.connect(broker.broker_addr)
    sender = await RawClient.connect(broker.broker_addr)
    store = broker.store
    scans: list[int] = []
    real_get = store.get_messages

    def counting_get(*args: Any, **kwargs: Any) -> Any:
        scans.append(1)
        return real_get(*args, **kwargs)

    try:
        await sender.send_message("Tagged", b"first", tags="other")
        pending = [
            asyncio.ensure_future(
                puller.pull(
                    "Tagged",
                    0,
                    1,
                    group=f"g{i}",
                    subscription="wanted",
                    suspend_ms=30_000,
                    timeout=60.0,
                )
            )
            for i in range(held)
        ]
        for _ in range(400):
            if broker.processors.holds.held_count == held:
                break
            await asyncio.sleep(0.025)
        assert broker.processors.holds.held_count == held
        store.get_messages = counting_get  # type: ignore[method-assign]
        took = []
        for n in range(20):
            started = time.monotonic()
            answer = await sender.send_message("Tagged", f"other-{n}".encode(), tags="other")
            took.append(time.monotonic() - started)
            assert answer.code == ResponseCode.SUCCESS
        await asyncio.sleep(0.2)
        # Non-matching arrivals neither answer the pulls nor re-scan the queue per pull.
        assert broker.processors.holds.held_count == held
        assert len(scans) <= 20, len(scans)
        assert sorted(took)[10] < 0.05, took
        await sender.send_message("Tagged", b"wanted", tags="wanted")
        answers = await asyncio.wait_for(asyncio.gather(*pending), 30.0)
    finally:
        store.get_messages = real_get  # type: ignore[method-assign]
        await puller.close()
        await sender.close()
    assert {a.code for a in answers} == {ResponseCode.SUCCESS}
    assert broker.processors.holds.held_count == 0


async def test_held_pull_sees_a_matching_message_among_a_batch(broker: EmbeddedBroker) -> None:
    await broker.create_topic("Batch", queues=1)
    puller = await RawClient.connect(broker.broker_addr)
    sender = await RawClient.connect(broker.broker_addr)
    try:
        waiting = asyncio.ensure_future(
            puller.pull("Batch", 0, 0, subscription="b", suspend_ms=20_000, timeout=30.0)
        )
        for _ in range(200):
            if broker.processors.holds.held_count:
                break
            await asyncio.sleep(0.01)
        # Two messages arrive before the hold service looks: the second matches.
        store = broker.store
        for body, tag in ((b"1", "a"), (b"2", "b")):
            store.put_message(
                topic="Batch", queue_id=0, body=body, flag=0,
                properties_raw=format_properties({"TAGS": tag}), sys_flag=0,
                born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:1",
            )  # fmt: skip
        answer = await asyncio.wait_for(waiting, 3.0)
        assert answer.code == ResponseCode.SUCCESS
    finally:
        await puller.close()
        await sender.close()
