"""A full disk and retention (issue 19 #12, #14): refused puts leave nothing behind, the
store serves reads and takes puts again once space returns, old segments are deleted
as Apache's CleanCommitLogService deletes them, and create_topic checks names."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_support import make_store, put_record
from test_broker_support import RawClient, messages_of

from rmqk.model.errors import RmqkError
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.processors.topics import validate_topic
from rmqk.plugins.broker.store import (
    GetMessageStatus,
    MessageStore,
    PutMessageStatus,
    PutResult,
    RetentionPolicy,
)
from rmqk.plugins.broker.store import commitlog as commitlog_module
from rmqk.plugins.broker.store import consumequeue as consumequeue_module
from rmqk.wire.protocol import ResponseCode

pytestmark = pytest.mark.timeout(120)



def put(store: MessageStore, i: int, *, size: int = 100) -> PutResult:
    return put_record(store, "K", 0, i, b"%06d" % i + b"x" * size, f"KEYS\x01{i}")


def bodies(store: MessageStore) -> list[bytes]:
    from rmqk.wire.message_codec import decode_messages

    out: list[bytes] = []
    offset = store.min_offset("K", 0)
    while True:
        got = store.get_messages("K", 0, offset, 32)
        if not got.records:
            return out
        out += [m.body for m in decode_messages(b"".join(got.records))]
        offset = got.next_begin_offset


class _FailingPwrite:
    """os.pwrite that fails with ENOSPC after writing part of the bytes, ``times`` times."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.real = os.pwrite

    def __call__(self, fd: int, data: Any, offset: int) -> int:
        if self.times > 0:
            self.times -= 1
            self.real(fd, bytes(data)[: max(1, len(data) // 2)], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(fd, data, offset)


@pytest.mark.parametrize("layer", ["commit log", "consume queue"])
def test_a_put_refused_for_lack_of_space_leaves_nothing_and_the_next_one_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str
) -> None:
    root = tmp_path / "s"
    module = commitlog_module if layer == "commit log" else consumequeue_module
    with make_store(root) as store:
        first = put(store, 0)
        failing = _FailingPwrite(times=1)
        monkeypatch.setattr(module.os, "pwrite", failing)
        refused = put(store, 1)
        assert not refused.ok and refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert refused.error is not None and "disk full" in refused.error
        # reads go on, and the store takes puts again at once: nothing was consumed
        assert bodies(store) == [b"000000" + b"x" * 100]
        again = put(store, 2)
        assert again.ok, again
        assert again.commit_log_offset == first.commit_log_offset + first.size
        assert again.queue_offset == 1
        monkeypatch.undo()
    with make_store(root) as store:
        # a refused message is never delivered, not even after a restart
        assert [b[:6] for b in bodies(store)] == [b"000000", b"000002"]


def test_a_topic_file_write_failure_is_retried_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqk.plugins.broker.store import files
    from rmqk.plugins.broker.store.topics import TopicConfig

    root = tmp_path / "s"
    with make_store(root) as store:
        real = files.os.write

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(files.os, "write", full)
        store.topics.put(TopicConfig("Late", 4, 4))  # a heartbeat or a topic creation
        assert store.topics.get("Late") is not None
        assert not list((root / "config").glob("*.tmp"))
        monkeypatch.setattr(files.os, "write", real)
        store.topics.persist_pending()
    with make_store(root) as store:
        assert store.topics.get("Late") is not None


# ------------------------------------------------------------- a real full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_full_disk_over_tcp_refuses_cleanly_serves_reads_and_recovers(
    small_disk: Path,
) -> None:
    data = small_disk / "broker"
    filler = small_disk / "filler"
    filler.write_bytes(b"\1" * (640 * 1024))
    options: dict[str, Any] = {
        "namesrv_port": 0,
        "broker_port": 0,
        "segment_size": 1024 * 1024,
        "max_message_size": 64 * 1024,
        "clean_resource_interval": 3600.0,
    }
    acked: list[bytes] = []
    async with EmbeddedBroker(data, **options) as broker:
        await broker.create_topic("Full", queues=1)
        client = await RawClient.connect(broker.broker_addr)
        try:
            refused = None
            for i in range(200):
                body = b"%06d" % i + b"y" * 32 * 1024
                sent = await client.send_message("Full", body, queue_id=0)
                if sent.code != ResponseCode.SUCCESS:
                    refused = (sent, body)
                    break
                acked.append(body)
            assert refused is not None, "the 2 MiB disk never filled up"
            response, refused_body = refused
            assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "the broker's disk is full [CL:" in (response.remark or "")
            # reads go on
            pulled = await client.pull("Full", queue_id=0, offset=0, max_msgs=4)
            assert pulled.code == ResponseCode.SUCCESS
            assert [m.body for m in messages_of(pulled)] == acked[:4]
            # heartbeats and topic creation still answer (their files wait for space)
            beat = await client.heartbeat("cid-full", group="g-full", subscriptions={"Full": "*"})
            assert beat.code == ResponseCode.SUCCESS, beat.remark
            await broker.create_topic("AfterFull", queues=1)
            # space returns: the same message is accepted, without a restart
            filler.unlink()
            sent = await client.send_message("Full", refused_body, queue_id=0)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            assert sent.ext_fields["queueOffset"] == str(len(acked))
            acked.append(refused_body)
        finally:
            await client.close()
    async with EmbeddedBroker(data, **options) as broker:
        client = await RawClient.connect(broker.broker_addr)
        try:
            got: list[bytes] = []
            offset = 0
            while True:
                pulled = await client.pull("Full", queue_id=0, offset=offset, max_msgs=32)
                if pulled.code != ResponseCode.SUCCESS:
                    break
                got += [m.body for m in messages_of(pulled)]
                offset = int(pulled.ext_fields["nextBeginOffset"])
            # exactly the acknowledged messages: the refused attempt left no copy
            assert got == acked
            assert broker.store.topics.get("AfterFull") is not None
        finally:
            await client.close()


# ---------------------------------------------------------------------- retention


def test_clean_service_keeps_apaches_defaults() -> None:
    policy = RetentionPolicy()
    assert (policy.file_reserved_time, policy.delete_when, policy.disk_max_used_space_ratio) == (
        72.0,
        "04",
        75,
    )
    assert policy.clean_resource_interval == 10.0
    assert (policy.disk_space_clean_forcibly_ratio, policy.disk_space_warning_level_ratio) == (
        0.85,
        0.90,
    )
    broker = EmbeddedBroker("/nonexistent-never-started")
    assert broker.retention == policy
    with pytest.raises(RmqkError, match="delete_when"):
        EmbeddedBroker("/nonexistent-never-started", delete_when="25")


def _filled(root: Path, policy: RetentionPolicy, clock: list[int]) -> MessageStore:
    store = make_store(root, retention=policy, clock=lambda: clock[0])
    store.open()
    for i in range(300):
        assert put(store, i, size=400).ok
    assert len(store.commit_log.segments) >= 5
    return store


def test_clean_service_by_hour_by_space_forcibly_and_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = int(time.time() * 1000) + 3_600_000  # every segment is an hour old
    other_hour = (time.localtime(now / 1000).tm_hour + 12) % 24
    policy = RetentionPolicy(file_reserved_time=0.5, delete_when=f"{other_hour:02d}")
    clock = [now]
    store = _filled(tmp_path / "s", policy, clock)
    try:
        used = [0.5]
        monkeypatch.setattr(store, "disk_used_ratio", lambda: used[0])
        segments = len(store.commit_log.segments)
        assert store.run_clean_service() == 0  # not the hour, disk not full
        used[0] = 0.80  # above disk_max_used_space_ratio: expired segments go
        removed = store.run_clean_service()
        assert removed == segments - 1 and len(store.commit_log.segments) == 1
        assert store.min_offset("K", 0) > 0
        assert put(store, 300).ok
        # above the forcible ratio even unexpired segments go; never the active one
        clock[0] = int(time.time() * 1000)
        for i in range(301, 500):
            assert put(store, i, size=400).ok
        used[0] = 0.87
        assert store.run_clean_service() >= 1 and len(store.commit_log.segments) == 1
        # above the warning level puts are refused as disk full, reads go on
        used[0] = 0.95
        store.run_clean_service()
        refused = put(store, 999)
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert refused.error is not None and "disk full" in refused.error
        got = store.get_messages("K", 0, store.min_offset("K", 0), 1)
        assert got.status is GetMessageStatus.FOUND
        used[0] = 0.5
        store.run_clean_service()
        assert put(store, 1000).ok
    finally:
        store.close()


async def test_the_broker_deletes_expired_segments_on_its_own(broker_factory: Any) -> None:
    every_hour = ";".join(str(h) for h in range(24))
    broker = await broker_factory(
        segment_size=16 * 1024,
        max_message_size=8192,
        file_reserved_time=0.0,
        delete_when=every_hour,
        clean_resource_interval=0.05,
    )
    await broker.create_topic("Old", queues=1)
    client = await RawClient.connect(broker.broker_addr)
    try:
        for i in range(120):
            sent = await client.send_message("Old", b"%06d" % i + b"z" * 400, queue_id=0)
            assert sent.code == ResponseCode.SUCCESS
        deadline = time.monotonic() + 10
        while len(broker.store.commit_log.segments) > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(broker.store.commit_log.segments) == 1
        assert broker.store.min_offset("Old", 0) > 0
        sent = await client.send_message("Old", b"after", queue_id=0)
        assert sent.code == ResponseCode.SUCCESS
    finally:
        await client.close()


# ------------------------------------------------------------- create_topic (#14)


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=140))
def test_create_topic_refuses_exactly_the_names_the_broker_refuses(name: str) -> None:
    broker = EmbeddedBroker("/nonexistent-never-started")
    with pytest.raises(RmqkError) as raised:
        asyncio.run(broker.create_topic(name))
    refused = "cannot create topic" in str(raised.value)
    assert refused == (validate_topic(name) is not None)


async def test_create_topic_with_a_bad_name_creates_nothing(broker: Any) -> None:
    for bad in ("", "a b", "x" * 128, "topic/../etc", "caf\u00e9"):
        with pytest.raises(RmqkError, match="cannot create topic"):
            await broker.create_topic(bad)
        assert broker.store.topics.get(bad) is None
    with contextlib.suppress(RmqkError):
        await broker.create_topic("Good_1-%|")
    assert broker.store.topics.get("Good_1-%|") is not None
