"""The fault strategy's tables and choices, on a fake clock (Java's MQFaultStrategy)."""

from __future__ import annotations

import pytest

from rmqk.engine.fault_strategy import MQFaultStrategy, TopicPublishInfo
from rmqk.model import MessageQueue

QUEUES = tuple(MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(2))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("latency", "duration"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (100, 0),
        (549, 0),
        (550, 30000),
        (999, 30000),
        (1000, 60000),
        (2000, 120000),
        (3000, 180000),
        (14999, 180000),
        (15000, 600000),
        (30000, 600000),
    ],
)
def test_java_latency_and_not_available_tables(latency: int, duration: int) -> None:
    assert MQFaultStrategy().compute_not_available_duration(latency) == duration


def test_off_by_default_and_then_only_avoids_the_last_broker() -> None:
    strategy = MQFaultStrategy()
    strategy.update_fault_item("broker-a", 30000, True)
    assert strategy.tolerance.item("broker-a") is None  # nothing is recorded when off
    info = TopicPublishInfo(QUEUES)
    picks = [strategy.select_one_message_queue(info, "broker-a") for _ in range(6)]
    assert {mq.broker_name for mq in picks} == {"broker-b"}
    assert strategy.select_one_message_queue(info, None) in QUEUES


def test_a_failure_isolates_a_broker_for_the_30s_latency_duration() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    info = TopicPublishInfo(QUEUES)
    strategy.update_fault_item("broker-a", 12, True)  # judged as 30000 ms: 600000 ms away
    assert {strategy.select_one_message_queue(info, None).broker_name for _ in range(8)} == {
        "broker-b"
    }
    clock.now += 599_999
    assert not strategy.tolerance.is_available("broker-a")
    clock.now += 1
    assert strategy.tolerance.is_available("broker-a")
    picks = {strategy.select_one_message_queue(info, None).broker_name for _ in range(8)}
    assert picks == {"broker-a", "broker-b"}


def test_when_every_broker_is_out_the_better_one_is_picked() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    info = TopicPublishInfo(QUEUES)
    strategy.update_fault_item("broker-a", 900, False)  # 30 s out, lower latency
    strategy.update_fault_item("broker-b", 1500, False)  # 60 s out
    picks = [strategy.select_one_message_queue(info, None) for _ in range(6)]
    assert {mq.broker_name for mq in picks} == {"broker-a"}
    assert all(0 <= mq.queue_id < 2 for mq in picks)


def test_custom_tables() -> None:
    strategy = MQFaultStrategy(enabled=True, latency_max=(10, 20), not_available_duration=(5, 7))
    assert [strategy.compute_not_available_duration(v) for v in (9, 10, 19, 20, 99)] == [
        0,
        5,
        5,
        7,
        7,
    ]
