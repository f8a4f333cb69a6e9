"""Embedded broker: long polling (held pulls), over real TCP."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from test_broker_support import RawClient, messages_of

from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def _clients(broker):
    """A consumer and a producer connection to ``broker``, both closed on the way out."""
    consumer = await RawClient.connect(broker.broker_addr)
    producer = await RawClient.connect(broker.broker_addr)
    try:
        yield consumer, producer
    finally:
        await consumer.close()
        await producer.close()


async def test_held_pull_wakes_on_arrival(broker_factory):
    # A long re-check period: only the arrival can answer the pull in time.
    broker = await broker_factory(hold_check_interval=60)
    async with _clients(broker) as (consumer, producer):
        await producer.send_message("Held", b"first")
        pull = asyncio.ensure_future(consumer.pull("Held", offset=1, suspend_ms=20_000, timeout=30))
        await asyncio.sleep(0.3)
        assert not pull.done()
        assert broker.processors.holds.held_count == 1
        sent_at = time.monotonic()
        await producer.send_message("Held", b"second")
        response = await asyncio.wait_for(pull, 10)
        latency = time.monotonic() - sent_at
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in messages_of(response)] == [b"second"]
        assert response.ext_fields["nextBeginOffset"] == "2"
        assert latency < 2.0, f"held pull answered {latency:.3f} s after the send"
        assert broker.processors.holds.held_count == 0


async def test_unmatched_arrival_keeps_the_pull_held(broker_factory):
    broker = await broker_factory(hold_check_interval=60)
    async with _clients(broker) as (consumer, producer):
        await producer.send_message("Filtered", b"seed", tags="A")
        pull = asyncio.ensure_future(
            consumer.pull("Filtered", offset=1, subscription="A", suspend_ms=20_000, timeout=30)
        )
        await asyncio.sleep(0.2)
        await producer.send_message("Filtered", b"other", tags="B")
        await asyncio.sleep(0.5)
        assert not pull.done(), "a message the filter rejects must not answer the pull"
        await producer.send_message("Filtered", b"wanted", tags="A")
        response = await asyncio.wait_for(pull, 10)
        assert [m.body for m in messages_of(response)] == [b"wanted"]
        assert response.ext_fields["nextBeginOffset"] == "3"


async def test_suspend_timeout_answered_by_the_periodic_check(broker_factory):
    broker = await broker_factory(hold_check_interval=0.1)
    async with _clients(broker) as (consumer, producer):
        await producer.send_message("Quiet", b"x")
        started = time.monotonic()
        response = await consumer.pull("Quiet", offset=1, suspend_ms=400, timeout=30)
        elapsed = time.monotonic() - started
        assert (response.code, response.remark) == (
            ResponseCode.PULL_NOT_FOUND,
            "OFFSET_OVERFLOW_ONE",
        )
        assert response.ext_fields["nextBeginOffset"] == "1"
        assert 0.35 <= elapsed < 10


async def test_pull_without_suspend_flag_answers_at_once(broker):
    consumer = await RawClient.connect(broker.broker_addr)
    try:
        await consumer.send_message("NoSuspend", b"x")
        response = await consumer.pull(
            "NoSuspend", offset=1, sys_flag=0x4, suspend_ms=20_000, timeout=5
        )
        assert response.code == ResponseCode.PULL_NOT_FOUND
    finally:
        await consumer.close()


async def test_held_pull_commits_its_offset_and_is_dropped_on_close(broker_factory):
    broker = await broker_factory(hold_check_interval=60)
    async with _clients(broker) as (consumer, producer):
        await producer.send_message("Commit", b"x")
        pull = asyncio.ensure_future(
            consumer.pull(
                "Commit", offset=1, group="cg", sys_flag=0x7, suspend_ms=20_000, commit_offset=1
            )
        )
        await asyncio.sleep(0.3)
        query = await producer.call(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "cg", "topic": "Commit", "queueId": 0},
        )
        assert query.ext_fields == {"offset": "1"}
        await consumer.close()
        with pytest.raises((ConnectionError, asyncio.CancelledError)):
            await pull
        for _ in range(100):
            if broker.processors.holds.held_count == 0:
                break
            await asyncio.sleep(0.02)
        # The next arrival finds no live pull to answer and nothing breaks.
        assert (await producer.send_message("Commit", b"y")).code == ResponseCode.SUCCESS
        assert broker.processors.holds.held_count == 0
