"""Batches whose listener returned a future, consumed with hooks on, at shutdown.

A stub host over the kernel's own ListenerInvoker (whose deliver runs the hooks and
settles the deferred acknowledgement), no broker: the service's count of what is under way.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk.engine.listener import ListenerInvoker
from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.plugins.consume.backlog import Chunk
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.spi.contexts import ConsumeMessageContext

pytestmark = pytest.mark.timeout(30)
MQ = MessageQueue("T", "broker-a", 0)


class PQ:
    dropped = False

    def __init__(self) -> None:
        self.consume_started: dict[int, int] = {}

    def is_dropped(self) -> bool:
        return self.dropped


class Stats:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class AfterHook:
    """A consume hook registered on the client whose ``after`` is async (allowed)."""

    def __init__(self, after_delay: float) -> None:
        self.after_delay = after_delay
        self.afters: list[str | None] = []

    async def consume_message_after(self, hook_ctx: ConsumeMessageContext) -> None:
        await asyncio.sleep(self.after_delay)  # e.g. an async trace/metrics exporter
        self.afters.append(hook_ctx.return_type)


class Invoker(ListenerInvoker):
    """The kernel's invoker: hooks on; the async listener returns ``self.future``."""

    def __init__(self, after_delay: float) -> None:
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.hook = AfterHook(after_delay)

        async def listener(msgs: list[MessageExt]) -> asyncio.Future[Any]:
            return self.future

        super().__init__(listener, "g", 1, interceptors=[self.hook])

    @property
    def afters(self) -> list[str | None]:
        return self.hook.afters


def service_with(invoker: Invoker, acknowledged: list[MessageExt]) -> ConcurrentConsumeService:
    host = SimpleNamespace(
        options=ConsumerOptions(), retry_topic="%RETRY%g", group="g", stats=Stats(),
        listener=invoker, deliver=invoker.deliver,
        reset_retry_topic=lambda msgs: None,
        acknowledge=lambda mq, pq, msgs: acknowledged.extend(msgs) or 0,
    )
    return ConcurrentConsumeService(host, {})  # type: ignore[arg-type]


async def consume(service: ConcurrentConsumeService, chunk: Chunk) -> None:
    """One async worker of the service takes ``chunk`` and delivers it."""
    service.submit(chunk.msgs, chunk.pq, chunk.mq, True)
    service._workers.append(asyncio.get_running_loop().create_task(service._deliver_worker()))
    while not service._deferred:
        await asyncio.sleep(0.001)


async def test_a_flush_landing_during_shutdown_is_acknowledged_with_an_async_after_hook() -> None:
    acknowledged: list[MessageExt] = []
    inv = Invoker(after_delay=0.05)
    service = service_with(inv, acknowledged)
    msgs = [MessageExt(topic="T", body=b"x", queue_offset=7)]
    await consume(service, Chunk(msgs, PQ(), MQ))  # type: ignore[arg-type]
    assert service._deferred == 1
    # The flush lands within await_termination_millis_when_shutdown.
    asyncio.get_running_loop().call_later(0.02, inv.future.set_result, None)
    await service.shutdown(2_000)
    assert [m.queue_offset for m in acknowledged] == [7], (inv.afters, service._deferred)


async def test_deferred_count_after_shutdown_cancels_an_unstarted_task() -> None:
    acknowledged: list[MessageExt] = []
    inv = Invoker(after_delay=0)
    service = service_with(inv, acknowledged)
    await consume(service, Chunk([MessageExt(topic="T", body=b"x", queue_offset=1)], PQ(), MQ))  # type: ignore[arg-type]
    await service.shutdown(0)
    assert not acknowledged
    assert service._deferred == 0, service._deferred
