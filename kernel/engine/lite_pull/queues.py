"""What a lite pull consumer holds: how it chose its queues, and each queue's position."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable, Mapping

from rmqk.engine.process_queue import ProcessQueue
from rmqk.model import MessageQueue, SubscriptionData, build_subscription
from rmqk.model.errors import ClientError

__all__ = ["SUBSCRIPTION_CONFLICT_MESSAGE", "QueueState", "QueueTable", "SubscriptionType"]

SUBSCRIPTION_CONFLICT_MESSAGE = "Subscribe and assign are mutually exclusive."


class SubscriptionType(enum.Enum):
    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


class QueueState:
    """One held queue (Java's AssignedMessageQueue.MessageQueueState).

    ``generation`` changes whenever the queue is repositioned (seek, broker
    reset): a fetcher or a buffered batch of an older generation is stale.
    """

    __slots__ = (
        "consume_offset",
        "generation",
        "mq",
        "paused",
        "pq",
        "processed",
        "pull_offset",
        "task",
        "unpaused",
    )

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, pull_offset: int = -1) -> None:
        self.mq = mq
        self.pq = pq
        self.paused = False
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        # The next offset to pull; -1 until computed from the store.
        self.pull_offset = pull_offset
        # The first offset poll has not handed out yet; -1 until the first poll of it.
        self.consume_offset = -1
        # consume_offset as of the latest poll call: what the application has
        # finished with, since it asks for more only when done.
        self.processed = -1
        self.generation = 0
        self.task: asyncio.Task[None] | None = None


class QueueTable:
    """The held queues and the subscription mode (subscribe or assign) they came by."""

    __slots__ = ("assign_subs", "kind", "states")

    def __init__(self) -> None:
        self.kind = SubscriptionType.NONE
        self.states: dict[MessageQueue, QueueState] = {}
        # assign mode: every message of a topic, one ``*`` subscription per topic.
        self.assign_subs: dict[str, SubscriptionData] = {}

    def set_kind(self, kind: SubscriptionType) -> None:
        if self.kind is SubscriptionType.NONE:
            self.kind = kind
        elif self.kind is not kind:
            raise ClientError(SUBSCRIPTION_CONFLICT_MESSAGE)

    def subscription_for(
        self, topic: str, subscribed: Mapping[str, SubscriptionData]
    ) -> SubscriptionData | None:
        if self.kind is SubscriptionType.SUBSCRIBE:
            return subscribed.get(topic)
        sub = self.assign_subs.get(topic)
        if sub is None:
            sub = build_subscription(topic, "*")
            self.assign_subs[topic] = sub
        return sub

    def held(self, queue: MessageQueue) -> QueueState:
        state = self.states.get(queue)
        if state is None:
            if self.kind is SubscriptionType.SUBSCRIBE:
                raise ClientError(
                    "The message queue is not in assigned list, may be rebalancing, "
                    f"message queue: {queue}"
                )
            raise ClientError(f"The message queue is not in assigned list, message queue: {queue}")
        return state

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            state = self.states.get(mq)
            if state is not None:
                state.paused = True
                state.unpaused.clear()

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            state = self.states.get(mq)
            if state is not None and state.paused:
                state.paused = False
                state.unpaused.set()

    def paused(self) -> frozenset[MessageQueue]:
        return frozenset(mq for mq, s in self.states.items() if s.paused)
