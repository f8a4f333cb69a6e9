"""The lite pull consumer's rebalance (Java's RebalanceLitePullImpl)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rmqk.engine.process_queue import ProcessQueue
from rmqk.engine.rebalance import Rebalance
from rmqk.model import ConsumeType, MessageQueue

if TYPE_CHECKING:
    from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer

__all__ = ["LitePullRebalance"]


class LitePullRebalance(Rebalance):
    """No pull-expiry drop; queue changes go to the consumer's queue table."""

    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(self, consumer: AsyncLitePullConsumer) -> None:
        super().__init__(consumer)
        self.lite = consumer

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self.lite.release_queue(mq)
        store = self.lite.offset_store
        await store.persist(mq)
        store.remove_offset(mq)
        return True

    async def message_queue_changed(
        self, topic: str, mq_all: Iterable[MessageQueue], assigned: list[MessageQueue]
    ) -> None:
        all_queues = frozenset(mq_all)
        self.lite.keep_only(topic, set(assigned))
        await super().message_queue_changed(topic, all_queues, assigned)
