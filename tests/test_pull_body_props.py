"""Properties of decoding pull bodies with bad records (issue 19, items 7 and 10).

A model broker serves a queue of records, some damaged, the way the real one
answers pulls (records from the requested offset on, nextBeginOffset after the
last, some offsets filtered out by tag); the consumer side is
:func:`decode_pull_body`, pulled again from the offset it returns, as the
consumers do. Whatever the damage, every pull makes progress and no record is
delivered twice; when the damage leaves a record's header (queue id and offset)
readable, every good record is delivered, in order, and each bad one is reported
exactly once.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqk.plugins.remoting.pull_body import decode_plain, decode_pull_body
from rmqk.wire.message_codec import (
    ZLIB_COMPRESSED_SYS_FLAG,
    RecordError,
    decode_messages,
    encode_stored_message,
    prefix_size,
)

QUEUE = 3
BATCH = 4
CAP = 10_000

# How a record is damaged: None (good), or one of these.
CONTENT = ("not-zlib", "bomb", "truncated-zlib")
LENGTHS = ("total-small", "total-large", "body-length", "props-length")


def record(offset: int, damage: str | None, rng: int) -> bytes:
    body = f"good-{offset}".encode()
    sys_flag = 0
    if damage == "not-zlib":
        body, sys_flag = b"garbage %d" % rng, ZLIB_COMPRESSED_SYS_FLAG
    elif damage == "bomb":
        body, sys_flag = zlib.compress(bytes(CAP * 3)), ZLIB_COMPRESSED_SYS_FLAG
    elif damage == "truncated-zlib":
        body, sys_flag = zlib.compress(b"x" * 500)[:-5], ZLIB_COMPRESSED_SYS_FLAG
    elif rng % 3 == 0:
        body, sys_flag = zlib.compress(body), ZLIB_COMPRESSED_SYS_FLAG
    raw = bytearray(
        encode_stored_message(
            topic="T",
            body=body,
            queue_id=QUEUE,
            queue_offset=offset,
            sys_flag=sys_flag,
            properties_raw="TAGS\x01a",
        )
    )
    body_len_at = prefix_size(0) - 4
    if damage == "total-small":
        struct.pack_into(">i", raw, 0, rng % 60)
    elif damage == "total-large":
        struct.pack_into(">i", raw, 0, len(raw) + 1 + rng)
    elif damage == "body-length":
        struct.pack_into(">i", raw, body_len_at, len(body) + 1 + rng % 50)
    elif damage == "props-length":
        props = len(b"TAGS\x01a")
        struct.pack_into(">h", raw, len(raw) - props - 2, props + 1 + rng % 30)
    return bytes(raw)


def serve(store: list[bytes], filtered: set[int], offset: int) -> tuple[bytes, int]:
    """A FOUND answer from ``offset``: up to BATCH unfiltered records and nextBeginOffset."""
    picked: list[bytes] = []
    at = offset
    while at < len(store) and len(picked) < BATCH:
        if at not in filtered:
            picked.append(store[at])
        at += 1
    return b"".join(picked), at


def drain(store: list[bytes], filtered: set[int]) -> tuple[list[bytes], list[int], int]:
    """Pull the whole queue; the bodies delivered, the offsets reported, the pulls made."""
    delivered: list[bytes] = []
    reported: list[int] = []
    offset = pulls = 0
    while offset < len(store):
        pulls += 1
        assert pulls <= 3 * len(store) + 5, "the queue stalls"
        body, next_begin = serve(store, filtered, offset)
        if not body:
            offset = next_begin  # NO_MATCHED_MSG
            continue
        result = decode_pull_body(
            body,
            "b",
            queue_id=QUEUE,
            request_offset=offset,
            next_begin_offset=next_begin,
            max_body_size=CAP,
        )
        # The transport's fast case agrees with the full decode whenever it answers,
        # and leaves every body with a bad record to it.
        plain = decode_plain(body, "b", CAP)
        if plain is not None:
            assert not result.skipped and result.next_begin_offset == next_begin
            assert [(m.queue_offset, m.topic, m.body, m.flag) for m in plain] == [
                (m.queue_offset, m.topic, m.body, m.flag) for m in result.messages
            ]
        if result.skipped:
            assert plain is None
        assert result.next_begin_offset > offset, "a pull must make progress"
        assert result.next_begin_offset <= next_begin
        delivered.extend(m.body for m in result.messages)
        reported.extend(s.queue_offset for s in result.skipped)
        offset = result.next_begin_offset
    return delivered, reported, pulls


damages = st.one_of(st.none(), st.none(), st.sampled_from(CONTENT + LENGTHS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(st.tuples(damages, st.integers(0, 1000), st.booleans()), max_size=14),
)
def test_every_good_record_is_delivered_once_and_each_bad_one_reported_once(
    plan: list[tuple[str | None, int, bool]],
) -> None:
    store = [record(i, damage, rng) for i, (damage, rng, _) in enumerate(plan)]
    filtered = {i for i, (damage, _, skip) in enumerate(plan) if skip and damage is None}
    delivered, reported, _ = drain(store, filtered)
    good = [
        f"good-{i}".encode()
        for i, (damage, _, _) in enumerate(plan)
        if damage is None and i not in filtered
    ]
    assert delivered == good
    assert reported == [i for i, (damage, _, _) in enumerate(plan) if damage is not None]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(st.booleans(), min_size=1, max_size=10),
    noise=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
)
def test_any_damage_never_stalls(plan: list[bool], noise: list[tuple[int, int]]) -> None:
    store = [record(i, None, i) for i in range(len(plan))]
    for i, damaged in enumerate(plan):
        if damaged:
            raw = bytearray(store[i])
            for at, value in noise:
                raw[at % len(raw)] = value
            store[i] = bytes(raw)
    delivered, _, _ = drain(store, set())  # asserts progress at every pull
    # Undamaged records before the first damaged one always arrive. (A body byte
    # flipped is delivered as it is: neither Java's client nor rmqk checks BODYCRC.)
    first_bad = plan.index(True) if True in plan else len(plan)
    assert delivered[:first_bad] == [f"good-{i}".encode() for i in range(first_bad)]


def test_a_bad_record_first_in_the_body_is_skipped_alone() -> None:
    body = record(5, "total-small", 3) + record(6, None, 1)
    result = decode_pull_body(
        body, "b", queue_id=QUEUE, request_offset=5, next_begin_offset=7, max_body_size=CAP
    )
    assert result.messages == ()
    assert [(s.queue_offset, "TOTALSIZE" in s.reason) for s in result.skipped] == [(5, True)]
    assert result.next_begin_offset == 6


@pytest.mark.parametrize("queue_id", [QUEUE + 1])
def test_an_unbelievable_header_skips_only_the_pulled_offset(queue_id: int) -> None:
    # The header names another queue: the record's own offset is not trusted.
    bad = bytearray(record(9, "total-small", 3))
    struct.pack_into(">i", bad, 12, queue_id)
    result = decode_pull_body(
        bytes(bad), "b", queue_id=QUEUE, request_offset=5, next_begin_offset=12, max_body_size=CAP
    )
    assert [s.queue_offset for s in result.skipped] == [5]
    assert result.next_begin_offset == 6


def test_a_bomb_is_refused_without_inflating_it() -> None:
    deflater = zlib.compressobj(1)
    chunk = bytes(1 << 22)
    bomb = b"".join([*(deflater.compress(chunk) for _ in range(64)), deflater.flush()])
    body = encode_stored_message(topic="T", body=bomb, sys_flag=ZLIB_COMPRESSED_SYS_FLAG)
    tracemalloc.start()
    try:
        with pytest.raises(RecordError, match=r"max_decompressed_body_size \(1048576 bytes\)"):
            decode_messages(body, max_body_size=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The stored bomb, its copies and one bounded buffer; inflating it would take 256 MiB.
    assert peak < 16 << 20, peak


def test_a_truncated_zlib_body_is_still_an_error() -> None:
    cut = zlib.compress(b"y" * 1000)[:-4]
    body = encode_stored_message(topic="T", body=cut, sys_flag=ZLIB_COMPRESSED_SYS_FLAG)
    with pytest.raises(RecordError, match="incomplete or truncated stream") as caught:
        decode_messages(body)
    assert caught.value.framed
