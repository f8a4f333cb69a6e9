from collections.abc import Sequence

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt

# validity bitmap (None: no nulls), null count, int32 offsets, data
VarColumn = tuple[bytes | None, int, bytes, bytes]
# per-row int32 offsets, entries, then the keys' and the values' offsets and data
MapBuffers = tuple[bytes, int, bytes, bytes, bytes, bytes]
# rows, topic, broker, queue_id, queue_offset, msg_id, keys, tags, body,
# born_timestamp, store_timestamp, reconsume_times, properties
Built = tuple[
    int,
    VarColumn,
    VarColumn,
    bytes,
    bytes,
    VarColumn,
    VarColumn,
    VarColumn,
    VarColumn,
    bytes,
    bytes,
    bytes,
    MapBuffers,
]

def configure(
    ext_type: type[MessageExt],
    slot_descriptors: tuple[object, ...],
    uniq_key: str,
    keys: str,
    tags: str,
    excluded: tuple[str, ...],
) -> None: ...
def build(
    batches: tuple[tuple[MessageQueue | None, Sequence[MessageExt]], ...],
) -> Built | None: ...
