"""The contract a consume service plugin fulfils for the push consumer.

A consume service drains process queues into the listener. ``concurrent`` and
``orderly`` are plugins registered through ``rmqk_register_consume_services``;
their factory is called as ``factory(consumer)`` with the
:class:`rmqk.engine.consumer.AsyncPushConsumer`.
"""

from __future__ import annotations

from typing import Protocol

from rmqk.engine.process_queue import ProcessQueue
from rmqk.message import MessageExt
from rmqk.model import MessageQueue
from rmqk.transport import ConsumeMessageDirectlyResult

__all__ = ["ConsumeService"]


class ConsumeService(Protocol):
    #: True when queues must be locked on the broker and drained one batch at a time.
    orderly: bool

    async def start(self) -> None: ...

    async def shutdown(self, await_termination_ms: int) -> None: ...

    def submit(
        self,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
        dispatch_to_consume: bool,
    ) -> None:
        """Hand a freshly pulled batch over; must not block the event loop."""

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult: ...
