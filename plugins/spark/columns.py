"""Consumed messages as Arrow columns: the one row layout of the Spark sink and source.

Both directions share :data:`COLUMNS`, so a table written by the sink and a
DataFrame read with ``format("rocketmq")`` have the same schema. Timestamps are
microsecond UTC timestamps and the map has Spark's entry layout, exactly what
Spark's own Arrow conversion produces, because Spark 4.3 rejects a Python data
source batch whose Arrow schema differs in any detail.

``properties`` holds the message's properties without those that have their own
column (TAGS, KEYS, UNIQ_KEY) and without the ones a broker or consumer adds per
delivery (MIN_OFFSET, MAX_OFFSET, CONSUME_START_TIME): a replayed message must
produce the same row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.message import MessageExt, MessageProperty
from rmqk.model import MessageQueue

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COLUMNS",
    "DDL",
    "EXCLUDED_PROPERTIES",
    "Column",
    "arrow_schema",
    "messages_to_arrow",
    "spark_schema",
]


@attrs.frozen
class Column:
    name: str
    ddl_type: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("topic", "STRING", "the message's topic (the real topic for a redelivered retry)"),
    Column("broker", "STRING", "the broker name of the queue it was consumed from"),
    Column("queue_id", "INT", "the queue id it was consumed from"),
    Column("queue_offset", "BIGINT", "its offset in that queue"),
    Column("msg_id", "STRING", "the producer's unique id (UNIQ_KEY), else the offset id"),
    Column("keys", "STRING", "the KEYS property, space-separated as sent"),
    Column("tags", "STRING", "the TAGS property"),
    Column("properties", "MAP<STRING, STRING>", "every other user and system property"),
    Column("body", "BINARY", "the body, uncompressed"),
    Column("born_timestamp", "TIMESTAMP", "when the producer created it"),
    Column("store_timestamp", "TIMESTAMP", "when the broker stored it"),
    Column("reconsume_times", "INT", "how often it was redelivered through %RETRY%"),
)
DDL = ", ".join(f"{c.name} {c.ddl_type}" for c in COLUMNS)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)

EXCLUDED_PROPERTIES = frozenset(
    {
        MessageProperty.TAGS,
        MessageProperty.KEYS,
        MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageProperty.MIN_OFFSET,
        MessageProperty.MAX_OFFSET,
        MessageProperty.CONSUME_START_TIMESTAMP,
    }
)


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            pa.field("topic", pa.string()),
            pa.field("broker", pa.string()),
            pa.field("queue_id", pa.int32()),
            pa.field("queue_offset", pa.int64()),
            pa.field("msg_id", pa.string()),
            pa.field("keys", pa.string()),
            pa.field("tags", pa.string()),
            pa.field("properties", pa.map_(pa.string(), pa.string())),
            pa.field("body", pa.binary()),
            pa.field("born_timestamp", ts),
            pa.field("store_timestamp", ts),
            pa.field("reconsume_times", pa.int32()),
        ]
    )


def spark_schema() -> Any:
    """The columns as a pyspark StructType (needs pyspark, not a running session)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types = {
        "STRING": StringType(),
        "INT": IntegerType(),
        "BIGINT": LongType(),
        "MAP<STRING, STRING>": MapType(StringType(), StringType()),
        "BINARY": BinaryType(),
        "TIMESTAMP": TimestampType(),
    }
    return StructType([StructField(c.name, types[c.ddl_type], True) for c in COLUMNS])


def messages_to_arrow(
    batches: Iterable[tuple[MessageQueue | None, Sequence[MessageExt]]],
) -> pa.RecordBatch:
    """One record batch from ``(queue, messages)`` pairs, in order.

    ``queue`` names the broker and queue id a message was consumed from (for a
    retry it is the %RETRY% queue); None takes them from the message itself.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    topic: list[str] = []
    broker: list[str] = []
    queue_id: list[int] = []
    queue_offset: list[int] = []
    msg_id: list[str] = []
    keys: list[str | None] = []
    tags: list[str | None] = []
    map_offsets: list[int] = [0]
    map_keys: list[str] = []
    map_values: list[str] = []
    body: list[bytes] = []
    born: list[int] = []
    stored: list[int] = []
    reconsume: list[int] = []
    excluded = EXCLUDED_PROPERTIES
    uniq_key = MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    n_props = 0
    for queue, messages in batches:
        for m in messages:
            props = m.properties
            topic.append(m.topic)
            if queue is None:
                broker.append(m.broker_name)
                queue_id.append(m.queue_id)
            else:
                broker.append(queue.broker_name)
                queue_id.append(queue.queue_id)
            queue_offset.append(m.queue_offset)
            uniq = props.get(uniq_key)
            msg_id.append(uniq if uniq else m.offset_msg_id)
            keys.append(props.get(MessageProperty.KEYS))
            tags.append(props.get(MessageProperty.TAGS))
            for k, v in props.items():
                if k not in excluded:
                    map_keys.append(k)
                    map_values.append(v)
                    n_props += 1
            map_offsets.append(n_props)
            body.append(m.body)
            born.append(m.born_timestamp)
            stored.append(m.store_timestamp)
            reconsume.append(m.reconsume_times)
    schema = arrow_schema()
    ts_type = schema.field("born_timestamp").type

    def timestamps(ms: list[int]) -> pa.Array:
        return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(ts_type)

    properties = pa.MapArray.from_arrays(
        pa.array(map_offsets, pa.int32()),
        pa.array(map_keys, pa.string()),
        pa.array(map_values, pa.string()),
    )
    if not properties.type.equals(schema.field("properties").type):
        properties = properties.cast(schema.field("properties").type)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(topic, pa.string()),
            pa.array(broker, pa.string()),
            pa.array(queue_id, pa.int32()),
            pa.array(queue_offset, pa.int64()),
            pa.array(msg_id, pa.string()),
            pa.array(keys, pa.string()),
            pa.array(tags, pa.string()),
            properties,
            pa.array(body, pa.binary()),
            timestamps(born),
            timestamps(stored),
            pa.array(reconsume, pa.int32()),
        ],
        schema=schema,
    )
