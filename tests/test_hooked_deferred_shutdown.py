"""Batches whose listener returned a future, consumed with hooks on, at shutdown.

A stub host, no broker: the service's own counting of what is under way.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.plugins.consume.backlog import Chunk
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.spi.consume import ListenerOutcome
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


class Invoker:
    """Hooks on; the listener returns ``self.future``; the after hook is async (allowed)."""

    is_async = True

    def __init__(self, after_delay: float) -> None:
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.after_delay = after_delay
        self.afters: list[str | None] = []

    def hooks_enabled(self) -> bool:
        return True

    def report_failure(self, exc: BaseException, queue: Any = None) -> None:
        pass

    async def invoke(
        self,
        queue: MessageQueue,
        msgs: list[MessageExt],
        context: Any,
        hooks: bool = True,
        detach: bool = False,
        report: bool = True,
    ) -> tuple[ListenerOutcome, ConsumeMessageContext]:
        assert detach  # the concurrent service never waits on the future itself
        assert not report  # it reports a failure itself, once, with its status
        hook_ctx = ConsumeMessageContext("g", queue, list(msgs))
        return ListenerOutcome(self.future, None, 1.0), hook_ctx

    async def after(self, hook_ctx: ConsumeMessageContext | None) -> None:
        await asyncio.sleep(self.after_delay)  # e.g. an async trace/metrics exporter
        self.afters.append(hook_ctx.return_type if hook_ctx else None)


def service_with(invoker: Invoker, acknowledged: list[MessageExt]) -> ConcurrentConsumeService:
    host = SimpleNamespace(
        options=ConsumerOptions(), retry_topic="%RETRY%g", group="g", stats=Stats(),
        listener=invoker,
        acknowledge=lambda mq, pq, msgs: acknowledged.extend(msgs) or 0,
    )
    return ConcurrentConsumeService(host, {})  # type: ignore[arg-type]


async def test_a_flush_landing_during_shutdown_is_acknowledged_with_an_async_after_hook() -> None:
    acknowledged: list[MessageExt] = []
    inv = Invoker(after_delay=0.05)
    service = service_with(inv, acknowledged)
    msgs = [MessageExt(topic="T", body=b"x", queue_offset=7)]
    await service._consume(Chunk(msgs, PQ(), MQ))  # type: ignore[arg-type]
    assert service._deferred == 1
    # The flush lands within await_termination_millis_when_shutdown.
    asyncio.get_running_loop().call_later(0.02, inv.future.set_result, None)
    await service.shutdown(2_000)
    assert [m.queue_offset for m in acknowledged] == [7], (inv.afters, service._deferred)


async def test_deferred_count_after_shutdown_cancels_an_unstarted_task() -> None:
    acknowledged: list[MessageExt] = []
    inv = Invoker(after_delay=0)
    service = service_with(inv, acknowledged)
    await service._consume(Chunk([MessageExt(topic="T", body=b"x", queue_offset=1)], PQ(), MQ))  # type: ignore[arg-type]
    await service.shutdown(0)
    assert not acknowledged
    assert service._deferred == 0, service._deferred
