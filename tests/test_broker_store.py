"""The embedded broker's message store: puts, pulls (every GetMessageStatus), lookups,
segments, batches, delay levels, consumer offsets and topic configs."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqk.model import java_string_hash
from rmqk.model.message import MessageExt, offset_msg_id
from rmqk.plugins.broker.store import (
    SCHEDULE_TOPIC,
    GetMessageStatus,
    MessageStore,
    PutMessageStatus,
    PutResult,
    StoreError,
    TopicConfig,
    parse_delay_levels,
)
from rmqk.plugins.broker.store.consumequeue import ENTRY
from rmqk.plugins.broker.store.records import BLANK_MAGIC
from rmqk.wire.message_codec import BatchEntry, decode_messages

pytestmark = pytest.mark.timeout(60)

SEGMENT = 64 * 1024
MAX_MESSAGE = 16 * 1024


def make_store(root: Path, **options: Any) -> MessageStore:
    options.setdefault("segment_size", SEGMENT)
    options.setdefault("max_message_size", MAX_MESSAGE)
    options.setdefault("cq_entries_per_file", 1000)
    options.setdefault("store_host", "127.0.0.1:10911")
    return MessageStore(root, **options)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = make_store(tmp_path / "store")
    s.open()
    yield s
    s.close()


def props_of(**pairs: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in pairs.items())


def put_batch(
    store: MessageStore, messages: list[BatchEntry], *, queue_id: int = 0, born: int = 5
) -> list[PutResult]:
    """A batch put to topic B, as a client at 10.0.0.1 sends one."""
    return store.put_messages_batch(
        topic="B",
        queue_id=queue_id,
        messages=messages,
        sys_flag=0,
        born_timestamp=born,
        born_host="10.0.0.1:1",
    )


def put(
    store: MessageStore,
    topic: str = "T",
    queue_id: int = 0,
    body: bytes = b"hello",
    *,
    tags: str | None = None,
    extra: dict[str, str] | None = None,
    **fields: Any,
) -> PutResult:
    pairs = dict(extra or {})
    if tags is not None:
        pairs["TAGS"] = tags
    fields.setdefault("flag", 0)
    fields.setdefault("sys_flag", 0)
    fields.setdefault("born_timestamp", 1_700_000_000_000)
    fields.setdefault("born_host", "10.1.2.3:40000")
    result = store.put_message(
        topic=topic, queue_id=queue_id, body=body, properties_raw=props_of(**pairs), **fields
    )
    return result


def decode(records: tuple[bytes, ...]) -> list[MessageExt]:
    return decode_messages(b"".join(records))


# ------------------------------------------------------------------ put and get


def test_put_then_get_returns_the_stored_record(store: MessageStore) -> None:
    result = put(
        store,
        body=b"payload",
        tags="TagA",
        extra={"KEYS": "k1", "UNIQ_KEY": "U1"},
        flag=7,
        reconsume_times=2,
    )
    assert result.ok and result.error is None and result.status is PutMessageStatus.PUT_OK
    assert (result.queue_offset, result.commit_log_offset) == (0, 0)
    assert result.msg_id == offset_msg_id("127.0.0.1:10911", 0)
    assert abs(result.store_timestamp - time.time() * 1000) < 60_000

    got = store.get_messages("T", 0, 0, 32)
    assert got.status is GetMessageStatus.FOUND
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (1, 0, 1)
    assert got.total_size == result.size == len(got.records[0])
    (msg,) = decode(got.records)
    assert msg.topic == "T" and msg.queue_id == 0 and msg.queue_offset == 0
    assert msg.body == b"payload" and msg.flag == 7 and msg.reconsume_times == 2
    assert msg.commit_log_offset == 0 and msg.store_size == result.size
    assert msg.store_timestamp == result.store_timestamp
    assert msg.born_timestamp == 1_700_000_000_000 and msg.born_host == "10.1.2.3:40000"
    assert msg.store_host == "127.0.0.1:10911"
    assert msg.body_crc == zlib.crc32(b"payload") & 0x7FFFFFFF
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "U1"}
    assert msg.offset_msg_id == result.msg_id
    assert store.look_message(result.commit_log_offset) == got.records[0]


def test_queue_offsets_are_per_queue_and_commit_offsets_are_global(store: MessageStore) -> None:
    results = [put(store, queue_id=i % 3, body=b"m%d" % i) for i in range(9)]
    assert [r.queue_offset for r in results] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    offsets = [r.commit_log_offset for r in results]
    assert offsets == sorted(offsets)
    assert all(
        b.commit_log_offset == a.commit_log_offset + a.size for a, b in itertools.pairwise(results)
    )
    assert store.queue_ids("T") == [0, 1, 2]
    assert store.queue_ids("nothing") == []
    got = store.get_messages("T", 1, 0, 32)
    assert [m.body for m in decode(got.records)] == [b"m1", b"m4", b"m7"]
    assert [store.max_offset("T", q) for q in range(3)] == [3, 3, 3]
    assert store.max_offset("T", 9) == 0 and store.min_offset("T", 9) == 0


def test_ipv6_hosts_set_the_flags_and_parse(tmp_path: Path) -> None:
    store = make_store(tmp_path / "v6", store_host="[::1]:10911")
    with store:
        result = put(store, born_host="[fe80::1]:4000")
        (msg,) = decode(store.get_messages("T", 0, 0, 1).records)
        assert msg.sys_flag & 0x30 == 0x30
        assert msg.born_host == "[fe80::1]:4000" and msg.store_host == "[::1]:10911"
        assert result.msg_id == offset_msg_id("[::1]:10911", 0) and len(result.msg_id) == 56


def test_get_caps_count_and_bytes_but_always_returns_one(store: MessageStore) -> None:
    for i in range(50):
        put(store, body=bytes([i]) * 1000)
    got = store.get_messages("T", 0, 0, 32)
    assert len(got.records) == 32 and got.next_begin_offset == 32

    size = len(got.records[0])
    got = store.get_messages("T", 0, 0, 32, max_total_bytes=3 * size + 10)
    assert len(got.records) == 3 and got.next_begin_offset == 3 and got.total_size == 3 * size

    # The first message is returned even when alone it exceeds the byte cap.
    got = store.get_messages("T", 0, 5, 32, max_total_bytes=10)
    assert got.status is GetMessageStatus.FOUND
    assert len(got.records) == 1 and got.next_begin_offset == 6

    got = store.get_messages("T", 0, 40, 32)
    assert len(got.records) == 10 and got.next_begin_offset == 50


def test_offset_statuses(store: MessageStore) -> None:
    # Java creates a consume queue on lookup: an unknown queue answers like an empty one.
    got = store.get_messages("Unknown", 0, 5, 32)
    assert got.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert (got.next_begin_offset, got.max_offset, got.records) == (0, 0, ())

    for _ in range(3):
        put(store)
    got = store.get_messages("T", 0, 3, 32)
    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (3, 0, 3)

    got = store.get_messages("T", 0, 10, 32)
    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert got.next_begin_offset == 3 and not got.records


def test_tag_filter_skips_and_no_match_advances_a_bounded_scan(store: MessageStore) -> None:
    code_a = java_string_hash("TagA")

    def only_a(code: int) -> bool:
        return code == code_a

    for i in range(10):
        put(store, body=b"%d" % i, tags="TagA" if i % 3 == 0 else "TagB")
    got = store.get_messages("T", 0, 0, 32, tag_filter=only_a)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in decode(got.records)] == [b"0", b"3", b"6", b"9"]
    assert got.next_begin_offset == 10

    # 2000 non-matching entries then one match: each pull looks at 800 entries.
    for _ in range(1990):
        put(store, body=b"b", tags="TagB")
    put(store, body=b"last", tags="TagA")
    got = store.get_messages("T", 0, 10, 32, tag_filter=only_a)
    # offset 10 is in consume queue file 0 (1000 entries a file): the scan stops at 810
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and not got.records
    assert got.next_begin_offset == 810
    got = store.get_messages("T", 0, 810, 32, tag_filter=only_a)
    # ... and never crosses the end of a consume queue file
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and got.next_begin_offset == 1000
    got = store.get_messages("T", 0, 1000, 32, tag_filter=only_a)
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and got.next_begin_offset == 1800
    got = store.get_messages("T", 0, 1800, 32, tag_filter=only_a)
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and got.next_begin_offset == 2000
    got = store.get_messages("T", 0, 2000, 32, tag_filter=only_a)
    assert got.status is GetMessageStatus.FOUND and got.next_begin_offset == 2001
    assert [m.body for m in decode(got.records)] == [b"last"]
    # Asking for more messages than 800 widens the scan to that many entries.
    got = store.get_messages("T", 0, 10, 900, tag_filter=only_a)
    assert got.next_begin_offset == 910


def test_untagged_messages_have_tag_code_zero(store: MessageStore) -> None:
    put(store, body=b"none")
    put(store, body=b"a", tags="TagA")
    seen: list[int] = []
    store.get_messages("T", 0, 0, 32, tag_filter=lambda c: seen.append(c) is None)
    assert seen == [0, java_string_hash("TagA")]


def test_removed_messages_then_too_small(tmp_path: Path) -> None:
    store = make_store(
        tmp_path / "s", segment_size=8192, max_message_size=4096, cq_entries_per_file=10
    )
    with store:
        results = [put(store, body=bytes(500)) for _ in range(100)]
        assert results[-1].commit_log_offset // 8192 >= 5
        assert store.delete_commit_log_before(3 * 8192) == 3
        assert store.commit_log_min_offset == 3 * 8192
        first_kept = next(r for r in results if r.commit_log_offset >= 3 * 8192)
        assert first_kept.queue_offset >= 20
        # The consume queue still points into the deleted segments (Java's window
        # between its two clean services): a scan that meets only removed messages
        # answers MESSAGE_WAS_REMOVING and moves on to the end of the queue file.
        got = store.get_messages("T", 0, 0, 32)
        assert got.status is GetMessageStatus.MESSAGE_WAS_REMOVING and not got.records
        assert got.next_begin_offset == 10
        # A scan that reaches a message still stored returns it.
        start = first_kept.queue_offset - first_kept.queue_offset % 10
        got = store.get_messages("T", 0, start, 32)
        assert got.status is GetMessageStatus.FOUND
        assert decode(got.records)[0].queue_offset == first_kept.queue_offset
        assert store.look_message(0) is None

        files = tmp_path / "s" / "consumequeue" / "T" / "0"
        before = sorted(os.listdir(files))
        assert store.clean_consume_queues() == first_kept.queue_offset // 10
        assert sorted(os.listdir(files)) == before[first_kept.queue_offset // 10 :]
        assert store.min_offset("T", 0) == first_kept.queue_offset
        got = store.get_messages("T", 0, 0, 32)
        assert got.status is GetMessageStatus.OFFSET_TOO_SMALL and not got.records
        assert got.next_begin_offset == got.min_offset == first_kept.queue_offset
        assert store.earliest_store_time("T", 0) == first_kept.store_timestamp


def test_delete_expired_by_age(tmp_path: Path) -> None:
    store = make_store(
        tmp_path / "s", segment_size=8192, max_message_size=4096, cq_entries_per_file=10
    )
    with store:
        for _ in range(40):
            put(store, body=bytes(500))
        segments = len(store.commit_log.segments)
        assert store.delete_expired(3_600_000) == 0
        # everything but the segment being written is older than "now + 1 h - 1 h"
        removed = store.delete_expired(0, now_ms=store.now_ms() + 3_600_000)
        assert removed == segments - 1 and len(store.commit_log.segments) == 1
        low = store.min_offset("T", 0)
        assert low > 0
        assert store.get_messages("T", 0, low, 1).status is GetMessageStatus.FOUND


def test_offset_found_null_when_a_queue_file_vanished(store: MessageStore) -> None:
    # Java answers OFFSET_FOUND_NULL when a consume queue file was deleted before the
    # queue's minimum moved past it (a race between its clean services). Recreate
    # that state by dropping the file from the open queue.
    for _ in range(2500):
        put(store, body=b"x")
    cq = store.consume_queue("T", 0)
    assert cq is not None
    cq.by_number.pop(1)
    got = store.get_messages("T", 0, 1200, 32)
    assert got.status is GetMessageStatus.OFFSET_FOUND_NULL
    assert got.next_begin_offset == 2000 and not got.records


def test_look_message_rejects_offsets_that_are_not_records(store: MessageStore) -> None:
    a = put(store, body=b"first")
    b = put(store, body=b"second")
    assert store.look_message(b.commit_log_offset) == store.get_messages("T", 0, 1, 1).records[0]
    assert store.look_message(a.commit_log_offset + 4) is None
    assert store.look_message(b.commit_log_offset + b.size) is None
    assert store.look_message(-1) is None
    assert store.look_message(10**12) is None


def test_segment_rollover(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = make_store(root, segment_size=4096, max_message_size=2048)
    with store:
        results = [put(store, body=bytes([i]) * (300 + 97 * (i % 7))) for i in range(60)]
        assert all(r.ok for r in results)
        segments = sorted(os.listdir(root / "commitlog"))
        assert len(segments) >= 5
        assert segments[:2] == [f"{0:020d}", f"{4096:020d}"]
        for r in results:
            start = r.commit_log_offset
            assert start // 4096 == (start + r.size + 8 - 1) // 4096, "record crosses a segment"
        firsts = [r for r in results if r.commit_log_offset % 4096 == 0]
        assert len(firsts) == len(segments)
        # The space a record did not fit in is marked BLANK, as Java does.
        prev = results[results.index(firsts[1]) - 1]
        data = (root / "commitlog" / segments[0]).read_bytes()
        end = prev.commit_log_offset + prev.size
        assert struct.unpack_from(">ii", data, end) == (4096 - end, BLANK_MAGIC)
        bodies = [m.body for m in decode(store.get_messages("T", 0, 0, 32).records)]
        bodies += [m.body for m in decode(store.get_messages("T", 0, 32, 32).records)]
        assert bodies == [bytes([i]) * (300 + 97 * (i % 7)) for i in range(60)]
        assert store.stats().segments == len(segments)


def test_invalid_puts_are_refused(store: MessageStore, tmp_path: Path) -> None:
    bad_topic = put(store, topic="a/b")
    assert not bad_topic.ok and bad_topic.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "a/b" in (bad_topic.error or "")
    assert put(store, topic="x" * 128).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert put(store, queue_id=-1).status is PutMessageStatus.MESSAGE_ILLEGAL
    big = put(store, body=bytes(MAX_MESSAGE))
    assert big.status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in (
        big.error or ""
    )
    huge_props = put(store, extra={"K": "v" * 40000})
    assert huge_props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    bad_host = put(store, born_host="nohost")
    assert bad_host.status is PutMessageStatus.MESSAGE_ILLEGAL
    bad_delay = put(store, extra={"DELAY": "soon"})
    assert bad_delay.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_offset("T", 0) == 0 and store.commit_log_max_offset == 0

    closed = make_store(tmp_path / "closed")
    assert put(closed).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flush"):
        MessageStore(tmp_path, flush="sometimes")
    with pytest.raises(ValueError, match="segment_size"):
        MessageStore(tmp_path, segment_size=8192)
    with pytest.raises(ValueError, match="delay level 2"):
        MessageStore(tmp_path, delay_levels="1s soon")


def test_the_store_directory_is_locked(tmp_path: Path, store: MessageStore) -> None:
    other = make_store(tmp_path / "store")
    with pytest.raises(StoreError, match="in use"):
        other.open()


def test_listeners_see_each_dispatch(store: MessageStore) -> None:
    calls: list[tuple[str, int, int]] = []
    store.add_listener(lambda t, q, m: calls.append((t, q, m)))

    def broken(topic: str, queue_id: int, max_offset: int) -> None:
        raise RuntimeError("listener bug")

    store.add_listener(broken)
    put(store, queue_id=2)
    put(store, queue_id=2)
    put_batch(store, [BatchEntry(0, b"1", ""), BatchEntry(0, b"2", "")], queue_id=1, born=1)
    assert calls == [("T", 2, 1), ("T", 2, 2), ("B", 1, 2)]
    store.remove_listener(broken)


def test_batch_is_contiguous_with_consecutive_offsets(store: MessageStore) -> None:
    put(store, topic="B", queue_id=0)
    messages = [
        BatchEntry(i, b"body-%d" % i, props_of(TAGS="TagA", KEYS=f"k{i}")) for i in range(5)
    ]
    results = put_batch(store, messages)
    assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5]
    assert all(r.ok for r in results)
    assert len({r.store_timestamp for r in results}) == 1
    for a, b in itertools.pairwise(results):
        assert b.commit_log_offset == a.commit_log_offset + a.size
    decoded = decode(store.get_messages("B", 0, 1, 32).records)
    assert [(m.flag, m.body, m.keys, m.queue_offset) for m in decoded] == [
        (i, b"body-%d" % i, f"k{i}", i + 1) for i in range(5)
    ]
    assert (
        store.put_messages_batch(
            topic="B", queue_id=0, messages=[], sys_flag=0, born_timestamp=5, born_host="10.0.0.1:1"
        )
        == []
    )


def test_batch_over_the_size_limit_stores_nothing(store: MessageStore) -> None:
    messages = [BatchEntry(0, bytes(MAX_MESSAGE // 3), "") for _ in range(4)]
    results = put_batch(store, messages)
    assert len(results) == 4
    assert all(r.status is PutMessageStatus.MESSAGE_ILLEGAL for r in results)
    assert store.max_offset("B", 0) == 0


# ------------------------------------------------------------------ time lookups


def test_offset_for_timestamp_and_store_times(tmp_path: Path) -> None:
    now = [1000]
    store = make_store(tmp_path / "s", clock=lambda: now[0])
    with store:
        assert store.offset_for_timestamp("T", 0, 5) == 0
        assert store.earliest_store_time("T", 0) == -1
        for t in (1000, 1010, 1010, 1010, 1020, 1040, 1100):
            now[0] = t
            put(store)
        assert store.earliest_store_time("T", 0) == 1000
        assert store.store_time_at("T", 0, 4) == 1020
        assert store.store_time_at("T", 0, 7) == -1
        # an exact hit answers the first message of that millisecond
        assert store.offset_for_timestamp("T", 0, 1010) == 1
        assert store.offset_for_timestamp("T", 0, 1040) == 5
        # between two messages: the nearer one, the earlier on a tie
        assert store.offset_for_timestamp("T", 0, 1021) == 4
        assert store.offset_for_timestamp("T", 0, 1035) == 5
        assert store.offset_for_timestamp("T", 0, 1030) == 4
        # before the first and after the last (not the max offset, as in Java)
        assert store.offset_for_timestamp("T", 0, 10) == 0
        assert store.offset_for_timestamp("T", 0, 99999) == 6
        assert store.offset_for_timestamp("Other", 0, 1000) == 0


# ------------------------------------------------------------------ flushing


def test_sync_flush_puts_and_checkpoints(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", flush="sync", flush_interval=0.05)
    with store:
        results = [put(store, body=b"%d" % i) for i in range(20)]
        assert all(r.ok for r in results)
        assert store.commit_log.synced_offset == store.commit_log_max_offset
        deadline = time.monotonic() + 10
        checkpoint = tmp_path / "s" / "checkpoint.json"
        while time.monotonic() < deadline:
            data = json.loads(checkpoint.read_text())
            if data["commitLogOffset"] == store.commit_log_max_offset:
                break
            time.sleep(0.02)
        assert data["commitLogOffset"] == store.commit_log_max_offset
        assert data["queueMaxOffsets"] == [["T", 0, 20]]


def test_async_flush_thread_checkpoints(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", flush_interval=0.05)
    with store:
        put(store)
        end = store.commit_log_max_offset
        deadline = time.monotonic() + 10
        while store.commit_log.synced_offset < end and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.commit_log.synced_offset == end


# ------------------------------------------------------------------ delay levels


def test_parse_delay_levels() -> None:
    assert parse_delay_levels("1s 5s 1m 2h 1d 100ms") == (
        1000,
        5000,
        60_000,
        7_200_000,
        86_400_000,
        100,
    )
    with pytest.raises(ValueError, match="empty"):
        parse_delay_levels("  ")
    with pytest.raises(ValueError, match="delay level 1 is '5x'"):
        parse_delay_levels("5x")


def test_delayed_message_is_parked_in_the_schedule_topic(tmp_path: Path) -> None:
    now = [50_000]
    store = make_store(tmp_path / "s", delay_levels="100ms 200ms 300ms", clock=lambda: now[0])
    with store:
        r = put(store, topic="Real", queue_id=3, body=b"later", tags="TagA", extra={"DELAY": "2"})
        assert r.ok and r.topic == SCHEDULE_TOPIC and r.queue_id == 1
        assert store.max_offset("Real", 3) == 0
        got = store.get_messages(SCHEDULE_TOPIC, 1, 0, 1)
        (parked,) = decode(got.records)
        assert parked.topic == SCHEDULE_TOPIC and parked.queue_id == 1
        assert parked.properties == {
            "TAGS": "TagA",
            "DELAY": "2",
            "REAL_TOPIC": "Real",
            "REAL_QID": "3",
        }
        # the entry's tag code is the delivery time
        codes: list[int] = []
        store.get_messages(SCHEDULE_TOPIC, 1, 0, 1, tag_filter=lambda c: codes.append(c) is None)
        assert codes == [50_000 + 200]

        # a level above the highest is capped to it
        capped = put(store, topic="Real", queue_id=0, extra={"DELAY": "99"})
        assert capped.queue_id == 2
        (msg,) = decode(store.get_messages(SCHEDULE_TOPIC, 2, 0, 1).records)
        assert msg.properties["DELAY"] == "3"
        # DELAY <= 0, and transactional prepared messages, are not delayed
        assert put(store, topic="Real", extra={"DELAY": "0"}).topic == "Real"
        assert put(store, topic="Real", extra={"DELAY": "1"}, sys_flag=0x4).topic == "Real"

        now[0] = 50_199
        tick = store.schedule.deliver_due()
        assert tick.delivered == 0 and tick.next_due_ms == 50_200
        now[0] = 50_200
        tick = store.schedule.deliver_due()
        assert tick.delivered == 1 and tick.next_due_ms == 50_300
        (delivered,) = decode(store.get_messages("Real", 3, 0, 1).records)
        assert delivered.body == b"later" and delivered.topic == "Real"
        assert delivered.queue_id == 3 and delivered.queue_offset == 0
        assert delivered.born_host == "10.1.2.3:40000"
        assert delivered.born_timestamp == 1_700_000_000_000
        assert delivered.store_timestamp == 50_200
        # As on Apache 4.9.8, the stored properties text is the scheduled one.
        assert delivered.properties == parked.properties
        codes.clear()
        store.get_messages("Real", 3, 0, 1, tag_filter=lambda c: codes.append(c) is None)
        assert codes == [java_string_hash("TagA")]
        assert store.schedule.offset_of(2) == 1

        # A delivery time further off than its level's delay (a clock that went back)
        # is delivered at once, as Java's correctDeliverTimestamp does.
        now[0] = 40_000
        assert store.schedule.deliver_due().delivered == 1
        assert store.max_offset("Real", 0) == 3


async def test_scheduler_delivers_in_the_event_loop(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s", delay_levels="100ms 200ms")
    store.open()
    try:
        store.start()
        arrived: list[tuple[str, int, int]] = []
        store.add_listener(lambda t, q, m: arrived.append((t, q, m)))
        sent = time.monotonic()
        put(store, topic="Real", queue_id=1, body=b"a", extra={"DELAY": "1", "KEYS": "k"})
        put(store, topic="Real", queue_id=1, body=b"b", extra={"DELAY": "2"})
        deadline = time.monotonic() + 10
        while store.max_offset("Real", 1) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - sent
        assert store.max_offset("Real", 1) == 2
        assert elapsed >= 0.19
        assert [m.body for m in decode(store.get_messages("Real", 1, 0, 32).records)] == [
            b"a",
            b"b",
        ]
        assert ("Real", 1, 2) in arrived
        await store.stop()
    finally:
        store.close()

    # Progress was persisted on close: nothing is delivered twice after a restart.
    again = make_store(tmp_path / "s", delay_levels="100ms 200ms")
    with again:
        assert again.schedule.offsets() == ((1, 1), (2, 1))
        assert again.schedule.deliver_due().delivered == 0
        assert again.max_offset("Real", 1) == 2


# ------------------------------------------------------------------ offsets and topics


def test_consumer_offsets_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = make_store(root)
    with store:
        offsets = store.consumer_offsets
        assert offsets.query_offset("G", "T", 0) == -1
        offsets.commit_offset("G", "T", 0, 10)
        offsets.commit_offset("G", "T", 0, 7)  # the broker overwrites, even backwards
        offsets.commit_offset("G", "T", 1, 3)
        offsets.commit_offset("H", "%RETRY%H", 0, 1)
        assert offsets.query_offset("G", "T", 0) == 7
        assert offsets.groups_of_topic("T") == ("G",)
        assert offsets.topics_of_group("H") == ("%RETRY%H",)
    document = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert document["offsetTable"]["T@G"] == {"0": 7, "1": 3}

    with make_store(root) as reopened:
        assert reopened.consumer_offsets.query_offset("G", "T", 0) == 7
        assert [
            (e.group, e.topic, e.queue_id, e.offset) for e in reopened.consumer_offsets.entries()
        ] == [("H", "%RETRY%H", 0, 1), ("G", "T", 0, 7), ("G", "T", 1, 3)]
        assert reopened.consumer_offsets.remove("G") == 2
        reopened.consumer_offsets.commit_offset("G", "T", 0, 8)

    # A damaged document falls back to the previous version kept as .bak.
    (root / "config" / "consumerOffset.json").write_text("{not json")
    with make_store(root) as recovered:
        assert recovered.consumer_offsets.query_offset("G", "T", 0) == 7
        assert recovered.consumer_offsets.query_offset("H", "%RETRY%H", 0) == 1


def test_consumer_offsets_unreadable_everywhere_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "s"
    (root / "config").mkdir(parents=True)
    (root / "config" / "consumerOffset.json").write_text("[1, 2")
    with pytest.raises(StoreError, match=r"consumerOffset\.json"):
        make_store(root).open()
    # the failed open released everything: fixing the file makes it open
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable": {}}')
    with make_store(root) as store:
        assert store.consumer_offsets.entries() == ()


def test_consumer_offsets_are_persisted_periodically(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("rmqk.plugins.broker.store.flushing._OFFSETS_PERSIST_INTERVAL", 0.05)
    root = tmp_path / "s"
    store = make_store(root, flush_interval=0.02)
    with store:
        store.consumer_offsets.commit_offset("G", "T", 0, 42)
        path = root / "config" / "consumerOffset.json"
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert json.loads(path.read_text())["offsetTable"] == {"T@G": {"0": 42}}


def test_topic_configs_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "s"
    clock_values = iter(range(1000, 2000))

    def clock() -> int:
        return next(clock_values)

    with make_store(root, clock=clock) as store:
        topics = store.topics
        assert topics.get("Orders") is None
        start = topics.data_version
        created = topics.create("Orders", read_queue_nums=4, write_queue_nums=4)
        assert topics.get("Orders") == created == TopicConfig("Orders", 4, 4)
        assert topics.data_version.counter == start.counter + 1
        topics.put(TopicConfig("Orders", 8, 8, perm=4, order=True))
        topics.create("Other", read_queue_nums=1, write_queue_nums=1)
        assert topics.delete("Other") and not topics.delete("Other")
        version = topics.data_version
        assert version.counter == start.counter + 4
        with pytest.raises(ValueError, match="read_queue_nums"):
            TopicConfig("X", read_queue_nums=-1)
    with make_store(root) as reopened:
        assert reopened.topics.all() == (TopicConfig("Orders", 8, 8, perm=4, order=True),)
        assert reopened.topics.data_version == version
        assert reopened.topics.get("Orders").to_json()["readQueueNums"] == 8  # type: ignore[union-attr]


def test_reopening_keeps_everything(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, queue_id=i % 2, body=b"%d" % i, tags="A") for i in range(40)]
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and not report.full_rebuild and report.records_scanned == 0
        assert store.max_offset("T", 0) == store.max_offset("T", 1) == 20
        got = store.get_messages("T", 1, 0, 32)
        assert [m.commit_log_offset for m in decode(got.records)] == [
            r.commit_log_offset for r in results if r.queue_offset < 32 and r.queue_id == 1
        ]
        r = put(store, queue_id=1)
        assert r.queue_offset == 20 and r.commit_log_offset == results[-1].commit_log_offset + (
            results[-1].size
        )


def test_consume_queue_entry_layout(store: MessageStore, tmp_path: Path) -> None:
    r = put(store, tags="TagA")
    store.flush()
    path = tmp_path / "store" / "consumequeue" / "T" / "0" / f"{0:020d}"
    data = path.read_bytes()
    assert len(data) == 1000 * 20  # cq_entries_per_file x 20, sparse
    assert ENTRY.unpack_from(data, 0) == (r.commit_log_offset, r.size, java_string_hash("TagA"))
    assert data[20:40] == bytes(20)


def test_delete_topic_drops_its_queues(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with make_store(root) as store:
        put(store, topic="Gone", queue_id=0)
        put(store, topic="Gone", queue_id=1)
        put(store, topic="Kept", queue_id=0)
        assert store.delete_topic("Gone") == 2 and store.delete_topic("Gone") == 0
        assert store.queue_ids("Gone") == [] and store.max_offset("Gone", 0) == 0
        assert not (root / "consumequeue" / "Gone").exists()
        # a topic created again under the same name starts empty
        assert put(store, topic="Gone", queue_id=0).queue_offset == 0
    with make_store(root) as store:
        assert store.max_offset("Gone", 0) == 1 and store.queue_ids("Gone") == [0]
        assert store.max_offset("Kept", 0) == 1
