"""``ConsumeHost.deliver``: every consume service gets the client's consume hooks the same
way, and a DeferredAck is acknowledged, failed or given up as docs/hooks.md says.

The end-to-end tests use the embedded broker over TCP; the contract tests of the deferred
acknowledgement drive the kernel's ListenerInvoker and the concurrent service over a stub
host (no network: what is asserted is the service's acknowledgement of the batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from test_faults_support import Tally, body_of, wait_until

import rmqk
from rmqk import hookimpl
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.listener import ListenerInvoker
from rmqk.engine.producer import AsyncProducer
from rmqk.model import MessageQueue
from rmqk.model.message import Message, MessageExt
from rmqk.options import ConsumerOptions
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.spi.consume import ConsumeHost, DeferredAck, QueueView
from rmqk.spi.factory import PluginFactory
from rmqk.spi.transport import ConsumeMessageDirectlyResult

pytestmark = pytest.mark.timeout(60)


class Recorder:
    """A consume hook registered on one consumer: batch sizes seen before, outcomes after."""

    def __init__(self) -> None:
        self.before: list[int] = []
        self.after: list[bool] = []

    def consume_message_before(self, context: Any) -> None:
        self.before.append(len(context.messages))

    def consume_message_after(self, context: Any) -> None:
        self.after.append(context.success)


class InOrderService:
    """A third-party consume service as docs/tutorial-consume-service.md writes one: it
    calls ``host.deliver`` and knows nothing of hooks."""

    orderly = False

    def __init__(self, host: ConsumeHost, options: Mapping[str, Any]) -> None:
        self.host = host
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        pass

    async def shutdown(self, await_termination_ms: int) -> None:
        for task in self._tasks:
            task.cancel()

    def submit(
        self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        if dispatch_to_consume:
            task = self.host.loop.create_task(self._drain(pq, mq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drain(self, pq: QueueView, mq: MessageQueue) -> None:
        while msgs := pq.take_messages(4):
            outcome = await self.host.deliver(mq, msgs, SimpleNamespace(queue=mq))
            assert outcome is not None and outcome.exception is None
            self.host.update_offset(mq, pq, pq.commit())

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        raise NotImplementedError


class ThirdParty:
    @hookimpl
    def rmqk_register_consume_services(self, register: Any) -> None:
        register(PluginFactory("in-order-test", InOrderService))


async def test_a_hook_counts_batches_the_same_on_every_consume_service(
    pm: Any, broker: EmbeddedBroker
) -> None:
    pm.register(ThirdParty(), name="third-party-consume-service")
    ns = broker.namesrv_addr

    def async_of(tally: Tally) -> Any:
        async def listener(msgs: list[MessageExt]) -> None:
            tally.record(msgs)

        return listener

    kinds = {
        "concurrent-sync": ("concurrent", False),
        "concurrent-async": ("concurrent", True),
        "orderly": ("orderly", False),
        "third-party": ("in-order-test", False),
    }
    async with AsyncProducer("p-deliver", namesrv_addr=ns) as producer:
        for kind in kinds:
            for i in range(12):
                await producer.send(Message(f"Deliver-{kind}", body_of(i)))
    recorders = {kind: Recorder() for kind in kinds}
    tallies = {kind: Tally() for kind in kinds}
    consumers = []
    for kind, (service, is_async) in kinds.items():
        consumer = AsyncPushConsumer(
            f"g-deliver-{kind}",
            namesrv_addr=ns,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_service=service,
        )
        consumer.subscribe(f"Deliver-{kind}")
        tally = tallies[kind]
        consumer.register_listener(async_of(tally) if is_async else tally.record)
        consumer.register_consume_message_hook(recorders[kind])
        consumers.append(consumer)
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        await wait_until(lambda: all(t.distinct >= 12 for t in tallies.values()), 30, "all")
        await wait_until(
            lambda: all(len(r.after) == len(r.before) for r in recorders.values()), 10, "afters"
        )
    finally:
        await asyncio.gather(*(c.shutdown() for c in consumers))
    for kind in kinds:
        seen, tally = recorders[kind], tallies[kind]
        # Every batch the listener got was seen by the hook, before and after, as a success.
        assert sum(seen.before) == tally.delivered == 12, kind
        assert len(seen.before) == len(tally.times), kind
        assert seen.after == [True] * len(seen.before), kind


# ----------------------------------------------------------------- the deferred contract

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


class Service:
    """The concurrent service over a stub host and the kernel's own ListenerInvoker."""

    def __init__(self, listener: Any, hooks: list[Any] | None = None) -> None:
        self.invoker = ListenerInvoker(listener, "g", 2, interceptors=hooks or [])
        self.acknowledged: list[int] = []
        self.sent_back: list[int] = []

        async def send_back(msg: MessageExt, delay: int, broker: str | None) -> None:
            self.sent_back.append(msg.queue_offset)

        host = SimpleNamespace(
            options=ConsumerOptions(), retry_topic="%RETRY%g", group="g", stats=Stats(),
            listener=self.invoker, deliver=self.invoker.deliver,
            reset_retry_topic=lambda msgs: None, message_model=rmqk.MessageModel.CLUSTERING,
            send_message_back=send_back,
            acknowledge=lambda mq, pq, msgs: self.acknowledged.extend(
                m.queue_offset for m in msgs
            ) or 0,
        )  # fmt: skip
        self.service = ConcurrentConsumeService(host, {})  # type: ignore[arg-type]
        self.service._workers.append(
            asyncio.get_running_loop().create_task(self.service._deliver_worker())
        )

    async def deliver(self, offset: int) -> None:
        msgs = [MessageExt(topic="T", body=b"x", queue_offset=offset)]
        self.service.submit(msgs, PQ(), MQ, True)  # type: ignore[arg-type]
        await wait_until(lambda: self.service._deferred or self.acknowledged, 5, "delivered")


def deferring(acks: list[DeferredAck]) -> Any:
    async def listener(msgs: list[MessageExt]) -> DeferredAck:
        acks.append(DeferredAck())
        return acks[-1]

    return listener


async def test_a_deferred_ack_acknowledges_the_batch_when_acked_not_before() -> None:
    acks: list[DeferredAck] = []
    hook = Recorder()
    s = Service(deferring(acks), [hook])
    await s.deliver(7)
    await asyncio.sleep(0.05)
    assert s.acknowledged == [] and s.service._deferred == 1
    assert hook.after == []  # the after hook waits for the answer
    acks[0].ack()
    await wait_until(lambda: s.acknowledged == [7], 5, "acknowledged")
    assert hook.after == [True] and s.service._deferred == 0
    await s.service.shutdown(0)


async def test_a_deferred_ack_that_fails_is_retried_as_a_raised_exception() -> None:
    acks: list[DeferredAck] = []
    s = Service(deferring(acks))
    await s.deliver(3)
    acks[0].fail(RuntimeError("the flush failed"))
    # Sent back to the broker for redelivery, then acknowledged locally: nothing lost.
    await wait_until(lambda: s.sent_back == [3] and s.acknowledged == [3], 5, "retried")
    await s.service.shutdown(0)


async def test_a_plain_future_returned_by_a_listener_still_works() -> None:
    futures: list[asyncio.Future[Any]] = []

    async def listener(msgs: list[MessageExt]) -> asyncio.Future[Any]:
        futures.append(asyncio.get_running_loop().create_future())
        return futures[-1]

    s = Service(listener)
    await s.deliver(5)
    assert s.acknowledged == []
    futures[0].set_result(rmqk.ConsumeStatus.CONSUME_SUCCESS)
    await wait_until(lambda: s.acknowledged == [5], 5, "acknowledged")
    await s.service.shutdown(0)


async def test_a_deferred_ack_never_answered_by_the_stop_is_left_for_redelivery() -> None:
    acks: list[DeferredAck] = []
    s = Service(deferring(acks))
    await s.deliver(9)
    await s.service.shutdown(50)
    # Cancelled at the deadline, neither acknowledged nor sent back: the committed offset
    # stays below it, so it is delivered again after the restart.
    assert acks[0].cancelled()
    assert s.acknowledged == [] and s.sent_back == []
    assert s.service._deferred == 0


def test_the_deferred_ack_is_public() -> None:
    assert rmqk.DeferredAck is DeferredAck
    assert "DeferredAck" in rmqk.__all__
