"""The stored message record: layout facts the store needs beyond encoding.

A commit log record is byte for byte what a PULL_MESSAGE response carries
(MessageDecoder's layout, magic V1), so a pull copies records out of the log
without re-encoding. Encoding and decoding records is the remoting codec's job
(``rmqk.wire.message_codec``); this module holds what only the store
needs: recovery's validation of a record found on disk and quick reads of a
field or two.

Layout (big-endian)::

    0 total:i32  4 magic:i32  8 bodyCRC:i32  12 queueId:i32  16 flag:i32
    20 queueOffset:i64  28 physicalOffset:i64  36 sysFlag:i32  40 bornTimestamp:i64
    48 bornHost (ip 4|16 + port:i32)  storeTimestamp:i64  storeHost  reconsumeTimes:i32
    preparedTransactionOffset:i64  body (len:i32 + bytes)  topic (len:u8 + bytes)
    properties (len:i16 + bytes)
"""

from __future__ import annotations

import mmap
import struct
import zlib

import attrs

from rmqk.wire.message_codec import MAGIC_CODE_V1, MAGIC_CODE_V2

__all__ = [
    "BLANK_MAGIC",
    "MIN_RECORD_SIZE",
    "RecordInfo",
    "inspect_record",
    "read_total_and_magic",
    "store_timestamp_of",
]

# Marks the unused end of a commit log segment, as Java's CommitLog does, so that
# recovery can tell "segment finished, continue in the next one" from a torn tail.
BLANK_MAGIC = -875286124  # 0xCBD43194

_BORN_V6 = 0x10
_STORE_V6 = 0x20

# total, magic, crc, qid, flag, qoff, phys, sysflag, born ts, bodylen(4), topiclen(1),
# propslen(2) and two IPv4 hosts of 8 bytes: a record with empty body, topic and properties.
MIN_RECORD_SIZE = 91

_HEAD = struct.Struct(">iiiiiqqiq")  # up to and including bornTimestamp (48 bytes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_I16 = struct.Struct(">h")
_TOTAL_MAGIC = struct.Struct(">ii")

Buffer = bytes | bytearray | memoryview | mmap.mmap


def store_timestamp_of(buf: Buffer, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its sysFlag tells where the field is)."""
    sys_flag = _I32.unpack_from(buf, pos + 36)[0]
    at = pos + (68 if sys_flag & _BORN_V6 else 56)
    return int(_I64.unpack_from(buf, at)[0])


@attrs.frozen
class RecordInfo:
    """What recovery learns from one valid record (enough to rebuild its queue entry)."""

    size: int
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    topic: str
    properties_raw: str


def inspect_record(
    buf: Buffer, pos: int, limit: int, expected_offset: int, *, check_crc: bool = True
) -> RecordInfo | None:
    """Validate the record at ``pos`` as recovery must; ``None`` if it is not a whole one.

    A record is accepted only when its magic is a message magic, its size fits
    below ``limit`` (the last byte it may use, exclusive), the lengths inside it add
    up to its size, the body CRC matches (unless ``check_crc`` is false: recovery
    then asks whether a record that failed is a whole frame with a damaged body) and
    its PHYSICALOFFSET equals
    ``expected_offset`` (so stale bytes from an earlier life of the file are never
    taken for a record).
    """
    if pos + _HEAD.size > limit:
        return None
    total, magic, crc, qid, _flag, qoff, phys, sys_flag, _born = _HEAD.unpack_from(buf, pos)
    if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
        return None
    if total < MIN_RECORD_SIZE or pos + total > limit or phys != expected_offset:
        return None
    end = pos + total
    at = pos + 48 + (20 if sys_flag & _BORN_V6 else 8)
    store_ts = _I64.unpack_from(buf, at)[0]
    at += 8 + (20 if sys_flag & _STORE_V6 else 8) + 4 + 8
    if at + 4 > end:
        return None
    body_len = _I32.unpack_from(buf, at)[0]
    at += 4
    if body_len < 0 or at + body_len > end:
        return None
    if check_crc and zlib.crc32(buf[at : at + body_len]) & 0x7FFFFFFF != crc:
        return None
    at += body_len
    if magic == MAGIC_CODE_V1:
        if at + 1 > end:
            return None
        topic_len = _U8.unpack_from(buf, at)[0]
        at += 1
    else:
        if at + 2 > end:
            return None
        topic_len = _I16.unpack_from(buf, at)[0]
        at += 2
    if topic_len < 0 or at + topic_len + 2 > end:
        return None
    try:
        topic = bytes(buf[at : at + topic_len]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    at += topic_len
    props_len = _I16.unpack_from(buf, at)[0]
    at += 2
    if props_len < 0 or at + props_len != end:
        return None
    try:
        props = bytes(buf[at:end]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return RecordInfo(total, qid, qoff, sys_flag, store_ts, topic, props)


def read_total_and_magic(buf: Buffer, pos: int) -> tuple[int, int]:
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    return int(total), int(magic)
