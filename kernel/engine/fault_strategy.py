"""Which queue a send goes to, and which brokers to keep away from (Java's MQFaultStrategy).

Two rules, as in Apache RocketMQ 4.9.8's producer:

* With ``send_latency_fault_enable`` off (the default) a retry goes to a queue of
  another broker than the one that just failed, when the topic has one
  (``TopicPublishInfo.selectOneMessageQueue(lastBrokerName)``).
* With it on, every send's latency (or its failure, counted as 30 s) marks its
  broker unavailable for the duration the tables give: the first ``latency_max``
  step the latency reaches from the top picks the ``not_available_duration`` of
  the same index. Selection skips unavailable brokers; when every broker is
  unavailable it falls back to one of the better half (``pickOneAtLeast``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

import attrs

from rmqk.model import MessageQueue

# Java's defaults, declared with the producer's options they are the defaults of.
from rmqk.options.producer import DEFAULT_LATENCY_MAX, DEFAULT_NOT_AVAILABLE_DURATION

__all__ = [
    "DEFAULT_LATENCY_MAX",
    "DEFAULT_NOT_AVAILABLE_DURATION",
    "ISOLATION_LATENCY_MS",
    "FaultItem",
    "LatencyFaultTolerance",
    "MQFaultStrategy",
    "TopicPublishInfo",
]

# A failed send is judged as if it had taken this long (updateFaultItem's isolation).
ISOLATION_LATENCY_MS = 30000

Clock = Callable[[], float]


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class _Index:
    """ThreadLocalIndex: a counter that starts at a random value, kept non-negative."""

    __slots__ = ("value",)

    def __init__(self, start: int | None = None) -> None:
        self.value = random.randrange(1 << 31) if start is None else start

    def increment_and_get(self) -> int:
        self.value = (self.value + 1) & 0x7FFFFFFF
        return self.value


class TopicPublishInfo:
    """The writable queues of one topic, in the order the route lists them."""

    __slots__ = ("queues", "route_known", "send_which_queue")

    def __init__(self, queues: tuple[MessageQueue, ...], route_known: bool = True) -> None:
        self.queues = queues
        self.route_known = route_known
        # Starts at 0, not at Java's random value: rmqk's first send of a topic has
        # always gone to its second queue, and tests over one broker rely on it.
        self.send_which_queue = _Index(0)

    def ok(self) -> bool:
        return bool(self.queues)

    def select_one(self, last_broker: str | None = None) -> MessageQueue:
        """Round robin; with ``last_broker``, the next queue of another broker if there is one."""
        n = len(self.queues)
        if last_broker is not None:
            for _ in range(n):
                mq = self.queues[self.send_which_queue.increment_and_get() % n]
                if mq.broker_name != last_broker:
                    return mq
        return self.queues[self.send_which_queue.increment_and_get() % n]

    def write_queue_nums(self, broker_name: str) -> int:
        """getQueueIdByBroker: how many writable queues ``broker_name`` has (-1: none)."""
        count = sum(1 for mq in self.queues if mq.broker_name == broker_name)
        return count if count else -1


@attrs.define
class FaultItem:
    """One broker's last latency and the time (clock ms) from which it is available again."""

    name: str
    current_latency: float
    start_timestamp: float

    def is_available(self, now: float) -> bool:
        return now - self.start_timestamp >= 0


class LatencyFaultTolerance:
    """LatencyFaultToleranceImpl: the fault items by broker name."""

    def __init__(self, clock: Clock = _monotonic_ms) -> None:
        self.clock = clock
        self._items: dict[str, FaultItem] = {}
        self._which_item_worst = _Index()

    def update_fault_item(self, name: str, current_latency: float, not_available_ms: int) -> None:
        until = self.clock() + not_available_ms
        item = self._items.get(name)
        if item is None:
            self._items[name] = FaultItem(name, current_latency, until)
        else:
            item.current_latency = current_latency
            item.start_timestamp = until

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.is_available(self.clock())

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def item(self, name: str) -> FaultItem | None:
        return self._items.get(name)

    def pick_one_at_least(self) -> str | None:
        """A broker from the better half: available first, then lower latency, then sooner."""
        if not self._items:
            return None
        now = self.clock()
        ranked = sorted(
            self._items.values(),
            key=lambda it: (not it.is_available(now), it.current_latency, it.start_timestamp),
        )
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        return ranked[self._which_item_worst.increment_and_get() % half].name


class MQFaultStrategy:
    """Queue selection and fault bookkeeping for one producer."""

    def __init__(
        self,
        *,
        enabled: bool = False,
        latency_max: Sequence[int] = DEFAULT_LATENCY_MAX,
        not_available_duration: Sequence[int] = DEFAULT_NOT_AVAILABLE_DURATION,
        clock: Clock = _monotonic_ms,
    ) -> None:
        self.enabled = enabled
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.tolerance = LatencyFaultTolerance(clock)

    def select_one_message_queue(
        self, info: TopicPublishInfo, last_broker: str | None
    ) -> MessageQueue:
        if not self.enabled:
            return info.select_one(last_broker)
        tolerance = self.tolerance
        n = len(info.queues)
        index = info.send_which_queue.increment_and_get()
        for i in range(n):
            mq = info.queues[(index + i) % n]
            if tolerance.is_available(mq.broker_name):
                return mq
        not_best = tolerance.pick_one_at_least()
        if not_best is not None:
            nums = info.write_queue_nums(not_best)
            if nums > 0:
                mq = info.select_one()
                queue_id = info.send_which_queue.increment_and_get() % nums
                return MessageQueue(mq.topic, not_best, queue_id)
            tolerance.remove(not_best)
        return info.select_one()

    def update_fault_item(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        if self.enabled:
            judged = ISOLATION_LATENCY_MS if isolation else latency_ms
            duration = self.compute_not_available_duration(judged)
            self.tolerance.update_fault_item(broker_name, latency_ms, duration)

    def compute_not_available_duration(self, latency_ms: float) -> int:
        for step, duration in zip(
            reversed(self.latency_max), reversed(self.not_available_duration), strict=True
        ):
            if latency_ms >= step:
                return duration
        return 0
