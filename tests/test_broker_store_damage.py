"""Damaged store files (issue 19 #2, #3): consume queue damage is repaired from the commit
log, never paid for with messages; a damaged record in the middle of the log is skipped
and reported, and the records after it stay."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_support import SEGMENT, make_store, put_record, segment_path

from rmqk.plugins.broker.store import GetMessageStatus, MessageStore, PutResult

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
