"""The push consumer seen through the consume-service contract (rmqk.spi.consume).

:class:`PushConsumeHost` is what a consume service plugin gets instead of the
consumer itself, so a service depends on the written protocol and the consumer
may change behind it. :func:`create_consume_service` looks the service up,
checks its ``consume_service_options`` and calls its factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, cast

from rmqk.engine.process_queue import ProcessQueue
from rmqk.model import MessageModel, MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.pluginmanager import registries
from rmqk.spi.consume import (
    ConsumeHost,
    ConsumeListener,
    ConsumeService,
    ConsumeStats,
    ListenerOutcome,
    QueueView,
)

if TYPE_CHECKING:
    from rmqk.engine.consumer import AsyncPushConsumer

__all__ = ["PushConsumeHost", "create_consume_service"]


class PushConsumeHost:
    """A :class:`rmqk.spi.consume.ConsumeHost` over one push consumer.

    Reads the consumer's parts when called rather than copying them: the
    listener, offset store and client are set during the consumer's start.
    """

    __slots__ = ("_consumer", "_loop")

    def __init__(self, consumer: AsyncPushConsumer, loop: asyncio.AbstractEventLoop) -> None:
        self._consumer = consumer
        self._loop = loop

    @property
    def group(self) -> str:
        return self._consumer.group

    @property
    def message_model(self) -> MessageModel:
        return self._consumer.message_model

    @property
    def options(self) -> ConsumerOptions:
        return self._consumer.options

    @property
    def retry_topic(self) -> str:
        return self._consumer.retry_topic

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def listener(self) -> ConsumeListener:
        return self._consumer.invoker

    @property
    def deliver(self) -> Callable[..., Awaitable[ListenerOutcome | None]]:
        # The invoker's own method: no extra call layer per batch.
        return self._consumer.invoker.deliver

    @property
    def stats(self) -> ConsumeStats:
        return self._consumer.stats

    def process_queues(self) -> list[tuple[MessageQueue, QueueView]]:
        return list(self._consumer.rebalance.process_queue_table.items())

    def acknowledge(self, mq: MessageQueue, pq: QueueView, msgs: Sequence[MessageExt]) -> int:
        # Every QueueView a service holds came from this consumer's rebalance.
        offset = cast(ProcessQueue, pq).remove_messages(msgs)
        if offset >= 0 and not pq.dropped:
            self._consumer.offset_store.update_offset(mq, offset, True)
        return offset

    def update_offset(self, mq: MessageQueue, pq: QueueView, offset: int) -> None:
        if offset >= 0 and not pq.dropped:
            self._consumer.offset_store.update_offset(mq, offset, False)

    async def send_message_back(
        self, msg: MessageExt, delay_level: int, broker_name: str | None
    ) -> None:
        await self._consumer.send_message_back(msg, delay_level, broker_name)

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        self._consumer.reset_retry_topic(msgs)

    def max_reconsume_times(self) -> int:
        return self._consumer.max_reconsume_times()

    async def lock(self, mq: MessageQueue) -> bool:
        return await self._consumer.rebalance.lock(mq)

    async def lock_all(self) -> None:
        await self._consumer.rebalance.lock_all()

    async def unlock_all(self, oneway: bool) -> None:
        await self._consumer.rebalance.unlock_all(oneway)


def create_consume_service(consumer: AsyncPushConsumer, name: str) -> ConsumeService:
    """``factory(host, options)`` for the service registered as ``name``.

    Raises :class:`rmqk.model.errors.ConfigError` for ``consume_service_options`` the
    service does not take, before anything is built.
    """
    registry = registries().consume_services
    raw = consumer.options.consume_service_options
    # Checked before the host is made: a refused table builds nothing.
    problems = registry.option_problems(name, raw)
    if problems:
        raise ConfigError(problems)
    host: ConsumeHost = PushConsumeHost(consumer, asyncio.get_running_loop())
    service: ConsumeService = registry.create(name, host, raw)
    return service
