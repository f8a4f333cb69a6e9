"""computePullFromWhere: where a newly assigned queue starts, for each ConsumeFromWhere."""

from __future__ import annotations

from typing import Any

import pytest

from rmqk.engine.rebalance import Rebalance, parse_consume_timestamp
from rmqk.model import ConsumeFromWhere, MessageQueue
from rmqk.model.errors import BrokerError
from rmqk.options import ConsumerOptions
from rmqk.spi.contracts import ReadOffsetType

MQ = MessageQueue("T", "b", 0)
RETRY = MessageQueue("%RETRY%g", "b", 0)


class FakeStore:
    def __init__(self, stored: int) -> None:
        self.stored = stored
        self.reads: list[ReadOffsetType] = []

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        self.reads.append(read_type)
        return self.stored


class FakeConsumer:
    """Only what compute_pull_from_where touches: the offset store and two broker lookups."""

    group = "g"

    def __init__(self, stored: int, cfw: ConsumeFromWhere, max_offset: int = 500) -> None:
        self.offset_store = FakeStore(stored)
        self.options = ConsumerOptions(consume_from_where=cfw, consume_timestamp="20260101120000")
        self._max = max_offset
        self.searched: list[int] = []

    async def max_offset(self, mq: MessageQueue) -> int:
        if self._max < 0:
            raise BrokerError(17, "topic not exist")
        return self._max

    async def search_offset(self, mq: MessageQueue, ts: int) -> int:
        self.searched.append(ts)
        return 123


LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
STAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


@pytest.mark.parametrize(
    ("cfw", "stored", "mq", "expected"),
    [
        (LAST, 42, MQ, 42),  # a committed offset always wins
        (FIRST, 42, MQ, 42),
        (STAMP, 0, MQ, 0),
        (LAST, -1, MQ, 500),  # nothing committed: the queue's max offset
        (LAST, -1, RETRY, 0),  # ...but a retry queue starts at 0, or retries are skipped
        (FIRST, -1, MQ, 0),
        (FIRST, -1, RETRY, 0),
        (STAMP, -1, MQ, 123),  # search by timestamp
        (STAMP, -1, RETRY, 500),  # retry queue under TIMESTAMP: max offset
        (LAST, -2, MQ, -1),  # the store could not be read: skip this round, never jump ahead
        (FIRST, -2, MQ, -1),
        (STAMP, -2, MQ, -1),
    ],
)
async def test_compute_pull_from_where(
    cfw: ConsumeFromWhere, stored: int, mq: MessageQueue, expected: int
) -> None:
    consumer: Any = FakeConsumer(stored, cfw)
    assert await Rebalance(consumer).compute_pull_from_where(mq) == expected
    assert consumer.offset_store.reads == [ReadOffsetType.READ_FROM_STORE]


async def test_timestamp_is_parsed_in_local_time() -> None:
    consumer: Any = FakeConsumer(-1, STAMP)
    await Rebalance(consumer).compute_pull_from_where(MQ)
    assert consumer.searched == [parse_consume_timestamp("20260101120000")]


async def test_broker_error_on_max_offset_skips_the_queue() -> None:
    consumer: Any = FakeConsumer(-1, LAST, max_offset=-1)
    assert await Rebalance(consumer).compute_pull_from_where(MQ) == -1
