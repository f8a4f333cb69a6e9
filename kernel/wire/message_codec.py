"""Stored message records (commit log and PULL_MESSAGE bodies) and batch send bodies.

A stored record, big-endian, as the 4.9 broker writes it to its commit log and
serves it in pull responses: its fields and their offsets are in
:mod:`rmqk.wire.record_layout` (the names other modules import
from here are re-exported).

Decoding is the consumer's hot path: one precompiled Struct reads the prefix,
hosts are formatted once per distinct address, and properties stay raw text that
:class:`~rmqk.model.message.MessageExt` parses on first use.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from rmqk.model.errors import FrameError
from rmqk.model.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, Message, MessageExt
from rmqk.spi.extensions import extensions_disabled
from rmqk.spi.transport import DEFAULT_MAX_DECOMPRESSED_BODY_SIZE
from rmqk.wire.compression import inflate, maybe_compress
from rmqk.wire.hosts import HOST_TEXTS, BadHost, host_bytes, host_text
from rmqk.wire.record_layout import (
    BORN_V6,
    COMMIT_LOG_OFFSET_OFFSET,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    PREFIXES,
    PROPERTIES_MAX,
    QUEUE_ID_OFFSET,
    QUEUE_OFFSET_OFFSET,
    STORE_V6,
    SYS_FLAG_OFFSET,
    TOTAL_SIZE_OFFSET,
    V6_FLAGS,
    ZLIB_COMPRESSED_SYS_FLAG,
    MessageSysFlag,
    body_crc,
    prefix_size,
    reconsume_times_offset,
    store_host_offset,
    store_timestamp_offset,
)
from rmqk.wire.uniq_id import create_uniq_id, uniq_id_timestamp

__all__ = [
    "COMMIT_LOG_OFFSET_OFFSET",
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "QUEUE_ID_OFFSET",
    "QUEUE_OFFSET_OFFSET",
    "SYS_FLAG_OFFSET",
    "TOTAL_SIZE_OFFSET",
    "ZLIB_COMPRESSED_SYS_FLAG",
    "BatchEntry",
    "MessageSysFlag",
    "RecordError",
    "body_crc",
    "create_uniq_id",
    "decode_batch",
    "decode_message",
    "decode_messages",
    "decode_records_into",
    "encode_batch",
    "encode_stored_message",
    "java_properties_string",
    "maybe_compress",
    "patch_stored_message",
    "prefix_size",
    "reconsume_times_offset",
    "record_total_size",
    "store_host_offset",
    "store_timestamp_offset",
    "uniq_id_timestamp",
]

_PREFIX_V4 = PREFIXES[0]
_MIN_RECORD = _PREFIX_V4.size + 1 + 2  # empty topic and properties
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH_HEAD = struct.Struct(">iiiii")  # total, magic, crc, flag, body length


# ----------------------------------------------------------------------------- decode


class RecordError(FrameError):
    """One malformed record: where it starts and whether the records after it can be found.

    ``framed`` is True when the record's TOTALSIZE was checked against its topic,
    body and properties lengths (only its content is bad: a body that does not
    inflate or is too large, an unreadable host), so decoding can go on after it.
    """

    def __init__(self, index: int, offset: int, reason: str, *, framed: bool = False) -> None:
        super().__init__(f"malformed message record #{index} at body offset {offset}: {reason}")
        self.index = index
        self.offset = offset
        self.reason = reason
        self.framed = framed


def _record_error(index: int, offset: int, message: str) -> RecordError:
    return RecordError(index, offset, message)


# The MessageExt slots in the order the compiled decoder fills them (_speedups.c).
_SLOT_ORDER = (
    "store_size",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "commit_log_offset",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body",
    "topic",
    "broker_name",
    "_props_raw",
    "_props",
    "_queue_bounds",
)

_CompiledDecode = Callable[[bytes, int, int, str, bool, int, list[MessageExt]], int]


def _load_speedups() -> _CompiledDecode | None:
    """The compiled decoder when it was built and RMQK_NO_EXTENSIONS is unset, else None.

    Like aiokafka's record codecs it is optional: a wheel built where no compiler
    was found, or a run with ``RMQK_NO_EXTENSIONS=1``, decodes in Python alone.
    """
    if extensions_disabled():
        return None
    try:
        from rmqk.wire import _speedups
    except ImportError:
        return None
    # A slot the C code does not know would stay unset on the messages it builds;
    # tests/test_speedups.py fails when this makes a built extension unused.
    if set(_SLOT_ORDER) != set(MessageExt.__slots__):
        return None
    descriptors = tuple(MessageExt.__dict__[name] for name in _SLOT_ORDER)
    _speedups.configure(MessageExt, descriptors, HOST_TEXTS, host_text, inflate)
    return _speedups.decode_records


_compiled_decode = _load_speedups()
SPEEDUPS = _compiled_decode is not None


def _decode_records(
    buf: bytes,
    off: int,
    end: int,
    broker_name: str,
    decompress: bool,
    origin: int = 0,
    max_body: int = DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
    out: list[MessageExt] | None = None,
) -> list[MessageExt]:
    """Decode the records in ``buf[off:end]``: compiled while it can, then in Python.

    The compiled decoder stops at the first record that is not plainly
    well-formed; the Python decoder goes on from there and reports it, so a
    malformed record fails the same way with or without the extension.
    """
    if out is None:
        out = []
    if _compiled_decode is not None:
        off = _compiled_decode(buf, off, end, broker_name, decompress, max_body, out)
        if off >= end:
            return out
    return _decode_records_py(buf, off, end, broker_name, decompress, origin, max_body, out)


def _decode_records_py(
    buf: bytes,
    off: int,
    end: int,
    broker_name: str,
    decompress: bool,
    origin: int = 0,
    max_body: int = DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
    out: list[MessageExt] | None = None,
) -> list[MessageExt]:
    """Decode the records in ``buf[off:end]``; the one decoder behind every API.

    ``origin`` is added to offsets in error messages when ``buf`` is a copied part.
    Records are appended to ``out`` (a new list by default), so a caller that
    catches a :class:`RecordError` keeps the records decoded before it.

    Everything is inlined in one loop, checks are folded so that a record is
    validated with few comparisons (a non-negative properties length that ends
    exactly at TOTALSIZE bounds the topic and body too), and the MessageExt slots
    are filled directly: the keyword constructor alone would cost more than the
    rest of the decode. tests/test_message_codec.py checks the result against the
    public constructor.
    """
    if out is None:
        out = []
    append = out.append
    new = object.__new__
    ext = MessageExt
    unpack_v4 = _PREFIX_V4.unpack_from
    unpack_i16 = _I16.unpack_from
    hosts = HOST_TEXTS
    v1 = MAGIC_CODE_V1
    minimum = _MIN_RECORD
    prefix_v4_size = _PREFIX_V4.size
    # Records of one pull share their topic and store host and mostly their born
    # host: remembering the last ones skips most decoding and formatting.
    last_topic_raw = last_born_raw = last_store_raw = b""
    last_topic = last_born = last_store = ""
    try:
        while off < end:
            vals = unpack_v4(buf, off)
            total = vals[0]
            stop = off + total
            if total < minimum or stop > end:
                raise _record_error(
                    len(out),
                    origin + off,
                    f"TOTALSIZE {total} does not fit the {end - off} bytes left",
                )
            sys_flag = vals[7]
            pos = off + prefix_v4_size
            if sys_flag & 0x30:
                prefix = PREFIXES[(sys_flag & 0x30) >> 4]
                vals = prefix.unpack_from(buf, off)
                pos = off + prefix.size
            (
                _,
                magic,
                crc,
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                _,
                born_timestamp,
                born_raw,
                store_timestamp,
                store_raw,
                reconsume_times,
                prepared_offset,
                body_len,
            ) = vals
            if body_len < 0:
                raise _record_error(len(out), origin + off, f"body length {body_len} is negative")
            body = buf[pos : pos + body_len]
            pos += body_len
            if magic == v1:
                topic_len = buf[pos]
                if topic_len > 127:  # Java reads a signed byte
                    raise _record_error(
                        len(out), origin + off, f"V1 topic length {topic_len - 256} is negative"
                    )
                pos += 1
            elif magic == MAGIC_CODE_V2:
                topic_len = unpack_i16(buf, pos)[0]
                pos += 2
            else:
                raise _record_error(
                    len(out), origin + off, f"unknown magic code 0x{magic & 0xFFFFFFFF:08X}"
                )
            # A pull body is usually one topic: reuse its text instead of decoding again.
            topic_raw = buf[pos : pos + topic_len]
            if topic_raw != last_topic_raw:
                last_topic_raw = topic_raw
                last_topic = topic_raw.decode("utf-8", "replace")
            pos += topic_len
            props_len = unpack_i16(buf, pos)[0]
            pos += 2
            if props_len < 0 or topic_len < 0 or pos + props_len != stop:
                raise _record_error(
                    len(out),
                    origin + off,
                    f"body length {body_len}, topic length {topic_len} and properties length "
                    f"{props_len} end the record at {pos + props_len - off}, "
                    f"but TOTALSIZE is {total}",
                )
            if sys_flag & 0x1 and decompress:
                try:
                    body = inflate(body, sys_flag, max_body)
                except ValueError as exc:
                    raise RecordError(len(out), origin + off, str(exc), framed=True) from None
            m = new(ext)
            m.store_size = total
            m.body_crc = crc
            m.queue_id = queue_id
            m.flag = flag
            m.queue_offset = queue_offset
            m.commit_log_offset = commit_log_offset
            m.sys_flag = sys_flag
            m.born_timestamp = born_timestamp
            if born_raw != last_born_raw:
                last_born_raw = born_raw
                last_born = hosts.get(born_raw) or host_text(born_raw)
            m.born_host = last_born
            m.store_timestamp = store_timestamp
            if store_raw != last_store_raw:
                last_store_raw = store_raw
                last_store = hosts.get(store_raw) or host_text(store_raw)
            m.store_host = last_store
            m.reconsume_times = reconsume_times
            m.prepared_transaction_offset = prepared_offset
            m.body = body
            m.topic = last_topic
            m.broker_name = broker_name
            # Kept as bytes: decoding costs more than the slice, and most listeners
            # never read a property.
            m._props_raw = buf[pos:stop] if props_len else b""
            m._props = None
            m._queue_bounds = None
            append(m)
            off = stop
    except BadHost as exc:
        # Hosts are read after the lengths were checked: the next record is known.
        raise RecordError(len(out), origin + off, str(exc), framed=True) from None
    except (struct.error, IndexError):
        # A read past the end of the buffer: the record is cut short.
        raise _record_error(
            len(out),
            origin + off,
            f"record truncated or a length runs past the end: {end - off} bytes left",
        ) from None
    return out


def decode_message(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    broker_name: str = "",
    *,
    decompress: bool = True,
) -> tuple[MessageExt, int]:
    """Decode the record starting at ``offset``; returns it and the next record's offset.

    Only this record is copied out of a bytearray or memoryview (a commit log
    scanned record by record is never copied whole).
    """
    size = len(buf)
    if not 0 <= offset <= size - 4:
        raise _record_error(0, offset, f"no record there: the buffer has {size} bytes")
    total = _I32.unpack_from(buf, offset)[0]
    # Bounding the range by this record's TOTALSIZE makes the loop decode just it.
    stop = offset + total if 0 < total <= size - offset else size
    if isinstance(buf, bytes):
        messages = _decode_records(buf, offset, stop, broker_name, decompress)
    else:
        with memoryview(buf) as view:
            part = bytes(view[offset:stop])
        messages = _decode_records(part, 0, len(part), broker_name, decompress, offset)
    return messages[0], offset + messages[0].store_size


def decode_messages(
    body: bytes | bytearray | memoryview,
    broker_name: str = "",
    *,
    decompress: bool = True,
    max_body_size: int = DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
) -> list[MessageExt]:
    """Every record of a PULL_MESSAGE body, in order, stepping by TOTALSIZE.

    Bodies are inflated when the record's sysFlag says so (zlib always; LZ4 and
    ZSTD when their optional packages are installed) unless ``decompress`` is
    False; one that would inflate past ``max_body_size`` bytes is malformed. A
    malformed record raises :class:`RecordError` (a
    :class:`~rmqk.model.errors.FrameError`) naming the record's index and offset.
    """
    data = body if isinstance(body, bytes) else bytes(body)
    return _decode_records(data, 0, len(data), broker_name, decompress, 0, max_body_size)


def decode_records_into(
    out: list[MessageExt], body: bytes, offset: int, broker_name: str, max_body_size: int
) -> None:
    """Append the records of ``body[offset:]`` to ``out``, inflating their bodies.

    On a :class:`RecordError`, ``out`` holds the records before the bad one.
    """
    _decode_records(body, offset, len(body), broker_name, True, 0, max_body_size, out)


def record_total_size(buf: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """TOTALSIZE of the record at ``offset`` (the step to the next record)."""
    return int(_I32.unpack_from(buf, offset + TOTAL_SIZE_OFFSET)[0])


# ----------------------------------------------------------------------------- encode


def java_properties_string(properties: Mapping[str, str]) -> str:
    """Properties text exactly as Java's messageProperties2String writes it.

    No separator follows the last pair; pairs with an empty key or value are left
    out because Java's parser would drop them anyway.
    """
    return PROPERTY_SEPARATOR.join(
        f"{key}{NAME_VALUE_SEPARATOR}{value}" for key, value in properties.items() if key and value
    )


def encode_stored_message(
    *,
    topic: str,
    body: bytes,
    flag: int = 0,
    queue_id: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:0",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    properties_raw: str = "",
    body_crc: int | None = None,
    magic_code: int = MAGIC_CODE_V1,
) -> bytes:
    """One stored record, byte for byte what the Apache broker writes.

    ``body`` is stored as given (a compressed body stays compressed, with its
    sysFlag bits). The 0x10/0x20 sysFlag bits are set from the address family of
    ``born_host`` and ``store_host`` so that the record always parses.
    ``body_crc`` defaults to the broker's CRC of ``body``. Raises ValueError for
    a topic over 127 bytes (V1) or properties over 32767 bytes, as the broker does.
    """
    born = host_bytes(born_host)
    store = host_bytes(store_host)
    sys_flag &= ~V6_FLAGS
    if len(born) == 20:
        sys_flag |= BORN_V6
    if len(store) == 20:
        sys_flag |= STORE_V6
    topic_bytes = topic.encode("utf-8")
    if magic_code == MAGIC_CODE_V1:
        if len(topic_bytes) > 127:
            raise ValueError(f"topic of {len(topic_bytes)} bytes exceeds 127 (V1 record)")
        topic_len = bytes((len(topic_bytes),))
    elif magic_code == MAGIC_CODE_V2:
        if len(topic_bytes) > 0x7FFF:
            raise ValueError(f"topic of {len(topic_bytes)} bytes exceeds 32767 (V2 record)")
        topic_len = _I16.pack(len(topic_bytes))
    else:
        raise ValueError(f"unknown magic code {magic_code}")
    props = properties_raw.encode("utf-8")
    if len(props) > PROPERTIES_MAX:
        raise ValueError(f"properties of {len(props)} bytes exceed {PROPERTIES_MAX}")
    prefix = PREFIXES[sys_flag >> 4 & 3]
    total = prefix.size + len(body) + len(topic_len) + len(topic_bytes) + 2 + len(props)
    head = prefix.pack(
        total,
        magic_code,
        (zlib.crc32(body) & 0x7FFFFFFF) if body_crc is None else body_crc,
        queue_id,
        flag,
        queue_offset,
        commit_log_offset,
        sys_flag,
        born_timestamp,
        born,
        store_timestamp,
        store,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, topic_len, topic_bytes, _I16.pack(len(props)), props))


def patch_stored_message(
    buf: bytearray | memoryview,
    offset: int = 0,
    *,
    queue_offset: int | None = None,
    commit_log_offset: int | None = None,
    store_timestamp: int | None = None,
) -> None:
    """Overwrite the fields the broker fixes only when it appends the record.

    Java's CommitLog encodes a record once and patches these three in place under
    its put lock; this does the same to an encoded record in ``buf``.
    """
    if queue_offset is not None:
        _I64.pack_into(buf, offset + QUEUE_OFFSET_OFFSET, queue_offset)
    if commit_log_offset is not None:
        _I64.pack_into(buf, offset + COMMIT_LOG_OFFSET_OFFSET, commit_log_offset)
    if store_timestamp is not None:
        (sys_flag,) = _I32.unpack_from(buf, offset + SYS_FLAG_OFFSET)
        _I64.pack_into(buf, offset + store_timestamp_offset(sys_flag), store_timestamp)


# ----------------------------------------------------------------------------- batches


class BatchEntry(NamedTuple):
    """One message of a SEND_BATCH_MESSAGE body."""

    flag: int
    body: bytes
    properties_raw: str


def encode_batch(messages: Sequence[Message]) -> bytes:
    """A SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages).

    Per message: TOTALSIZE:i32, MAGICCODE:i32 = 0, BODYCRC:i32 = 0, FLAG:i32,
    body length:i32 + body, properties length:i16 + properties. The topic travels
    in the request header; the broker computes the CRCs.
    """
    parts: list[bytes] = []
    for index, message in enumerate(messages):
        props = java_properties_string(message.properties).encode("utf-8")
        if len(props) > PROPERTIES_MAX:
            raise ValueError(
                f"batch message #{index}: properties of {len(props)} bytes exceed {PROPERTIES_MAX}"
            )
        body = message.body
        total = _BATCH_HEAD.size + len(body) + 2 + len(props)
        parts += (
            _BATCH_HEAD.pack(total, 0, 0, message.flag, len(body)),
            body,
            _I16.pack(len(props)),
            props,
        )
    return b"".join(parts)


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """The messages of a SEND_BATCH_MESSAGE body: (flag, body, properties text) each."""
    data = body if isinstance(body, bytes) else bytes(body)
    end = len(data)
    out: list[BatchEntry] = []
    off = 0
    index = 0
    minimum = _BATCH_HEAD.size + 2
    while off < end:
        if end - off < minimum:
            raise FrameError(
                f"malformed batch message #{index} at body offset {off}: only {end - off} "
                f"bytes left, an entry has >= {minimum}"
            )
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, off)
        stop = off + total
        if total < minimum or stop > end:
            raise FrameError(
                f"malformed batch message #{index} at body offset {off}: TOTALSIZE {total} "
                f"does not fit the {end - off} bytes left"
            )
        pos = off + _BATCH_HEAD.size
        if body_len < 0 or pos + body_len + 2 > stop:
            raise FrameError(
                f"malformed batch message #{index} at body offset {off}: body length "
                f"{body_len} does not fit the entry of {total} bytes"
            )
        payload = data[pos : pos + body_len]
        pos += body_len
        (props_len,) = _I16.unpack_from(data, pos)
        pos += 2
        if pos + props_len != stop:
            raise FrameError(
                f"malformed batch message #{index} at body offset {off}: properties length "
                f"{props_len} ends the entry at {pos + props_len - off}, but TOTALSIZE is {total}"
            )
        out.append(BatchEntry(flag, payload, data[pos:stop].decode("utf-8", "replace")))
        off = stop
        index += 1
    return out
