"""The ``offset-batches`` consume service: each queue in offset order, fixed-size batches.

One drain task per queue takes ``batch_size`` messages from the head of the
queue, calls the listener and commits them; a failed batch is put back at the
head and tried again after ``retry_delay_ms``, so no message overtakes an
earlier one of its queue. Everything comes from the ConsumeHost it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping
from typing import Any

from rmqk import hookimpl
from rmqk.model import ConsumeStatus, MessageQueue
from rmqk.model.message import MessageExt
from rmqk.spi.consume import ConsumeHost, QueueView
from rmqk.spi.factory import PluginFactory
from rmqk.spi.options import OptionSpec, OptionType
from rmqk.spi.transport import ConsumeMessageDirectlyResult

_SUCCESS = (None, True, ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.CONSUME_SUCCESS.value)


class BatchContext:
    """What a listener taking ``(messages, context)`` is given: the batch's queue.

    ``rmqk run``'s sink listener reads ``context.queue``. Nothing else: a listener
    that sets ``ack_index`` on it fails loudly rather than being ignored.
    """

    __slots__ = ("queue",)

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue


# The consume_service_options it takes: rmqk checks a consumer's table against them.
OPTIONS = (
    OptionSpec(
        name="batch_size",
        value_type=OptionType.INT,
        doc="Messages per listener call.",
        default=8,
        minimum=1,
        maximum=1024,
    ),
    OptionSpec(
        name="retry_delay_ms",
        value_type=OptionType.INT,
        doc="Pause before a failed batch is tried again.",
        default=1000,
        minimum=0,
        maximum=60_000,
    ),
)


class OffsetBatchesService:
    orderly = False  # no broker locks: one member per queue is the rebalance's business

    def __init__(self, host: ConsumeHost, options: Mapping[str, Any]) -> None:
        self.host = host
        self.batch_size: int = options["batch_size"]
        self.retry_delay_ms: int = options["retry_delay_ms"]
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False

    async def start(self) -> None:
        pass

    async def shutdown(self, await_termination_ms: int) -> None:
        self._stopped = True
        if self._tasks and await_termination_ms > 0:
            await asyncio.wait(set(self._tasks), timeout=await_termination_ms / 1000)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def submit(
        self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        # The messages are already held in pq; a drain runs until take_messages
        # finds nothing, and the next batch pulled after that starts a new one.
        if dispatch_to_consume and not self._stopped:
            self._spawn(self._drain(pq, mq))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self.host.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self, pq: QueueView, mq: MessageQueue) -> None:
        host = self.host
        while not self._stopped and not pq.is_dropped():
            msgs = pq.take_messages(self.batch_size)
            if not msgs:
                return
            host.reset_retry_topic(msgs)
            # The consume hooks run around the listener; its exception is in the outcome,
            # and logged by deliver.
            outcome = await host.deliver(mq, msgs, BatchContext(mq))
            ok = outcome.exception is None and outcome.status in _SUCCESS
            host.stats.consume_rt(mq.topic, outcome.duration_ms)
            if ok:
                host.stats.consume_ok(mq.topic, len(msgs))
                host.update_offset(mq, pq, pq.commit())
                continue
            host.stats.consume_failed(mq.topic, len(msgs))
            pq.make_messages_to_consume_again(msgs)
            await asyncio.sleep(self.retry_delay_ms / 1000)

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        mq = MessageQueue(msg.topic, broker_name or msg.broker_name, msg.queue_id)
        self.host.reset_retry_topic([msg])
        outcome, _ = await self.host.listener.invoke(mq, [msg], BatchContext(mq), hooks=False)
        if outcome.exception is not None:
            result = "CR_THROW_EXCEPTION"
        elif outcome.status in _SUCCESS:
            result = "CR_SUCCESS"
        else:
            result = "CR_LATER"
        return ConsumeMessageDirectlyResult(
            order=True,
            auto_commit=True,
            consume_result=result,
            remark=None if outcome.exception is None else repr(outcome.exception),
            spent_time_mills=int(outcome.duration_ms),
        )


@hookimpl
def rmqk_register_consume_services(register: Any) -> None:
    # The class is the factory: OffsetBatchesService(host, options).
    register(PluginFactory("offset-batches", OffsetBatchesService, options=OPTIONS))
