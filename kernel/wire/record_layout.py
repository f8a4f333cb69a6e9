"""Where the fields of a stored message record sit, shared by its decoder and encoders.

A stored record, big-endian, as the 4.9 broker writes it to its commit log and
serves it in pull responses (MessageDecoder / CommitLog.MessageExtEncoder)::

    off  field
      0  TOTALSIZE            i32   the record's length, itself included
      4  MAGICCODE            i32   V1 (1-byte topic length) or V2 (2-byte, 5.x)
      8  BODYCRC              i32   zlib.crc32(stored body) & 0x7FFFFFFF
     12  QUEUEID              i32
     16  FLAG                 i32   the producer's flag
     20  QUEUEOFFSET          i64   consume-queue offset
     28  PHYSICALOFFSET       i64   commit-log offset
     36  SYSFLAG              i32   MessageSysFlag
     40  BORNTIMESTAMP        i64
     48  BORNHOST             ip(4|16) + port:i32   16-byte ip if SYSFLAG & 0x10
      .  STORETIMESTAMP       i64
      .  STOREHOST            ip(4|16) + port:i32   16-byte ip if SYSFLAG & 0x20
      .  RECONSUMETIMES       i32
      .  PREPARED_TX_OFFSET   i64
      .  BODY                 i32 length + bytes (zlib-deflated if SYSFLAG & 0x1)
      .  TOPIC                u8 (V1) or i16 (V2) length + UTF-8
      .  PROPERTIES           i16 length + UTF-8 ``k\\x01v\\x02k\\x01v``

The fixed prefix up to and including the body length is 88 bytes with IPv4 hosts;
each IPv6 host adds 12.
"""

from __future__ import annotations

import enum
import struct
import zlib

__all__ = [
    "BODY_CRC_OFFSET",
    "BORN_HOST_OFFSET",
    "BORN_TIMESTAMP_OFFSET",
    "BORN_V6",
    "COMMIT_LOG_OFFSET_OFFSET",
    "FLAG_OFFSET",
    "MAGIC_CODE_OFFSET",
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "PREFIXES",
    "PROPERTIES_MAX",
    "QUEUE_ID_OFFSET",
    "QUEUE_OFFSET_OFFSET",
    "STORE_V6",
    "SYS_FLAG_OFFSET",
    "TOTAL_SIZE_OFFSET",
    "V6_FLAGS",
    "ZLIB_COMPRESSED_SYS_FLAG",
    "MessageSysFlag",
    "body_crc",
    "prefix_size",
    "reconsume_times_offset",
    "store_host_offset",
    "store_timestamp_offset",
]

MAGIC_CODE_V1 = -626843481  # 0xDAA320A7
MAGIC_CODE_V2 = -626843477  # 0xDAA320AB

TOTAL_SIZE_OFFSET = 0
MAGIC_CODE_OFFSET = 4
BODY_CRC_OFFSET = 8
QUEUE_ID_OFFSET = 12
FLAG_OFFSET = 16
QUEUE_OFFSET_OFFSET = 20
COMMIT_LOG_OFFSET_OFFSET = 28
SYS_FLAG_OFFSET = 36
BORN_TIMESTAMP_OFFSET = 40
BORN_HOST_OFFSET = 48


class MessageSysFlag(enum.IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300
    COMPRESSION_TYPE_MASK = 0x700


# What a 4.9.8 producer sets on a body it compressed (COMPRESSED | ZLIB type).
ZLIB_COMPRESSED_SYS_FLAG = 0x301
V6_FLAGS = 0x30
BORN_V6 = 0x10
STORE_V6 = 0x20
PROPERTIES_MAX = 0x7FFF

# The prefix through the body length, with each host as raw ip+port bytes: a
# comparison with the previous record's, or one dict lookup, gives its text.
PREFIXES = tuple(
    struct.Struct(f">iiiiiqqiq{born}sq{store}siqi")
    for born, store in ((8, 8), (20, 8), (8, 20), (20, 20))
)


def prefix_size(sys_flag: int) -> int:
    """Bytes of the fixed prefix, body length included: 88, 100 or 112."""
    return PREFIXES[(sys_flag & V6_FLAGS) >> 4].size


def store_timestamp_offset(sys_flag: int) -> int:
    return BORN_HOST_OFFSET + (20 if sys_flag & BORN_V6 else 8)


def store_host_offset(sys_flag: int) -> int:
    return store_timestamp_offset(sys_flag) + 8


def reconsume_times_offset(sys_flag: int) -> int:
    return store_host_offset(sys_flag) + (20 if sys_flag & STORE_V6 else 8)


def body_crc(body: bytes) -> int:
    """BODYCRC as the broker computes it (UtilAll.crc32: a non-negative int32)."""
    return zlib.crc32(body) & 0x7FFFFFFF
