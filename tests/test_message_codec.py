"""Stored message records, batch bodies and client ids: golden bytes built by hand."""

from __future__ import annotations

import datetime as dt
import importlib.util
import ipaddress
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.model.errors import FrameError
from rmqk.model.message import Message, MessageExt, decode_offset_msg_id, offset_msg_id
from rmqk.wire import message_codec as mc
from rmqk.wire.message_codec import (
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    ZLIB_COMPRESSED_SYS_FLAG,
    BatchEntry,
    decode_batch,
    decode_message,
    decode_messages,
    encode_batch,
    encode_stored_message,
    maybe_compress,
    patch_stored_message,
    record_total_size,
)
from rmqk.wire.uniq_id import UniqIdGenerator, uniq_id_timestamp

pytestmark = pytest.mark.timeout(60)

PROPS = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x017F00000100011234ABCD000100020003"


def ip_bytes(host: str) -> bytes:
    ip, _, port = host.rpartition(":")
    return ipaddress.ip_address(ip.strip("[]")).packed + struct.pack(">i", int(port))


def canonical(host: str) -> str:
    """``ip:port`` with a compressed, bracketed IPv6 address."""
    ip, _, port = host.rpartition(":")
    address = ipaddress.ip_address(ip.strip("[]"))
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def hand_record(
    *,
    topic: bytes = b"TopicTest",
    body: bytes = b"hello",
    props: bytes = PROPS.encode(),
    sys_flag: int = 0,
    born: str = "10.0.0.1:50123",
    store: str = "10.0.0.2:10911",
    magic: int = MAGIC_CODE_V1,
    crc: int | None = None,
    total_delta: int = 0,
) -> bytes:
    """A stored record laid out field by field from the MessageDecoder table."""
    topic_len = (
        struct.pack(">b", len(topic)) if magic == MAGIC_CODE_V1 else struct.pack(">h", len(topic))
    )
    rest = (
        struct.pack(">i", crc if crc is not None else zlib.crc32(body) & 0x7FFFFFFF)
        + struct.pack(">i", 3)  # QUEUEID
        + struct.pack(">i", 7)  # FLAG
        + struct.pack(">q", 1234)  # QUEUEOFFSET
        + struct.pack(">q", 987654321)  # PHYSICALOFFSET
        + struct.pack(">i", sys_flag)
        + struct.pack(">q", 1_700_000_000_000)  # BORNTIMESTAMP
        + ip_bytes(born)
        + struct.pack(">q", 1_700_000_000_123)  # STORETIMESTAMP
        + ip_bytes(store)
        + struct.pack(">i", 2)  # RECONSUMETIMES
        + struct.pack(">q", 0)  # PREPARED TRANSACTION OFFSET
        + struct.pack(">i", len(body))
        + body
        + topic_len
        + topic
        + struct.pack(">h", len(props))
        + props
    )
    total = 8 + len(rest)
    return struct.pack(">ii", total + total_delta, magic) + rest


# The fields of hand_record()'s message, as keyword arguments of the encoder and MessageExt.
HAND_FIELDS: dict[str, object] = dict(
    topic="TopicTest",
    body=b"hello",
    flag=7,
    queue_id=3,
    queue_offset=1234,
    commit_log_offset=987654321,
    born_timestamp=1_700_000_000_000,
    born_host="10.0.0.1:50123",
    store_timestamp=1_700_000_000_123,
    store_host="10.0.0.2:10911",
    reconsume_times=2,
    properties_raw=PROPS,
)


def encode_like_hand(**overrides: object) -> bytes:
    args: dict[str, object] = {**HAND_FIELDS, **overrides}
    return encode_stored_message(**args)  # type: ignore[arg-type]


# --------------------------------------------------------------------- golden records


def test_ipv4_record_golden_bytes_and_decode() -> None:
    expected = hand_record()
    assert len(expected) == 88 + 5 + 1 + 9 + 2 + len(PROPS)
    assert encode_like_hand() == expected
    (m,) = decode_messages(expected, "broker-a")
    assert m.store_size == len(expected)
    assert m.body_crc == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert (m.queue_id, m.flag, m.queue_offset, m.commit_log_offset) == (3, 7, 1234, 987654321)
    assert (m.sys_flag, m.reconsume_times, m.prepared_transaction_offset) == (0, 2, 0)
    assert (m.born_timestamp, m.store_timestamp) == (1_700_000_000_000, 1_700_000_000_123)
    assert (m.born_host, m.store_host) == ("10.0.0.1:50123", "10.0.0.2:10911")
    assert (m.topic, m.body, m.broker_name) == ("TopicTest", b"hello", "broker-a")
    assert m.properties_raw == PROPS
    assert m.tags == "TagA"
    assert m.keys == "k1 k2"
    assert m.msg_id == "7F00000100011234ABCD000100020003"
    # The offset id is the store host and the 8 bytes at record offset 28, in hex.
    assert m.offset_msg_id == (ip_bytes("10.0.0.2:10911") + expected[28:36]).hex().upper()


@pytest.mark.parametrize(
    ("sys_flag", "born", "store", "prefix"),
    [
        (0x10, "[2001:db8::1]:50123", "10.0.0.2:10911", 100),
        (0x20, "10.0.0.1:50123", "[fe80::abcd]:10911", 100),
        (0x30, "[::1]:1", "[2001:db8:0:0:1::ff]:10911", 112),
    ],
)
def test_ipv6_host_records(sys_flag: int, born: str, store: str, prefix: int) -> None:
    expected = hand_record(sys_flag=sys_flag, born=born, store=store)
    assert len(expected) == prefix + 5 + 1 + 9 + 2 + len(PROPS)
    # The encoder derives the IPv6 bits from the hosts.
    assert encode_like_hand(born_host=born, store_host=store) == expected
    m, stop = decode_message(expected)
    assert stop == len(expected)
    assert m.sys_flag == sys_flag
    assert (m.born_host, m.store_host) == (canonical(born), canonical(store))
    assert (m.topic, m.body, m.queue_offset) == ("TopicTest", b"hello", 1234)
    msg_id = m.offset_msg_id
    assert len(msg_id) == (56 if sys_flag & 0x20 else 32)
    assert decode_offset_msg_id(msg_id) == (m.store_host, 987654321)
    assert offset_msg_id(m.store_host, 987654321) == msg_id


def test_ipv6_host_text_is_bracketed_and_compressed() -> None:
    record = hand_record(sys_flag=0x30, born="[2001:db8::1]:7", store="[::1]:10911")
    (m,) = decode_messages(record)
    assert (m.born_host, m.store_host) == ("[2001:db8::1]:7", "[::1]:10911")


def test_v2_magic_record_has_a_two_byte_topic_length() -> None:
    topic = "T" * 200
    expected = hand_record(topic=topic.encode(), magic=MAGIC_CODE_V2)
    assert struct.unpack_from(">i", expected, 4)[0] == -626843477
    assert encode_like_hand(topic=topic, magic_code=MAGIC_CODE_V2) == expected
    (m,) = decode_messages(expected)
    assert m.topic == topic
    assert m.properties_raw == PROPS


def test_v1_magic_is_0xdaa320a7() -> None:
    assert struct.pack(">i", MAGIC_CODE_V1) == bytes.fromhex("DAA320A7")
    assert struct.pack(">i", MAGIC_CODE_V2) == bytes.fromhex("DAA320AB")


@pytest.mark.parametrize("sys_flag", [0x1, ZLIB_COMPRESSED_SYS_FLAG])
def test_compressed_body_is_inflated(sys_flag: int) -> None:
    plain = b"compress me " * 1000
    stored = zlib.compress(plain, 5)
    record = hand_record(body=stored, sys_flag=sys_flag)
    (m,) = decode_messages(record)
    assert m.body == plain
    assert m.sys_flag == sys_flag
    assert m.body_crc == zlib.crc32(stored) & 0x7FFFFFFF
    (raw,) = decode_messages(record, decompress=False)
    assert raw.body == stored


def test_unsupported_or_broken_compression_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="does not inflate"):
        decode_messages(hand_record(body=b"not zlib", sys_flag=0x1))
    with pytest.raises(FrameError, match="unknown compression type 4"):
        decode_messages(hand_record(body=b"x", sys_flag=0x401))
    if importlib.util.find_spec("lz4") is None:
        with pytest.raises(FrameError, match="install the optional 'lz4'"):
            decode_messages(hand_record(body=b"x", sys_flag=0x101))
    if importlib.util.find_spec("zstandard") is None:
        with pytest.raises(FrameError, match="install the optional 'zstandard'"):
            decode_messages(hand_record(body=b"x", sys_flag=0x201))


def test_many_records_with_changing_topics_and_hosts() -> None:
    specs = [
        ("A", "1.1.1.1:1", "9.9.9.9:10911", 0),
        ("A", "1.1.1.2:1", "9.9.9.9:10911", 0),
        ("Bb", "1.1.1.1:1", "9.9.9.9:10912", 0),
        ("Bb", "[::2]:5", "[::3]:10911", 0x30),
        ("A", "1.1.1.1:1", "9.9.9.9:10911", 0),
        ("A", "1.1.1.1:1", "9.9.9.9:10911", 0),
    ]
    body = b"".join(
        hand_record(topic=t.encode(), born=b, store=s, sys_flag=f, body=bytes([i]))
        for i, (t, b, s, f) in enumerate(specs)
    )
    messages = decode_messages(memoryview(body), "bk")
    assert [(m.topic, m.born_host, m.store_host, m.body) for m in messages] == [
        (t, b, s, bytes([i])) for i, (t, b, s, _) in enumerate(specs)
    ]
    assert all(m.broker_name == "bk" for m in messages)
    assert decode_messages(b"") == []


def test_decoded_message_equals_one_built_with_the_public_constructor() -> None:
    record = hand_record()
    (m,) = decode_messages(record, "b")
    built = MessageExt(  # type: ignore[arg-type]
        **HAND_FIELDS,
        sys_flag=0,
        prepared_transaction_offset=0,
        body_crc=zlib.crc32(b"hello") & 0x7FFFFFFF,
        store_size=len(record),
        broker_name="b",
    )
    assert type(m) is MessageExt
    # Every slot is filled (the decoder sets them directly, bypassing __init__); the
    # raw properties stay bytes until read.
    for name in MessageExt.__slots__:
        value = getattr(m, name)
        if name == "_props_raw":
            assert isinstance(value, bytes)
            value = value.decode()
        assert value == getattr(built, name), name
    assert m.properties_raw == PROPS  # as received, while unparsed
    assert m == built


def test_decode_message_steps_by_total_size() -> None:
    first = hand_record(body=b"1")
    second = hand_record(body=b"22", topic=b"Other")
    buf = first + second
    m1, nxt = decode_message(buf)
    m2, end = decode_message(buf, nxt, "bk")
    assert (m1.body, nxt) == (b"1", len(first))
    assert (m2.body, m2.topic, m2.broker_name, end) == (b"22", "Other", "bk", len(buf))
    with pytest.raises(FrameError, match="no record there"):
        decode_message(buf, len(buf))


# --------------------------------------------------------------------- malformed


def set_i32(record: bytes, at: int, value: int) -> bytes:
    return record[:at] + struct.pack(">i", value) + record[at + 4 :]


GOOD = hand_record()
BODY_LEN_AT = 84


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (GOOD[:50], "record #0 at body offset 0: record truncated"),
        (GOOD + GOOD[:60], f"record #1 at body offset {len(GOOD)}: record truncated"),
        (GOOD + GOOD[:-1], f"record #1 at body offset {len(GOOD)}: TOTALSIZE {len(GOOD)}"),
        (set_i32(GOOD, 0, 10), "TOTALSIZE 10 does not fit"),
        (set_i32(GOOD, 0, -5), "TOTALSIZE -5 does not fit"),
        (set_i32(GOOD, 4, 0x12345678), "unknown magic code 0x12345678"),
        (set_i32(GOOD, BODY_LEN_AT, -1), "body length -1 is negative"),
        (set_i32(GOOD, BODY_LEN_AT, 6), "length runs past the end"),
        (set_i32(GOOD, BODY_LEN_AT, 10**6), "record #0 at body offset 0"),
        (hand_record(total_delta=1) + b"\x00", "but TOTALSIZE is"),
        (hand_record(total_delta=-1), "but TOTALSIZE is"),
        (GOOD[:93] + b"\x80" + GOOD[94:], "V1 topic length -128 is negative"),
        (
            hand_record(magic=MAGIC_CODE_V2)[:93]
            + b"\xff\xfe"
            + hand_record(magic=MAGIC_CODE_V2)[95:],
            "topic length -2",
        ),
        (GOOD[: len(GOOD) - len(PROPS) - 2] + b"\xff\xff" + PROPS.encode(), "properties length -1"),
        (set_i32(GOOD, 36, 0x30), "record #0"),
        (set_i32(GOOD, 52, -1), "host port -1 is outside 0..65535"),
        (set_i32(GOOD, 68, 65536), "host port 65536 is outside 0..65535"),
    ],
)
def test_malformed_records_raise_frame_error(body: bytes, fragment: str) -> None:
    with pytest.raises(FrameError, match="malformed message record") as info:
        decode_messages(body)
    assert fragment in str(info.value)


def test_java_skips_nothing_we_accept_non_utf8_text_with_replacement() -> None:
    (m,) = decode_messages(hand_record(topic=b"T\xff", props=b"K\x01\xfe"))
    assert m.topic == "T\ufffd"
    assert m.properties == {"K": "\ufffd"}


# --------------------------------------------------------------------- encode helpers


def test_patch_fields_in_place() -> None:
    for sys_flag, born in ((0, "10.0.0.1:50123"), (0x10, "[::1]:50123")):
        record = bytearray(hand_record(sys_flag=sys_flag, born=born))
        assert record_total_size(record) == len(record)
        patch_stored_message(record, queue_offset=5, commit_log_offset=6, store_timestamp=77)
        (m,) = decode_messages(bytes(record))
        assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (5, 6, 77)
        assert m.born_timestamp == 1_700_000_000_000
        assert m.body == b"hello"
        assert mc.store_timestamp_offset(sys_flag) == (56 if sys_flag == 0 else 68)


def test_patch_inside_a_larger_buffer_and_field_offsets() -> None:
    record = hand_record()
    buf = bytearray(b"\x00" * 10 + record)
    patch_stored_message(buf, 10, queue_offset=99)
    assert struct.unpack_from(">q", buf, 10 + 20)[0] == 99
    assert record_total_size(buf, 10) == len(record)
    assert (mc.QUEUE_OFFSET_OFFSET, mc.COMMIT_LOG_OFFSET_OFFSET, mc.SYS_FLAG_OFFSET) == (20, 28, 36)
    assert (mc.prefix_size(0), mc.prefix_size(0x10), mc.prefix_size(0x30)) == (88, 100, 112)
    assert mc.reconsume_times_offset(0) == 72
    assert mc.store_host_offset(0x10) == 76


def test_encode_refuses_what_the_broker_refuses() -> None:
    with pytest.raises(ValueError, match="exceeds 127"):
        encode_stored_message(topic="t" * 128, body=b"")
    assert decode_messages(encode_stored_message(topic="t" * 127, body=b""))[0].topic == "t" * 127
    with pytest.raises(ValueError, match="exceed 32767"):
        encode_stored_message(topic="t", body=b"", properties_raw="k\x01" + "v" * 32766)
    with pytest.raises(ValueError, match="not 'ip:port'"):
        encode_stored_message(topic="t", body=b"", born_host="localhost:1")
    with pytest.raises(ValueError, match="not 'ip:port'"):
        encode_stored_message(topic="t", body=b"", store_host="1.2.3.4")
    with pytest.raises(ValueError, match="out of range"):
        encode_stored_message(topic="t", body=b"", store_host="1.2.3.4:70000")


def test_explicit_body_crc_and_compressed_flag_are_stored_as_given() -> None:
    data, compressed = maybe_compress(b"a" * 5000)
    assert compressed
    record = encode_stored_message(
        topic="t", body=data, sys_flag=ZLIB_COMPRESSED_SYS_FLAG, body_crc=42
    )
    assert struct.unpack_from(">i", record, 8)[0] == 42
    (m,) = decode_messages(record)
    assert m.body == b"a" * 5000
    assert m.sys_flag == ZLIB_COMPRESSED_SYS_FLAG


def test_maybe_compress_threshold_and_level() -> None:
    small = b"x" * 4095
    assert maybe_compress(small) == (small, False)
    big = b"x" * 4096
    data, compressed = maybe_compress(big)
    assert compressed
    assert data == zlib.compress(big, 5)
    assert zlib.decompress(data) == big
    assert maybe_compress(b"abc", threshold=3)[1] is True


def test_java_properties_string_has_no_trailing_separator() -> None:
    text = mc.java_properties_string({"A": "1", "B": "2", "": "x", "C": ""})
    assert text == "A\x011\x02B\x012"


# --------------------------------------------------------------------- batches


def hand_batch_entry(flag: int, body: bytes, props: bytes) -> bytes:
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", total, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


def test_batch_golden_bytes_and_decode() -> None:
    messages = [
        Message("T", b"one", tags="A", flag=1),
        Message("T", b"", keys=["k1", "k2"], properties={"UNIQ_KEY": "ID2"}),
    ]
    expected = hand_batch_entry(1, b"one", b"TAGS\x01A") + hand_batch_entry(
        0, b"", b"UNIQ_KEY\x01ID2\x02KEYS\x01k1 k2"
    )
    assert encode_batch(messages) == expected
    assert decode_batch(expected) == [
        BatchEntry(1, b"one", "TAGS\x01A"),
        BatchEntry(0, b"", "UNIQ_KEY\x01ID2\x02KEYS\x01k1 k2"),
    ]
    assert encode_batch([]) == b""
    assert decode_batch(b"") == []


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"\x00" * 5, "batch message #0 at body offset 0: only 5 bytes"),
        (hand_batch_entry(0, b"ab", b"")[:-1], "TOTALSIZE 24 does not fit the 23"),
        (set_i32(hand_batch_entry(0, b"ab", b""), 16, 9), "body length 9"),
        (set_i32(hand_batch_entry(0, b"ab", b""), 16, -1), "body length -1"),
        (set_i32(hand_batch_entry(0, b"ab", b"p"), 0, 24), "but TOTALSIZE is 24"),
        (hand_batch_entry(0, b"", b"") + b"\x00" * 30, "batch message #1 at body offset 22"),
    ],
)
def test_malformed_batches_raise_frame_error(body: bytes, fragment: str) -> None:
    with pytest.raises(FrameError, match="malformed batch message") as info:
        decode_batch(body)
    assert fragment in str(info.value)


def test_batch_properties_limit() -> None:
    with pytest.raises(ValueError, match="batch message #1"):
        encode_batch([Message("T", b""), Message("T", b"", properties={"k": "v" * 40000})])


# --------------------------------------------------------------------- uniq ids


def test_uniq_id_layout() -> None:
    now = int(dt.datetime(2026, 3, 15, 12, 0, 0).timestamp() * 1000)
    month_start = int(dt.datetime(2026, 3, 1).timestamp() * 1000)
    gen = UniqIdGenerator(
        ip=bytes([192, 168, 0, 7]), pid=0x12345, loader_hash=-2, clock_ms=lambda: now
    )
    first, second = gen.create(), gen.create()
    diff = now - month_start
    assert first == f"C0A800072345FFFFFFFE{diff:08X}0000"
    assert second.endswith("0001")
    assert len(first) == 32
    assert uniq_id_timestamp(first, now_ms=now + 5000) == now


def test_uniq_id_counter_wraps_at_16_bits_and_month_rolls_over() -> None:
    clock = [int(dt.datetime(2026, 1, 31, 23, 59, 59).timestamp() * 1000)]
    gen = UniqIdGenerator(ip=b"\x7f\x00\x00\x01", pid=1, loader_hash=1, clock_ms=lambda: clock[0])
    for _ in range(0xFFFF):
        gen.create()
    assert gen.create().endswith("FFFF")
    assert gen.create().endswith("0000")
    clock[0] = int(dt.datetime(2026, 2, 1, 0, 0, 1).timestamp() * 1000)
    assert gen.create()[20:28] == f"{1000:08X}"


def test_uniq_id_late_in_a_long_month_wraps_like_java_int() -> None:
    now = int(dt.datetime(2026, 3, 31, 12, 0, 0).timestamp() * 1000)
    diff = now - int(dt.datetime(2026, 3, 1).timestamp() * 1000)
    assert diff > 2**31
    gen = UniqIdGenerator(ip=b"\x7f\x00\x00\x01", pid=1, loader_hash=1, clock_ms=lambda: now)
    assert gen.create()[20:28] == f"{diff & 0xFFFFFFFF:08X}"


def test_uniq_id_ipv6_and_time_from_last_month() -> None:
    created = int(dt.datetime(2026, 4, 20, 8, 0, 0).timestamp() * 1000)
    gen = UniqIdGenerator(ip=bytes(range(16)), pid=1, loader_hash=1, clock_ms=lambda: created)
    uid = gen.create()
    assert len(uid) == 56
    assert uid.startswith(bytes(range(16)).hex().upper())
    later = int(dt.datetime(2026, 5, 3).timestamp() * 1000)
    assert uniq_id_timestamp(uid, now_ms=later) == created
    with pytest.raises(ValueError, match="not a client message id"):
        uniq_id_timestamp("XYZ")
    with pytest.raises(ValueError, match="16 or 28"):
        uniq_id_timestamp("00" * 10)


def test_default_generator_ids_are_unique_and_hex() -> None:
    ids = {mc.create_uniq_id() for _ in range(1000)}
    assert len(ids) == 1000
    for uid in ids:
        assert len(uid) in (32, 56)
        assert uid == uid.upper()
        bytes.fromhex(uid)


# --------------------------------------------------------------------- round trips

safe_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=12
)
props_strategy = st.dictionaries(safe_text, safe_text, max_size=5)
ipv4 = st.builds(
    lambda b, p: f"{ipaddress.IPv4Address(b)}:{p}",
    st.binary(min_size=4, max_size=4),
    st.integers(0, 65535),
)
ipv6 = st.builds(
    lambda b, p: f"[{ipaddress.IPv6Address(b)}]:{p}",
    st.binary(min_size=16, max_size=16),
    st.integers(0, 65535),
)
hosts = st.one_of(ipv4, ipv6)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def stored_messages(draw: st.DrawFn) -> dict[str, object]:
    magic = draw(st.sampled_from([MAGIC_CODE_V1, MAGIC_CODE_V2]))
    topic = draw(
        st.text(st.characters(codec="utf-8"), max_size=40).filter(
            lambda t: len(t.encode()) <= (127 if magic == MAGIC_CODE_V1 else 300)
        )
    )
    return {
        "topic": topic,
        "body": draw(st.binary(max_size=200)),
        "flag": draw(int32),
        "queue_id": draw(int32),
        "queue_offset": draw(int64),
        "commit_log_offset": draw(int64),
        # Bit 0 (compressed) is left clear: random bytes are not a zlib stream.
        "sys_flag": draw(int32) & ~0x31,
        "born_timestamp": draw(int64),
        "born_host": draw(hosts),
        "store_timestamp": draw(int64),
        "store_host": draw(hosts),
        "reconsume_times": draw(int32),
        "prepared_transaction_offset": draw(int64),
        "properties_raw": mc.java_properties_string(draw(props_strategy)),
        "magic_code": magic,
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(stored_messages(), min_size=1, max_size=4), st.text(max_size=8))
def test_stored_record_round_trip(records: list[dict[str, object]], broker: str) -> None:
    encoded = [encode_stored_message(**r) for r in records]  # type: ignore[arg-type]
    decoded = decode_messages(b"".join(encoded), broker)
    assert len(decoded) == len(records)
    for m, r, raw in zip(decoded, records, encoded, strict=True):
        assert m.store_size == len(raw)
        for key in (
            "topic",
            "body",
            "flag",
            "queue_id",
            "queue_offset",
            "commit_log_offset",
            "born_timestamp",
            "store_timestamp",
            "reconsume_times",
            "prepared_transaction_offset",
        ):
            assert getattr(m, key) == r[key], key
        assert m.properties_raw == r["properties_raw"]
        assert m.sys_flag & ~0x30 == r["sys_flag"]
        assert m.born_host == r["born_host"]
        assert m.store_host == r["store_host"]
        assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
        assert m.broker_name == broker
        assert decode_offset_msg_id(m.offset_msg_id) == (m.store_host, m.commit_log_offset)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(int32, st.binary(max_size=100), props_strategy), min_size=0, max_size=5))
def test_batch_round_trip(entries: list[tuple[int, bytes, dict[str, str]]]) -> None:
    messages = [Message("T", body, flag=flag, properties=props) for flag, body, props in entries]
    decoded = decode_batch(encode_batch(messages))
    assert [(e.flag, e.body) for e in decoded] == [(f, b) for f, b, _ in entries]
    assert [
        dict(p.split("\x01", 1) for p in e.properties_raw.split("\x02") if p) for e in decoded
    ] == [props for _, _, props in entries]


def test_decode_message_from_a_bytearray_copies_one_record_and_reports_real_offsets() -> None:
    good = hand_record(body=b"1")
    bad = set_i32(hand_record(), 4, 0)
    buf = bytearray(b"\x00" * 7 + good + bad)
    m, nxt = decode_message(buf, 7)
    assert (m.body, nxt) == (b"1", 7 + len(good))
    with pytest.raises(FrameError, match=f"record #0 at body offset {nxt}: unknown magic code"):
        decode_message(memoryview(buf), nxt)


def test_queue_bounds_reach_the_properties_whether_parsed_before_or_after() -> None:
    from rmqk.engine.pull import stamp_queue_offsets

    lazy, eager = decode_messages(hand_record() + hand_record(), "b")
    assert eager.tags == "TagA"  # parsed before the stamp
    stamp_queue_offsets([lazy, eager], 5, 1234)
    for m in (lazy, eager):
        assert m.properties["MIN_OFFSET"] == "5"
        assert m.properties["MAX_OFFSET"] == "1234"
        assert m.properties["TAGS"] == "TagA"
        assert "MAX_OFFSET\x011234" in m.properties_raw
    fresh = decode_messages(hand_record(), "b")[0]
    stamp_queue_offsets([fresh], 0, 9)
    assert "MIN_OFFSET\x010" in fresh.properties_raw  # read raw without parsing first


def test_properties_text_is_the_received_bytes_until_parsed() -> None:
    (m,) = decode_messages(hand_record(), "b")
    assert m.properties_text() == PROPS.encode()
    m.properties["EXTRA"] = "1"
    assert m.properties_text() == m.properties_raw
    assert "EXTRA\x011\x02" in m.properties_text()
