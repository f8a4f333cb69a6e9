"""Crash recovery of the message store: kill -9 of a writing process, torn and garbage
tails, consume queue rebuilds, damaged checkpoints."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from store_support import SEGMENT, make_store, put_record, segment_path

from rmqk.model.message import MessageExt
from rmqk.plugins.broker.store import GetMessageStatus, MessageStore, PutResult, StoreError
from rmqk.plugins.broker.store.consumequeue import ENTRY
from rmqk.wire.message_codec import decode_messages, encode_stored_message

pytestmark = pytest.mark.timeout(120)


def body_of(i: int) -> bytes:
    return (b"%08d" % i) * (1 + i % 37)


def put(store: MessageStore, i: int, queue_id: int | None = None) -> PutResult:
    queue = i % 3 if queue_id is None else queue_id
    result = put_record(store, "K", queue, i, body_of(i), f"TAGS\x01t{i % 5}\x02KEYS\x01{i}")
    assert result.ok, result
    return result


def one(store: MessageStore, queue_id: int, offset: int) -> MessageExt:
    got = store.get_messages("K", queue_id, offset, 1)
    assert got.status is GetMessageStatus.FOUND, (queue_id, offset, got)
    (msg,) = decode_messages(got.records[0])
    return msg


def all_messages(store: MessageStore, topic: str = "K") -> list[MessageExt]:
    out: list[MessageExt] = []
    for qid in store.queue_ids(topic):
        offset = store.min_offset(topic, qid)
        while True:
            got = store.get_messages(topic, qid, offset, 32)
            if not got.records:
                break
            out += decode_messages(b"".join(got.records))
            offset = got.next_begin_offset
    return sorted(out, key=lambda m: m.commit_log_offset)


def write_at(path: Path, position: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        f.write(data)


# ------------------------------------------------------------------ kill -9

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rmqk.plugins.broker.store import MessageStore

    root, flush, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
    store = MessageStore(Path(root), flush=flush, segment_size=16384, max_message_size=8192,
                         cq_entries_per_file=100, store_host="127.0.0.1:10911",
                         flush_interval=interval)
    store.open()
    out = sys.stdout
    i = 0
    while True:
        body = (b"%08d" % i) * (1 + i % 37)
        r = store.put_message(topic="K", queue_id=i % 3, body=body, flag=0,
                              properties_raw=f"TAGS\\x01t{i % 5}\\x02KEYS\\x01{i}", sys_flag=0,
                              born_timestamp=i, born_host="10.0.0.1:1")
        if not r.ok:
            out.write(f"ERR {r.error}\\n")
            out.flush()
            break
        out.write(f"{i} {r.queue_id} {r.queue_offset} {r.commit_log_offset}\\n")
        out.flush()
        i += 1
    """
)


def run_and_kill(root: Path, flush: str, interval: float, acks: int) -> list[tuple[int, ...]]:
    """Start a writer, SIGKILL it after ``acks`` acknowledged puts; return every ack it wrote."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), flush, str(interval)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while len(lines) < acks:
            line = proc.stdout.readline()
            assert line, f"writer exited early (code {proc.poll()})"
            assert not line.startswith("ERR"), line
            lines.append(line)
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    lines += [x for x in rest.splitlines(keepends=True) if x.endswith("\n")]
    return [tuple(int(v) for v in line.split()) for line in lines]


def check_acknowledged(store: MessageStore, acked: list[tuple[int, ...]]) -> None:
    for i, qid, qoff, phys in acked:
        msg = one(store, qid, qoff)
        assert msg.commit_log_offset == phys
        assert msg.body == body_of(i) and msg.born_timestamp == i and msg.keys == str(i)
    per_queue = {q: max(a[2] for a in acked if a[1] == q) + 1 for q in range(3)}
    for qid, count in per_queue.items():
        assert store.max_offset("K", qid) >= count
    # Whatever survived beyond the acknowledged puts is whole and in order.
    survivors = all_messages(store)
    indices = [int(m.keys or "-1") for m in survivors]
    assert indices == list(range(len(indices)))
    assert len(indices) >= len(acked)


def test_kill_9_with_sync_flush_loses_no_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "s"
    acked = run_and_kill(root, "sync", 0.5, acks=400)
    store = make_store(root)
    with store:
        check_acknowledged(store, acked)
        assert store.commit_log_max_offset >= acked[-1][3]
        assert len(store.commit_log.segments) >= 2  # the writer rolled segments
        # Writing goes on where the recovered log ends.
        survivors = all_messages(store)
        nxt = put(store, len(survivors), queue_id=0)
        last = survivors[-1]
        assert nxt.commit_log_offset >= last.commit_log_offset + last.store_size
        assert nxt.queue_offset == max(m.queue_offset for m in survivors if m.queue_id == 0) + 1
    with make_store(root) as again:
        check_acknowledged(again, acked)
        assert again.last_recovery is not None and again.last_recovery.truncated_from is None


def test_kill_9_with_async_flush_and_lost_queue_pages(tmp_path: Path) -> None:
    """Async flush never reaches a checkpoint here; the consume queue pages are then
    wiped, as a power loss could: recovery rebuilds every entry from the log."""
    root = tmp_path / "s"
    acked = run_and_kill(root, "async", 3600.0, acks=300)
    for path in (root / "consumequeue").rglob("0*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        path.write_bytes(bytes(size))
    store = make_store(root)
    with store:
        report = store.last_recovery
        assert report is not None
        assert report.scan_start == 0 and not report.full_rebuild
        assert report.entries_written >= len(acked)
        check_acknowledged(store, acked)


# ------------------------------------------------------------------ torn tails


def stray_record(body: bytes, queue_offset: int, commit_log_offset: int) -> bytes:
    """A record of topic K, queue 0, as the store would write it, for writing by hand."""
    return encode_stored_message(
        topic="K",
        body=body,
        queue_id=0,
        queue_offset=queue_offset,
        commit_log_offset=commit_log_offset,
        born_host="10.0.0.1:1",
        store_host="127.0.0.1:10911",
    )


def closed_store_with(root: Path, count: int) -> tuple[int, list[PutResult]]:
    with make_store(root) as store:
        results = [put(store, i, queue_id=0) for i in range(count)]
        end = store.commit_log_max_offset
    return end, results


def test_torn_record_is_truncated(tmp_path: Path) -> None:
    root = tmp_path / "s"
    end, _ = closed_store_with(root, 10)
    record = stray_record(b"never acknowledged", 10, end)
    write_at(segment_path(root, end), end % SEGMENT, record[:60])
    # ... and its consume queue entry made it to disk before the crash
    write_at(
        root / "consumequeue" / "K" / "0" / f"{0:020d}", 10 * 20, ENTRY.pack(end, len(record), 0)
    )
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None
        assert report.truncated_from == end and report.entries_trimmed == 1
        assert store.commit_log_max_offset == end and store.max_offset("K", 0) == 10
        assert [m.body for m in all_messages(store)] == [body_of(i) for i in range(10)]
        r = put(store, 10, queue_id=0)
        assert (r.commit_log_offset, r.queue_offset) == (end, 10)
    with make_store(root) as store:
        assert one(store, 0, 10).body == body_of(10)


def test_record_with_bad_crc_is_truncated(tmp_path: Path) -> None:
    root = tmp_path / "s"
    end, _ = closed_store_with(root, 5)
    record = bytearray(stray_record(b"x" * 300, 5, end))
    record[-50] ^= 0xFF  # inside the body: whole length, wrong CRC
    write_at(segment_path(root, end), end % SEGMENT, bytes(record))
    with make_store(root) as store:
        assert store.last_recovery is not None and store.last_recovery.truncated_from == end
        assert store.max_offset("K", 0) == 5 and store.commit_log_max_offset == end


def test_random_garbage_tail_is_truncated_and_zeroed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    end, _ = closed_store_with(root, 7)
    garbage = random.Random(7).randbytes(3000)
    path = segment_path(root, end)
    write_at(path, end % SEGMENT, b"\x01" + garbage)
    with make_store(root) as store:
        assert store.last_recovery is not None and store.last_recovery.truncated_from == end
        assert store.commit_log_max_offset == end
        assert len(all_messages(store)) == 7
    data = path.read_bytes()
    assert data[end % SEGMENT :] == bytes(SEGMENT - end % SEGMENT)
    with make_store(root) as store:
        assert store.last_recovery is not None and store.last_recovery.truncated_from is None


def test_stale_record_behind_the_end_is_never_resurrected(tmp_path: Path) -> None:
    """A whole, valid record whose PHYSICALOFFSET is not its position is not accepted."""
    root = tmp_path / "s"
    end, _ = closed_store_with(root, 3)
    stale = stray_record(b"old", 3, end + 100)
    write_at(segment_path(root, end), end % SEGMENT, stale)
    with make_store(root) as store:
        assert store.max_offset("K", 0) == 3 and store.commit_log_max_offset == end


def test_corruption_inside_the_log_is_skipped_not_cut_when_scanning_from_the_start(
    tmp_path: Path,
) -> None:
    """Issue 19 #3: a damaged record in the middle of the log is reported and skipped;
    the acknowledged records after it stay (this test asserted a cut there before)."""
    root = tmp_path / "s"
    end, results = closed_store_with(root, 60)
    bad = results[40]
    write_at(
        segment_path(root, bad.commit_log_offset),
        bad.commit_log_offset % SEGMENT + bad.size - 30,
        b"\xff\xfe\xfd",
    )
    (root / "checkpoint.json").unlink()
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and report.full_rebuild and report.reason == "no checkpoint"
        assert report.truncated_from is None and report.bad_records == 1
        assert store.max_offset("K", 0) == 60
        assert store.commit_log_max_offset == end
        r = put(store, 60, queue_id=0)
        assert (r.commit_log_offset, r.queue_offset) == (end, 60)


# ------------------------------------------------------------------ consume queues


def test_deleted_consume_queues_are_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with make_store(root) as store:
        for i in range(250):
            put(store, i)
        before = {q: (store.min_offset("K", q), store.max_offset("K", q)) for q in range(3)}
        expected = [
            (m.queue_id, m.queue_offset, m.commit_log_offset, m.body) for m in all_messages(store)
        ]
    for path in sorted((root / "consumequeue").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and report.full_rebuild
        assert "fewer than" in report.reason
        assert report.entries_written == 250
        assert {q: (store.min_offset("K", q), store.max_offset("K", q)) for q in range(3)} == before
        got = [
            (m.queue_id, m.queue_offset, m.commit_log_offset, m.body) for m in all_messages(store)
        ]
        assert got == expected
        assert store.queue_ids("K") == [0, 1, 2]


def test_missing_consume_queue_file_in_the_middle_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with make_store(root, cq_entries_per_file=10) as store:
        for i in range(50):
            put(store, i, queue_id=1)
    (root / "consumequeue" / "K" / "1" / f"{20 * 20:020d}").unlink()
    with make_store(root, cq_entries_per_file=10) as store:
        report = store.last_recovery
        assert report is not None and report.full_rebuild and "missing" in report.reason
        assert [m.keys for m in all_messages(store)] == [str(i) for i in range(50)]


def test_queue_entries_lost_after_the_checkpoint_are_rewritten(tmp_path: Path) -> None:
    root = tmp_path / "s"
    image = tmp_path / "crash-image"
    with make_store(root, flush_interval=3600) as store:
        for i in range(30):
            put(store, i, queue_id=2)
        store.flush()  # the checkpoint now covers 30 entries
        for i in range(30, 45):
            put(store, i, queue_id=2)
        # What a crash leaves: files as they are, without a final flush or checkpoint.
        shutil.copytree(root, image)
    # ... and say the consume queue pages written after the checkpoint never hit the disk.
    write_at(image / "consumequeue" / "K" / "2" / f"{0:020d}", 30 * 20, bytes(15 * 20))
    with make_store(image) as store:
        report = store.last_recovery
        assert report is not None and not report.full_rebuild
        assert report.records_scanned == 15 and report.entries_written == 15
        assert [m.keys for m in all_messages(store)] == [str(i) for i in range(45)]


def test_unusable_checkpoints_mean_a_full_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "s"
    end, results = closed_store_with(root, 20)
    (root / "checkpoint.json").write_text("{broken")
    with make_store(root) as store:
        assert store.last_recovery is not None and store.last_recovery.reason == "no checkpoint"
        assert store.max_offset("K", 0) == 20
    (root / "checkpoint.json").write_text(
        json.dumps({"commitLogOffset": results[5].commit_log_offset + 3, "queueMaxOffsets": []})
    )
    with make_store(root) as store:
        report = store.last_recovery
        assert report is not None and report.full_rebuild
        assert "not a record boundary" in report.reason
        assert store.commit_log_max_offset == end and store.max_offset("K", 0) == 20


def test_segment_size_mismatch_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    closed_store_with(root, 3)
    with pytest.raises(StoreError, match="segment_size"):
        make_store(root, segment_size=32 * 1024).open()
    (root / "commitlog" / "notes.txt").write_text("hi")
    with pytest.raises(StoreError, match=r"notes\.txt"):
        make_store(root).open()
