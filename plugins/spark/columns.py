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

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.model import MessageQueue
from rmqk.model.message import PROPERTY_SEPARATOR, MessageExt, MessageProperty
from rmqk.plugins.sinks.records import EXCLUDED_PROPERTIES
from rmqk.spi.extensions import extensions_disabled

if TYPE_CHECKING:
    import pyarrow as pa

    from rmqk.plugins.spark._columns import Built as _Built
    from rmqk.plugins.spark._columns import VarColumn as _VarColumn

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


_Pair = tuple[MessageQueue | None, Sequence[MessageExt]]
# The MessageExt slots the compiled builder reads, in the order _columns.c numbers them.
_SLOT_ORDER = (
    "topic",
    "body",
    "queue_id",
    "queue_offset",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "broker_name",
    "_props_raw",
    "_props",
)


def _load_compiled() -> Callable[[tuple[_Pair, ...]], _Built | None] | None:
    """The compiled builder unless it was not built or ``RMQK_NO_EXTENSIONS=1`` disables it."""
    if extensions_disabled():
        return None
    try:
        from rmqk.plugins.spark import _columns
    except ImportError:
        return None
    _columns.configure(
        MessageExt,
        tuple(MessageExt.__dict__[name] for name in _SLOT_ORDER),
        MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageProperty.KEYS,
        MessageProperty.TAGS,
        tuple(sorted(EXCLUDED_PROPERTIES)),
    )
    return _columns.build


_compiled_build = _load_compiled()
SPEEDUPS = _compiled_build is not None


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

    The compiled builder (_columns.c) returns every column's Arrow buffers; a
    batch it does not take (or a run without it) goes through
    :func:`_python_arrow`, the reference it is tested against.
    """
    pairs = tuple(batches)
    if _compiled_build is not None:
        built = _compiled_build(pairs)
        if built is not None:
            return _from_buffers(built, pairs)
    return _python_arrow(pairs)


def _python_arrow(
    batches: Sequence[tuple[MessageQueue | None, Sequence[MessageExt]]],
) -> pa.RecordBatch:
    """The pure-Python builder: one attribute read per column and message.

    Properties are parsed by Arrow kernels from their raw text (with
    parse_properties's rules), not into a dict per message.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    msgs: list[MessageExt] = []
    broker: list[str] = []
    queue_id: list[int] = []
    for queue, messages in batches:
        msgs.extend(messages)
        if queue is None:
            broker.extend([m.broker_name for m in messages])
            queue_id.extend([m.queue_id for m in messages])
        else:
            broker.extend([queue.broker_name] * len(messages))
            queue_id.extend([queue.queue_id] * len(messages))
    schema = arrow_schema()
    ts_type = schema.field("born_timestamp").type

    def timestamps(ms: list[int]) -> pa.Array:
        return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(ts_type)

    props = _Properties.parse(msgs)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.topic for m in msgs], pa.string()),
            pa.array(broker, pa.string()),
            pa.array(queue_id, pa.int32()),
            pa.array([m.queue_offset for m in msgs], pa.int64()),
            props.msg_ids(msgs),
            props.single(MessageProperty.KEYS),
            props.single(MessageProperty.TAGS),
            props.map_column(schema.field("properties").type),
            pa.array([m.body for m in msgs], pa.binary()),
            timestamps([m.born_timestamp for m in msgs]),
            timestamps([m.store_timestamp for m in msgs]),
            pa.array([m.reconsume_times for m in msgs], pa.int32()),
        ],
        schema=schema,
    )


def _from_buffers(built: _Built, pairs: Sequence[_Pair]) -> pa.RecordBatch:
    """The record batch over the compiled builder's buffers (no per-row Python)."""
    import pyarrow as pa

    rows, topic, broker, qid, qoffset, uniq, keys, tags, body, born, store, again, props = built
    schema = arrow_schema()

    def var(kind: pa.DataType, column: _VarColumn, length: int = rows) -> pa.Array:
        valid, nulls, offsets, data = column
        bitmap = None if valid is None else pa.py_buffer(valid)
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(kind, length, buffers, null_count=nulls)

    def fixed(kind: pa.DataType, data: bytes, length: int = rows) -> pa.Array:
        return pa.Array.from_buffers(kind, length, [None, pa.py_buffer(data)], null_count=0)

    map_offsets, entries, key_offsets, key_data, value_offsets, value_data = props
    map_type = schema.field("properties").type
    properties = pa.MapArray.from_arrays(
        fixed(pa.int32(), map_offsets, rows + 1),
        var(pa.string(), (None, 0, key_offsets, key_data), entries),
        var(pa.string(), (None, 0, value_offsets, value_data), entries),
    )
    if not properties.type.equals(map_type):
        properties = properties.cast(map_type)
    msg_ids = var(pa.string(), uniq)
    if msg_ids.null_count:
        msg_ids = _with_offset_ids(msg_ids, [m for _, messages in pairs for m in messages])
    ts_type = schema.field("born_timestamp").type
    return pa.RecordBatch.from_arrays(
        [
            var(pa.string(), topic),
            var(pa.string(), broker),
            fixed(pa.int32(), qid),
            fixed(pa.int64(), qoffset),
            msg_ids,
            var(pa.string(), keys),
            var(pa.string(), tags),
            properties,
            var(pa.binary(), body),
            fixed(ts_type, born),
            fixed(ts_type, store),
            fixed(pa.int32(), again),
        ],
        schema=schema,
    )


def _with_offset_ids(uniq: pa.Array, msgs: Sequence[MessageExt]) -> pa.Array:
    """UNIQ_KEY, else the offset message id (computed only where it is missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if uniq.null_count == 0:
        return uniq
    missing = uniq.is_null()
    where = pc.indices_nonzero(missing).to_pylist()
    computed = pa.array([msgs[i].offset_msg_id for i in where], pa.string())
    return pc.replace_with_mask(uniq, missing, computed)


# A segment parse_properties keeps: a non-empty key up to the first \x01, a non-empty value.
_SEGMENT = "(?s)^(?P<key>[^\x01]+)\x01(?P<value>.+)$"


@attrs.frozen
class _Properties:
    """Every kept property of a batch of messages, flat in message order."""

    rows: int
    # per kept property: its message's index, key, value (sorted by message index)
    parent: pa.Array
    keys: pa.Array
    values: pa.Array
    # offsets[i]..offsets[i+1] are message i's properties among the kept ones
    offsets: pa.Array

    @classmethod
    def parse(cls, msgs: Sequence[MessageExt]) -> _Properties:
        import pyarrow as pa
        import pyarrow.compute as pc

        segments = pc.split_pattern(_wire_properties(msgs), pattern=PROPERTY_SEPARATOR)
        flat = pc.list_flatten(segments)
        parent = pc.list_parent_indices(segments)
        parts = pc.extract_regex(flat, pattern=_SEGMENT)
        keep = parts.is_valid()
        parent = parent.filter(keep)
        keys = pc.struct_field(parts, "key").filter(keep)
        values = pc.struct_field(parts, "value").filter(keep)
        if len(keys) and _has_duplicates(parent, keys):
            return cls._by_row(msgs)
        kept = pc.cumulative_sum(keep.cast(pa.int32()))
        offsets = pc.take(pa.concat_arrays([pa.array([0], pa.int32()), kept]), segments.offsets)
        return cls(len(msgs), parent, keys, values, offsets)

    @classmethod
    def _by_row(cls, msgs: Sequence[MessageExt]) -> _Properties:
        """Through each message's parsed dict: the last of a repeated key wins there."""
        import pyarrow as pa

        parent: list[int] = []
        keys: list[str] = []
        values: list[str] = []
        offsets = [0]
        for i, m in enumerate(msgs):
            for k, v in m.properties.items():
                parent.append(i)
                keys.append(k)
                values.append(v)
            offsets.append(len(keys))
        return cls(
            len(msgs),
            pa.array(parent, pa.int64()),
            pa.array(keys, pa.string()),
            pa.array(values, pa.string()),
            pa.array(offsets, pa.int32()),
        )

    def single(self, key: str) -> pa.Array:
        """The value of ``key`` per message, null where it has none."""
        import pyarrow as pa
        import pyarrow.compute as pc

        match = pc.equal(self.keys, key)
        found = self.values.filter(match)
        if len(found) == 0:
            return pa.nulls(self.rows, pa.string())
        # Matches up to each message's first property; a message has a key at most once.
        before = pa.concat_arrays(
            [pa.array([0], pa.int64()), pc.cumulative_sum(match.cast(pa.int64()))]
        )
        upto = pc.take(before, self.offsets)
        has = pc.greater(upto[1:], upto[:-1])
        return pc.replace_with_mask(pa.nulls(self.rows, pa.string()), has, found)

    def msg_ids(self, msgs: Sequence[MessageExt]) -> pa.Array:
        return _with_offset_ids(self.single(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), msgs)

    def map_column(self, map_type: pa.DataType) -> pa.Array:
        """The properties without those that have a column or change per delivery."""
        import pyarrow as pa
        import pyarrow.compute as pc

        shown = pc.invert(pc.is_in(self.keys, value_set=pa.array(sorted(EXCLUDED_PROPERTIES))))
        counted = pc.cumulative_sum(shown.cast(pa.int32()))
        # Kept properties before message i's first one, shown or not: its map offset.
        before = pa.concat_arrays([pa.array([0], pa.int32()), counted])
        offsets = pc.take(before, self.offsets)
        out = pa.MapArray.from_arrays(offsets, self.keys.filter(shown), self.values.filter(shown))
        if not out.type.equals(map_type):
            out = out.cast(map_type)
        return out


def _wire_properties(msgs: Sequence[MessageExt]) -> pa.Array:
    """Each message's properties text as received, not parsed (as a string array).

    ``properties_raw`` would parse and re-format every consumed message to add
    the MIN_OFFSET / MAX_OFFSET the consumer records, which no column shows.
    """
    import pyarrow as pa

    raws = [m.properties_text() for m in msgs]
    # A str is stored as its UTF-8 bytes; the cast checks that the bytes are UTF-8.
    texts = pa.array(raws, pa.binary()).fill_null(b"")
    try:
        return texts.cast(pa.string())
    except pa.ArrowInvalid:
        # Bad bytes read as U+FFFD, as MessageExt.properties does.
        return pa.array(
            [r.decode("utf-8", "replace") if isinstance(r, bytes) else r or "" for r in raws],
            pa.string(),
        )


def _has_duplicates(parent: pa.Array, keys: pa.Array) -> bool:
    """Whether any message has a key twice (rare; parse_properties keeps the last)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.dictionary_encode(keys)
    # One integer per (message, key) pair: distinct unless a message repeats a key.
    pairs = pc.add(pc.multiply(parent, len(names.dictionary)), names.indices.cast(pa.int64()))
    return bool(pc.count_distinct(pairs).as_py() != len(keys))
