"""The bare consume rate ``rmqk demo`` sets its end-to-end rate against."""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["bare_consume_rate"]


async def bare_consume_rate(
    namesrv_addr: str,
    topic: str,
    count: int,
    timeout: float,
    expression: str = "*",
    expression_type: str = "TAG",
    group: str = "rmqk-demo-bare-consume",
) -> float:
    """msg/s of a no-op consumer (batch 32) taking the same backlog with a group of its own.

    What the sink's end-to-end rate is measured against: the same broker, the
    same messages, the same subscription (a tag list costs the client and the
    broker a check per message, which ``"*"`` does not), the same machine,
    minutes apart at most. ``group`` must be new to the broker to take the
    backlog from its first offset (``bench.demo_phase`` runs it once a round).
    """
    from rmqk import AsyncPushConsumer

    done = asyncio.Event()
    got = [0]
    last = [0.0]

    async def listener(msgs: list[Any], context: Any) -> None:
        got[0] += len(msgs)
        if got[0] >= count:
            last[0] = time.monotonic()
            done.set()

    consumer = AsyncPushConsumer(
        group,
        namesrv_addr=namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_message_batch_max_size=32,
    )
    consumer.subscribe(topic, expression, expression_type)
    consumer.register_listener(listener)
    started = time.monotonic()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await consumer.shutdown()
    return count / max(last[0] - started, 1e-9)
