"""Damaged store files (issue 19 #2, #3): consume queue damage is repaired from the commit
log, never paid for with messages; a damaged record in the middle of the log is skipped
and reported, and the records after it stay."""

from __future__ import annotations

import asyncio
import logging
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, produce, push_consumer, wait_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_support import SEGMENT, make_store, put_record, segment_path

from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.store import GetMessageStatus, MessageStore, PutResult
from rmqk.wire.message_codec import BatchEntry

pytestmark = pytest.mark.timeout(120)

_FAST = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def put(store: MessageStore, topic: str, queue_id: int, i: int) -> PutResult:
    body = b"body-%06d-" % i + b"x" * (i % 50)
    result = put_record(store, topic, queue_id, i, body, f"KEYS\x01{i}")
    assert result.ok, result
    return result


def record_at(store: MessageStore, topic: str, queue_id: int, offset: int) -> bytes | None:
    got = store.get_messages(topic, queue_id, offset, 1)
    if got.status is not GetMessageStatus.FOUND:
        return None
    return got.records[0]


def flip(path: Path, pos: int, value: int) -> None:
    with path.open("r+b") as f:
        f.seek(pos)
        old = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([old ^ value]))


def cq_file(root: Path, topic: str, queue_id: int, first_entry: int) -> Path:
    return root / "consumequeue" / topic / str(queue_id) / f"{first_entry * 20:020d}"


def fresh_copy(base: Path, tmp_path: Path) -> Path:
    """A copy of ``base`` for one example (hypothesis reuses ``tmp_path``)."""
    root = tmp_path / "copy"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(base, root)
    return root


# -------------------------------------------------------------- consume queues (#2)


def test_one_byte_in_the_unused_part_of_a_consume_queue_hides_nothing(tmp_path: Path) -> None:
    """The issue's case: with Apache's 300,000 entries per file, a byte at entry 150,000
    made a bisection report min/max 150000/150001 and consumers jump forward."""
    root = tmp_path / "s"
    with make_store(root, cq_entries_per_file=300_000) as store:
        results = [put(store, "K", 0, i) for i in range(50)]
        store.consumer_offsets.commit_offset("g", "K", 0, 20)
    flip(cq_file(root, "K", 0, 0), 150_000 * 20 + 11, 0x01)  # low byte of the size field
    with make_store(root, cq_entries_per_file=300_000) as store:
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (0, 50)
        assert store.consumer_offsets.query_offset("g", "K", 0) == 20
        for r in results:
            assert record_at(store, "K", 0, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            )
        # the stray byte is gone: appending up to it and reopening cannot revive it
        assert put(store, "K", 0, 50).queue_offset == 50
    with make_store(root, cq_entries_per_file=300_000) as store:
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (0, 51)


@pytest.fixture(scope="module")
def two_file_queue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PutResult]]:
    """A queue of 130 entries: one full consume queue file and 30 entries of the next."""
    root = tmp_path_factory.mktemp("cq") / "s"
    with make_store(root) as store:
        results = [put(store, "K", 0, i) for i in range(130)]
    return root, results


@_FAST
@given(
    entry=st.integers(min_value=30, max_value=99),
    at=st.integers(min_value=0, max_value=19),
    value=st.integers(min_value=1, max_value=255),
    checkpoint=st.booleans(),
)
@example(entry=50, at=11, value=1, checkpoint=True)  # where a bisection looks first
def test_stray_bytes_after_the_last_entry_change_no_offset(
    two_file_queue: tuple[Path, list[PutResult]],
    tmp_path: Path,
    entry: int,
    at: int,
    value: int,
    checkpoint: bool,
) -> None:
    base, results = two_file_queue
    root = fresh_copy(base, tmp_path)
    flip(cq_file(root, "K", 0, 100), entry * 20 + at, value)
    if not checkpoint:
        (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (0, 130)
        assert put(store, "K", 0, 130).queue_offset == 130
        for r in results:
            assert record_at(store, "K", 0, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            )


@_FAST
@given(entry=st.integers(min_value=0, max_value=129), checkpoint=st.booleans())
def test_an_unwritten_looking_entry_in_the_used_part_is_repaired_from_the_log(
    two_file_queue: tuple[Path, list[PutResult]], tmp_path: Path, entry: int, checkpoint: bool
) -> None:
    base, results = two_file_queue
    root = fresh_copy(base, tmp_path)
    path = cq_file(root, "K", 0, entry - entry % 100)
    with path.open("r+b") as f:
        f.seek((entry % 100) * 20 + 8)
        f.write(struct.pack(">i", 0))  # size 0: reads as the end of the queue
    if not checkpoint:
        (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (0, 130)
        for r in results:
            assert record_at(store, "K", 0, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            )


def entry_bytes(root: Path, topic: str, queue_id: int, index: int, per_file: int = 100) -> bytes:
    path = cq_file(root, topic, queue_id, index - index % per_file)
    with path.open("rb") as f:
        f.seek((index % per_file) * 20)
        return f.read(20)


def test_a_flipped_byte_in_an_entrys_log_offset_is_rebuilt_at_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25 #2: one byte of the commit log offset of entry 1000 of 2,000, below the
    checkpoint: the entry pointed into another record and message 1000 was lost."""
    root = tmp_path / "s"
    with make_store(root, cq_entries_per_file=300_000) as store:
        results = [put(store, "K", 0, i) for i in range(2000)]
    good = entry_bytes(root, "K", 0, 1000, 300_000)
    flip(cq_file(root, "K", 0, 0), 1000 * 20 + 6, 0x01)  # the offset moves by 256 bytes
    caplog.set_level(logging.WARNING, logger="rmqk.broker.store")
    with make_store(root, cq_entries_per_file=300_000) as store:
        for r in results:
            assert record_at(store, "K", 0, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            ), r
        report = store.last_recovery
        assert report is not None and not report.full_rebuild, report
        assert (report.entries_rebuilt, report.entries_unrepaired) == (1, 0)
        assert store.stats().cq_entries_rebuilt == 1
    assert entry_bytes(root, "K", 0, 1000, 300_000) == good
    (warning,) = [r for r in caplog.records if "did not describe" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "consume queue K:0 entries 1000-1000" in warning.getMessage()
    assert str(cq_file(root, "K", 0, 0)) in warning.getMessage()
    with make_store(root, cq_entries_per_file=300_000) as store:
        report = store.last_recovery
        assert report is not None and report.entries_rebuilt == 0  # repaired on disk


@_FAST
@given(
    entry=st.integers(min_value=0, max_value=129),
    at=st.integers(min_value=0, max_value=19),
    value=st.integers(min_value=1, max_value=255),
    checkpoint=st.booleans(),
)
@example(entry=100, at=6, value=1, checkpoint=True)  # the first entry of the second file
@example(entry=129, at=7, value=3, checkpoint=True)  # the last entry: rebuilt, not trimmed
@example(entry=0, at=19, value=9, checkpoint=True)  # a tags code
def test_any_byte_of_a_used_entry_is_rebuilt_from_the_log(
    two_file_queue: tuple[Path, list[PutResult]],
    tmp_path: Path,
    entry: int,
    at: int,
    value: int,
    checkpoint: bool,
) -> None:
    """Offset, size or tags code: after the next open every entry is (offset, size, tags
    code) of its own record, and every message is served."""
    base, results = two_file_queue
    root = fresh_copy(base, tmp_path)
    good = entry_bytes(root, "K", 0, entry)
    flip(cq_file(root, "K", 0, entry - entry % 100), (entry % 100) * 20 + at, value)
    if not checkpoint:
        (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (0, 130)
        for r in results:
            assert record_at(store, "K", 0, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            )
        cq = store.consume_queue("K", 0)
        assert cq is not None
        assert [cq.entry(r.queue_offset) for r in results] == [
            (r.commit_log_offset, r.size, 0) for r in results
        ]
        assert not cq.unrepaired
    assert entry_bytes(root, "K", 0, entry) == good


def test_sound_entries_of_every_kind_are_left_alone(tmp_path: Path) -> None:
    """Tags, delay levels (the entry's tags code is the delivery time), batches, IPv6
    hosts, retention: the check at open rewrites nothing that is right, and serving
    rebuilds nothing."""
    root = tmp_path / "s"
    now = [50_000]
    with make_store(root, delay_levels="1s 2s", clock=lambda: now[0]) as store:
        for i in range(300):
            now[0] += 1
            put_record(store, "T", i % 3, i, b"t-%d" % i, f"TAGS\x01tag{i % 7}\x02KEYS\x01{i}")
            put_record(store, "Later", 0, i, b"d-%d" % i, f"DELAY\x01{1 + i % 2}")
            assert store.put_message(
                topic="V6",
                queue_id=0,
                body=b"v6-%d" % i,
                flag=0,
                properties_raw="TAGS\x01six",
                sys_flag=0x30,
                born_timestamp=i,
                born_host="[::1]:5",
            ).ok
        batch = [BatchEntry(0, b"b-%d" % i, f"TAGS\x01b{i}") for i in range(20)]
        assert all(
            r.ok
            for r in store.put_messages_batch(
                topic="B",
                queue_id=0,
                messages=batch,
                sys_flag=0,
                born_timestamp=1,
                born_host="10.0.0.1:1",
            )
        )
        assert store.delete_commit_log_before(2 * SEGMENT) == 2
    with make_store(root, delay_levels="1s 2s", clock=lambda: now[0]) as store:
        report = store.last_recovery
        assert report is not None
        assert (report.entries_rebuilt, report.entries_unrepaired) == (0, 0), report
        for topic, qid in store.queues():
            offset = store.min_offset(topic, qid)
            while offset < store.max_offset(topic, qid):
                got = store.get_messages(topic, qid, offset, 32, tag_filter=lambda c: True)
                assert got.status is GetMessageStatus.FOUND, (topic, qid, offset)
                offset = got.next_begin_offset
        assert store.stats().cq_entries_rebuilt == 0


def test_an_entry_damaged_under_a_running_store_is_rebuilt_when_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The consume queue file changes under the open store (it reads the entries
    through a shared mapping): the pull that meets the entry rebuilds it first."""
    root = tmp_path / "s"
    caplog.set_level(logging.WARNING, logger="rmqk.broker.store")
    with make_store(root) as store:
        results = [put(store, "K", 0, i) for i in range(130)]
        stored = [store.commit_log.read(r.commit_log_offset, r.size) for r in results]
        flip(cq_file(root, "K", 0, 0), 50 * 20 + 6, 0x01)  # entry 50's log offset
        flip(cq_file(root, "K", 0, 100), 20 * 20 + 3, 0x10)  # entry 120's, past the log
        got = store.get_messages("K", 0, 0, 130, max_total_bytes=1 << 30)
        assert got.status is GetMessageStatus.FOUND and got.next_begin_offset == 100
        assert list(got.records) == stored[:100]
        got = store.get_messages("K", 0, 100, 30, max_total_bytes=1 << 30)
        assert list(got.records) == stored[100:]
        assert store.stats().cq_entries_rebuilt == 2
        assert store.stats().cq_entries_unrepaired == 0
    rebuilt = [r.getMessage() for r in caplog.records if "did not describe" in r.getMessage()]
    assert len(rebuilt) == 2 and "entries 50-50" in rebuilt[0] and "entries 120-120" in rebuilt[1]


def test_an_entry_whose_record_is_gone_too_is_not_served_and_is_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both the entry and its record damaged: nothing to rebuild from. The bytes the
    entry points at are another record's, so it is not served; the rest are."""
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, "K", 0, i) for i in range(30)]
    lost = results[10]
    flip(cq_file(root, "K", 0, 0), 10 * 20 + 6, 0x01)
    with segment_path(root, lost.commit_log_offset).open("r+b") as f:
        f.seek(lost.commit_log_offset % SEGMENT)
        f.write(b"\xff" * 40)  # its head: the log holds no record for entry 10 any more
    caplog.set_level(logging.WARNING, logger="rmqk.broker.store")
    with make_store(root) as store:
        got = store.get_messages("K", 0, 0, 30, max_total_bytes=1 << 30)
        served = [r for r in results if r is not lost]
        assert list(got.records) == [
            store.commit_log.read(r.commit_log_offset, r.size) for r in served
        ]
        assert got.next_begin_offset == 30
        report = store.last_recovery
        assert report is not None and report.entries_unrepaired == 1, report
        assert store.stats().cq_entries_unrepaired == 1
    errors = [r for r in caplog.records if "left as they are" in r.getMessage()]
    assert errors and "consume queue K:0 entries 10 (" in errors[0].getMessage()


async def consume_in_order(broker: Any, topic: str, last: int) -> tuple[list[Any], int]:
    """(queue id, queue offset, body) of each message a push consumer of ``topic``
    gets, until queue offset ``last`` arrives, and its skipped-record count."""
    got: list[tuple[int, int, bytes]] = []
    # One consume worker: batches reach the listener in the queue's order.
    consumer = push_consumer(broker, "g-cq", consume_thread_min=1, consume_thread_max=1)
    consumer.subscribe(topic)

    @consumer.register_listener
    def handle(messages: list[MessageExt]) -> None:
        got.extend((m.queue_id, m.queue_offset, m.body) for m in messages)

    await consumer.start()
    try:
        await wait_for(lambda: any(o == last for _, o, _ in got[-64:]), 60, f"offset {last}")
        await asyncio.sleep(0.5)  # anything more would show up here
        skipped = consumer.stats.topics[topic].skipped_records_total
    finally:
        await consumer.shutdown()
    return got, skipped


def only_cq_file(data_dir: Path, topic: str) -> Path:
    (path,) = (data_dir / "consumequeue" / topic / "0").iterdir()
    return path


BODIES = [b"message-%04d" % i for i in range(2000)]


async def test_a_flipped_byte_in_an_entrys_log_offset_loses_no_message_over_tcp(
    tmp_path: Path,
) -> None:
    """Issue 25 #2 as reported: 2,000 messages stored, the broker stopped, one byte of the
    commit log offset of consume queue entry 1000 flipped, the broker started: message
    1000 reached no consumer (it got bytes from the middle of another record)."""
    data = tmp_path / "broker"
    async with EmbeddedBroker(data, namesrv_port=0, broker_port=0) as broker:
        await create_topic(broker, "CqFlip", 1)
        assert await produce(broker.namesrv_addr, "CqFlip", BODIES) == 2000
    flip(only_cq_file(data, "CqFlip"), 1000 * 20 + 6, 0x01)  # the offset moves by 256
    async with EmbeddedBroker(data, namesrv_port=0, broker_port=0) as broker:
        got, skipped = await consume_in_order(broker, "CqFlip", 1999)
        stats = broker.store.stats()
    assert [(q, o) for q, o, _ in got] == [(0, i) for i in range(2000)]
    assert [body for _, _, body in got] == BODIES
    assert skipped == 0
    assert stats.cq_entries_rebuilt == 1 and stats.cq_entries_unrepaired == 0


async def test_an_entry_damaged_under_a_running_broker_loses_no_message_over_tcp(
    tmp_path: Path,
) -> None:
    """The same byte flipped in the file while the broker runs (it reads entries through
    a shared mapping, so it sees the change): the pull meeting it rebuilds it first."""
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as broker:
        await create_topic(broker, "CqLive", 1)
        assert await produce(broker.namesrv_addr, "CqLive", BODIES) == 2000
        flip(only_cq_file(tmp_path / "broker", "CqLive"), 1000 * 20 + 6, 0x01)
        got, skipped = await consume_in_order(broker, "CqLive", 1999)
        stats = broker.store.stats()
    assert [(q, o) for q, o, _ in got] == [(0, i) for i in range(2000)]
    assert [body for _, _, body in got] == BODIES
    assert skipped == 0
    assert stats.cq_entries_rebuilt == 1 and stats.cq_entries_unrepaired == 0


# ----------------------------------------------------------------- commit log (#3)


def test_a_bad_record_and_a_lost_queue_file_lose_no_acknowledged_message(tmp_path: Path) -> None:
    """The issue's case: one flipped body byte in an old record plus one lost consume
    queue file of another topic once deleted 1,500 of 2,000 acknowledged messages."""
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, "A" if i % 2 else "B", i % 3, i) for i in range(2000)]
        end = store.commit_log_max_offset
    bad = results[501]  # topic A
    flip(segment_path(root, bad.commit_log_offset), bad.commit_log_offset % SEGMENT + 100, 0x40)
    cq_file(root, "B", 1, 100).unlink()
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None
        assert report.truncated_from is None and report.bad_records == 1
        assert store.commit_log_max_offset == end
        for r in results:
            got = record_at(store, r.topic, r.queue_id, r.queue_offset)
            stored = store.commit_log.read(r.commit_log_offset, r.size)
            # The damaged one keeps its queue entry (queue offsets stay contiguous) and is
            # served as stored: consumers, like Java's, do not check BODYCRC.
            assert got == stored, r
        for topic in ("A", "B"):
            for qid in range(3):
                expected = sum(1 for r in results if (r.topic, r.queue_id) == (topic, qid))
                assert store.max_offset(topic, qid) == expected
        after = put(store, "A", 0, 2000)
        assert after.commit_log_offset == end


@pytest.fixture(scope="module")
def spread_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PutResult], int]:
    root = tmp_path_factory.mktemp("log") / "s"
    with make_store(root) as store:
        results = [put(store, "K", i % 2, i) for i in range(300)]
        end = store.commit_log_max_offset
    return root, results, end


@_FAST
@given(
    where=st.floats(min_value=0.0, max_value=0.9),
    garbage=st.binary(min_size=1, max_size=64),
    checkpoint=st.booleans(),
)
def test_damage_in_the_middle_of_the_log_takes_only_the_records_it_touches(
    spread_log: tuple[Path, list[PutResult], int],
    tmp_path: Path,
    where: float,
    garbage: bytes,
    checkpoint: bool,
) -> None:
    base, results, end = spread_log
    root = fresh_copy(base, tmp_path)
    at = int(where * end)
    room = SEGMENT - at % SEGMENT
    garbage = garbage[:room]
    with segment_path(root, at).open("r+b") as f:
        f.seek(at % SEGMENT)
        f.write(garbage)
    if not checkpoint:
        (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and report.truncated_from is None
        assert store.commit_log_max_offset == end
        for r in results:
            if r.commit_log_offset < at + len(garbage) and at < r.commit_log_offset + r.size:
                continue  # touched by the damage
            assert record_at(store, "K", r.queue_id, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            ), r


def test_a_queue_rebuilt_after_retention_loads_without_another_rebuild(tmp_path: Path) -> None:
    """A rebuilt queue starts with unwritten entries for the removed messages: the linear
    scan accepts them at the start of the first file only, so the next open is quick."""
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, "K", 0, i) for i in range(400)]
        assert store.delete_commit_log_before(3 * SEGMENT) == 3
        store.clean_consume_queues()
    for path in sorted((root / "consumequeue").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with make_store(root) as store:
        assert store.last_recovery is not None and store.last_recovery.full_rebuild
        first = store.min_offset("K", 0)
        assert first > 0 and store.max_offset("K", 0) == 400
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and not report.full_rebuild, report
        assert (store.min_offset("K", 0), store.max_offset("K", 0)) == (first, 400)
        r = results[first]
        assert record_at(store, "K", 0, first) == store.commit_log.read(r.commit_log_offset, r.size)


def _rewrite_record_field(root: Path, r: PutResult, at: int, fmt: str, value: int) -> None:
    """Overwrite one header field of the record of ``r`` (body CRC still passes)."""
    with segment_path(root, r.commit_log_offset).open("r+b") as f:
        f.seek(r.commit_log_offset % SEGMENT + at)
        f.write(struct.pack(fmt, value))


def test_a_record_claiming_another_records_place_does_not_take_it(tmp_path: Path) -> None:
    """A damaged queue id makes record 163 (K:1 offset 81) claim K:0 offset 81, which
    record 162 holds. Re-dispatch keeps the entry that indexes its own record, as
    Java's dispatcher never builds an entry twice (found by hypothesis, seed 10)."""
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, "K", i % 2, i) for i in range(300)]
        want = store.commit_log.read(results[162].commit_log_offset, results[162].size)
    _rewrite_record_field(root, results[163], 12, ">i", 0)  # QUEUEID
    (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        assert record_at(store, "K", 0, 81) == want


def test_a_record_claiming_a_far_queue_offset_costs_no_memory_per_offset(
    tmp_path: Path,
) -> None:
    """A damaged queue offset of 4,000,000,000 once made the entry check list every
    index up to it (the test run was killed for memory); only entries in files count."""
    root = tmp_path / "s"
    with make_store(root) as store:
        results = [put(store, "K", i % 2, i) for i in range(300)]
    _rewrite_record_field(root, results[163], 20, ">q", 4_000_000_000)  # QUEUEOFFSET
    (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        for r in results[:163]:
            assert record_at(store, "K", r.queue_id, r.queue_offset) == store.commit_log.read(
                r.commit_log_offset, r.size
            ), r
