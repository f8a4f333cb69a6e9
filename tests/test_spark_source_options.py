"""The ``rocketmq`` source's subscription and range options (issue 27 item 7).

``subExpression`` is checked as every subscription is, ``expressionType`` SQL92
is filtered by the broker, ``minPartitions`` splits queue ranges,
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` and a timestamp
``endingOffsets`` bound the read by store time, and ``maxOffsetsPerTrigger``
is Kafka's name for ``maxMessagesPerTrigger``. Reads go over TCP to the embedded
broker through the source's batch reader (no Spark session: the Spark path is
in test_spark_source.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import pytest

from rmqk.model.errors import ConfigError, SubscriptionRefusedError
from rmqk.model.message import Message

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rmqk.plugins.spark.offsets import split_ranges
from rmqk.plugins.spark.source import RocketMQBatchReader, RocketMQStreamReader, SourceOptions

pytestmark = pytest.mark.timeout(120)

BASE = {"namesrv": "127.0.0.1:1", "topics": "T"}


def _problems(options: dict[str, str], streaming: bool) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse({**BASE, **options}, streaming=streaming)
    return {p.key or "": p.message for p in info.value.problems}


def test_option_rules() -> None:
    alias = SourceOptions.parse({**BASE, "maxOffsetsPerTrigger": "7"}, streaming=True)
    assert alias.max_messages_per_trigger == 7
    both = _problems({"maxOffsetsPerTrigger": "7", "maxMessagesPerTrigger": "8"}, True)
    assert "given twice" in both["maxMessagesPerTrigger"]
    assert (
        "streaming reads only"
        in _problems({"maxOffsetsPerTrigger": "7"}, False)["maxOffsetsPerTrigger"]
    )
    # The subscription rule of every API, in the same words.
    sql_like = _problems({"subExpression": "a > 1"}, False)["subExpression"]
    assert "looks like SQL92" in sql_like and '"SQL92"' in sql_like
    assert "single '|'" in _problems({"subExpression": "a|b"}, False)["subExpression"]
    assert "TAG, SQL92" in _problems({"expressionType": "SQL"}, False)["expressionType"]
    assert (
        "required with expressionType SQL92"
        in _problems({"expressionType": "SQL92"}, False)["subExpression"]
    )
    sql = SourceOptions.parse(
        {**BASE, "expressionType": "SQL92", "subExpression": "a > 1"}, streaming=False
    )
    assert sql.subscription("T").sub_string == "a > 1"
    assert sql.subscription("T").expression_type.value == "SQL92"
    both_starts = _problems(
        {"startingOffsets": "earliest", "startingOffsetsByTimestamp": '{"T@b@0": 1}'}, False
    )
    assert "give one of them" in both_starts["startingOffsetsByTimestamp"]
    assert (
        "batch reads"
        in _problems({"endingOffsetsByTimestamp": '{"T@b@0": 1}'}, True)["endingOffsetsByTimestamp"]
    )
    assert (
        "timestamp of T@b@0"
        in _problems({"startingOffsetsByTimestamp": '{"T@b@0": -1}'}, False)[
            "startingOffsetsByTimestamp"
        ]
    )
    assert ">= 1" in _problems({"minPartitions": "0"}, False)["minPartitions"]
    ending = SourceOptions.parse({**BASE, "endingOffsets": "1700000000000"}, streaming=False)
    assert (ending.ending.kind, ending.ending.timestamp_ms) == ("timestamp", 1_700_000_000_000)


def test_split_ranges() -> None:
    ranges = [("a", 0, 100), ("b", 10, 20)]
    assert split_ranges(ranges, 2) == ranges
    pieces = split_ranges(ranges, 5)
    assert len(pieces) == 5
    # Consecutive pieces that cover each range exactly once; the big range takes the most.
    for key, start, end in ranges:
        mine = [p for p in pieces if p[0] == key]
        assert mine[0][1] == start and mine[-1][2] == end
        assert all(x[2] == y[1] for x, y in itertools.pairwise(mine))
    assert len([p for p in pieces if p[0] == "a"]) == 4
    # A range of one offset cannot be cut: fewer pieces, never empty ones.
    assert split_ranges([("a", 0, 1), ("b", 0, 2)], 10) == [("a", 0, 1), ("b", 0, 1), ("b", 1, 2)]


async def _send(namesrv: str, first: int, count: int) -> None:
    from rmqk.engine.producer import AsyncProducer

    async with AsyncProducer("opts-producer", namesrv_addr=namesrv) as producer:
        queues = await producer.queues_for("Opts")
        for n in range(first, first + count):
            msg = Message("Opts", f"m-{n}".encode(), tags="t", properties={"n": str(n)})
            await producer.send(msg, queue=queues[n % 2])


def _rows(handle: Any, **options: str) -> tuple[int, list[int]]:
    """How many input partitions a batch read plans, and the ``n`` of each row it reads."""
    reader = RocketMQBatchReader(
        SourceOptions.parse(
            {"namesrv": handle.namesrv_addr, "topics": "Opts", **options}, streaming=False
        )
    )
    parts = reader.partitions()
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    return len(parts), sorted(int(r["body"].decode()[2:]) for r in rows)


def test_batch_reads_by_sql92_partitions_and_timestamps(broker_thread_factory: Any) -> None:
    handle = broker_thread_factory(enable_property_filter=True)
    handle.call(handle.broker.create_topic("Opts", queues=2))
    asyncio.run(_send(handle.namesrv_addr, 0, 40))
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    asyncio.run(_send(handle.namesrv_addr, 40, 40))
    everything = list(range(80))

    assert _rows(handle) == (2, everything)
    # SQL92: the broker filters by the message properties.
    _, selected = _rows(handle, expressionType="SQL92", subExpression="n >= 10 AND n < 20")
    assert selected == list(range(10, 20))
    with pytest.raises(SubscriptionRefusedError) as refused:
        _rows(handle, expressionType="SQL92", subExpression="n >>> 1")
    assert "n >>> 1" in str(refused.value)
    # minPartitions: more input partitions, the same rows once each.
    assert _rows(handle, minPartitions="7") == (7, everything)
    # By store time: before and after the moment between the two sends.
    assert _rows(handle, endingOffsets=str(between))[1] == list(range(40))
    q0 = {"Opts": {"broker-a": {"0": between}}}
    assert _rows(handle, startingOffsetsByTimestamp=json.dumps(q0))[1] == sorted(
        [n for n in range(40, 80) if n % 2 == 0] + [n for n in range(80) if n % 2 == 1]
    )
    assert _rows(handle, endingOffsetsByTimestamp=json.dumps(q0))[1] == sorted(
        [n for n in range(40) if n % 2 == 0] + [n for n in range(80) if n % 2 == 1]
    )
    # A stream starts a named queue at its timestamp and the others at latest.
    stream = RocketMQStreamReader(
        SourceOptions.parse(
            {
                "namesrv": handle.namesrv_addr,
                "topics": "Opts",
                "startingOffsetsByTimestamp": json.dumps(q0),
            },
            streaming=True,
        )
    )
    try:
        assert stream.initialOffset() == {"Opts@broker-a@0": 20, "Opts@broker-a@1": 40}
    finally:
        stream.stop()
