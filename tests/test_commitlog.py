"""The exactly-once staging area: publishing a committed flush, and publishing it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqk.model.errors import RmqkError
from rmqk.plugins.sinks.commitlog import CommitEntry, CommitLog, StagingArea, control_dir
from rmqk.plugins.sinks.offsetranges import OffsetRange

FILES = ("tags=paid/part-00001-w.parquet", "tags=new/sub=x/part-00001-w.parquet", "top.parquet")


def _staged(tmp_path: Path, owner: str = "w", seq: int = 1) -> tuple[StagingArea, CommitEntry]:
    area = StagingArea(tmp_path, owner)
    for rel in FILES:
        path = area.flush_dir(seq) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    entry = CommitEntry(
        flush_id=f"{owner}-{seq}",
        owner=owner,
        seq=seq,
        rows=3,
        files=FILES,
        ranges=(OffsetRange("T", "b", 0, 0, 2),),
    )
    return area, entry


def test_publish_makes_missing_folders_and_removes_the_staging_folder(tmp_path: Path) -> None:
    (tmp_path / "tags=paid").mkdir()  # one folder exists already, the others do not
    area, entry = _staged(tmp_path)
    area.publish(entry)
    for rel in FILES:
        assert (tmp_path / rel).read_text() == rel
    assert not area.flush_dir(1).exists()
    # Again (a crash after publishing, before the staging folder went): nothing changes.
    area.publish(entry)
    assert sorted(p.read_text() for p in tmp_path.rglob("*.parquet")) == sorted(FILES)


def test_publish_removes_a_staging_folder_holding_other_files(tmp_path: Path) -> None:
    area, entry = _staged(tmp_path)
    (area.flush_dir(1) / "tags=paid" / "_SUCCESS").write_text("")
    (area.flush_dir(1) / ".part.crc").write_text("")
    area.publish(entry)
    assert not area.flush_dir(1).exists()
    assert (tmp_path / FILES[0]).is_file()


def test_publish_half_done_before_a_crash_finishes(tmp_path: Path) -> None:
    area, entry = _staged(tmp_path)
    # The first file was renamed before the crash.
    (tmp_path / "tags=paid").mkdir()
    (area.flush_dir(1) / FILES[0]).rename(tmp_path / FILES[0])
    area.publish(entry)
    assert sorted(p.read_text() for p in tmp_path.rglob("*.parquet")) == sorted(FILES)
    assert not area.flush_dir(1).exists()


def test_publish_refuses_when_a_file_is_nowhere(tmp_path: Path) -> None:
    area, entry = _staged(tmp_path)
    (area.flush_dir(1) / FILES[2]).unlink()
    with pytest.raises(RmqkError, match="1 of its files"):
        area.publish(entry)


def test_the_log_is_read_whole_lines_only(tmp_path: Path) -> None:
    log = CommitLog(control_dir(tmp_path))
    _, entry = _staged(tmp_path)
    log.append(entry)
    with open(log.path, "ab") as f:
        f.write(b"\n0000 {half a line")  # being written by another process
    assert [e.flush_id for e in log.read_new()] == ["w-1"]
    assert log.read_new() == []
    with open(log.path, "ab") as f:
        f.write(b"}\n")  # completed, but its checksum does not match: skipped
    assert log.read_new() == []
    second = CommitEntry("w-2", "w", 2, 1, (), (OffsetRange("T", "b", 0, 3, 3),))
    log.append(second)
    assert [e.flush_id for e in log.read_new()] == ["w-2"]


def test_writers_of_one_log_read_each_others_commits(tmp_path: Path) -> None:
    """Two writers of one log (processes, or machines sharing a mount) see each other's commits."""
    ours, theirs = CommitLog(control_dir(tmp_path)), CommitLog(control_dir(tmp_path))
    entries = [
        CommitEntry(f"w-{n}", "w", n, 1, (), (OffsetRange("T", "b", 0, n, n),)) for n in range(4)
    ]
    ours.append(entries[0])
    assert theirs.read_new() == [entries[0]]
    theirs.append(entries[1])
    ours.append(entries[2])
    assert theirs.read_new() == [entries[1], entries[2]]
    assert ours.read_new() == entries[:3]
    ours.append(entries[3])
    assert ours.read_new() == [entries[3]]
    assert theirs.read_new() == [entries[3]]
    assert CommitLog(control_dir(tmp_path)).read_all() == entries


def test_a_commit_after_the_log_file_was_replaced_lands_in_the_new_file(tmp_path: Path) -> None:
    """The log is opened by path for each read and append, never through a kept descriptor:
    one kept open would write to a file renamed away (a restore, a copy put back) and, on a
    shared mount, read a stale end of file (NFS refreshes a file's size when it is opened)."""
    import os
    import shutil

    directory = control_dir(tmp_path)
    ours = CommitLog(directory)
    entries = [
        CommitEntry(f"w-{n}", "w", n, 1, (), (OffsetRange("T", "b", 0, n, n),)) for n in range(2)
    ]
    ours.append(entries[0])
    assert ours.read_new() == [entries[0]]
    os.replace(directory / "commits.log", directory / "commits.old")
    shutil.copy(directory / "commits.old", directory / "commits.log")
    ours.append(entries[1])
    assert ours.read_new() == [entries[1]]
    assert CommitLog(directory).read_all() == entries
