"""Small asyncio helpers shared by the kernel and plugins."""

from __future__ import annotations

import asyncio

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; True when it is set.

    Built on ``asyncio.timeout`` because Python 3.11's ``wait_for`` can swallow a
    cancellation that races with the awaited event being set, which leaves a
    task that was told to stop running forever.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
