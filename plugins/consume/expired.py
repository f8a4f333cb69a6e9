"""cleanExpiredMsg: messages whose consume began too long ago go back to the broker."""

from __future__ import annotations

import asyncio
import logging
import time

from rmqk.spi.consume import ConsumeHost

__all__ = ["EXPIRED_SCAN_LIMIT", "clean_expired_loop", "clean_expired_messages"]

# The concurrent service's logger: these lines are its own.
log = logging.getLogger("rmqk.plugins.consume.concurrent")

# cleanExpiredMsg looks at no more than this many messages at a queue's head.
EXPIRED_SCAN_LIMIT = 16


async def clean_expired_loop(host: ConsumeHost) -> None:
    """Every ``consume_timeout`` minutes, :func:`clean_expired_messages`, until cancelled."""
    period = host.options.consume_timeout * 60
    while True:
        await asyncio.sleep(period)
        try:
            await clean_expired_messages(host)
        except Exception:
            log.exception("cleanExpiredMsg failed")


async def clean_expired_messages(host: ConsumeHost) -> None:
    """Send back (delay level 3) messages whose consume began over consume_timeout ago."""
    limit_ms = host.options.consume_timeout * 60_000
    now = int(time.time() * 1000)
    for mq, pq in host.process_queues():
        for msg in pq.head_messages(EXPIRED_SCAN_LIMIT):
            started = pq.consume_started.get(msg.queue_offset)
            if started is None or now - started <= limit_ms:
                break
            try:
                await host.send_message_back(msg, 3, mq.broker_name)
            except Exception:
                log.exception("send expire msg back failed: %s", msg)
                break
            log.info("send expire msg back. topic=%s, offset=%d", msg.topic, msg.queue_offset)
            if pq.first_offset() == msg.queue_offset:
                host.acknowledge(mq, pq, [msg])
