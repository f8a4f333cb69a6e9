"""The offset store plugins: ``local-file`` against real files, ``remote-broker``
against the Transport interface (and over real TCP in the integration part)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

import rmqk.plugins.offsets as offsets_plugin
from rmqk.model import MessageModel, MessageQueue
from rmqk.model.errors import BrokerError, ClientError, ConfigError, RemotingConnectError
from rmqk.pluginmanager import Registries
from rmqk.plugins.offsets.local_file import (
    DIR_ENV,
    FileState,
    LocalFileOffsetStore,
    create_local_file_store,
    decode_offsets,
    encode_offsets,
    read_offset_file,
)
from rmqk.plugins.offsets.remote_broker import RemoteBrokerOffsetStore, create_remote_broker_store
from rmqk.spi import hookspecs
from rmqk.spi.contracts import OffsetStoreContext, ReadOffsetType
from rmqk.wire.protocol import ResponseCode

pytestmark = pytest.mark.timeout(60)

MEMORY = ReadOffsetType.READ_FROM_MEMORY
STORE = ReadOffsetType.READ_FROM_STORE
FIRST = ReadOffsetType.MEMORY_FIRST_THEN_STORE

Q0 = MessageQueue("Orders", "broker-a", 0)
Q1 = MessageQueue("Orders", "broker-a", 1)
Q2 = MessageQueue("Orders", "broker-b", 0)
R0 = MessageQueue("Refunds", "broker-a", 0)


def _ctx(
    options: dict[str, Any] | None = None, client: Any = None, **kw: Any
) -> OffsetStoreContext:
    return OffsetStoreContext(
        group=kw.get("group", "g1"),
        client_id=kw.get("client_id", "10.0.0.1@inst"),
        message_model=kw.get("model", MessageModel.BROADCASTING),
        options=options or {},
        client=client,
    )


def _local(tmp_path: Path, **options: Any) -> LocalFileOffsetStore:
    return create_local_file_store(_ctx({"dir": str(tmp_path), **options}))


def _either(kind: str, tmp_path: Path) -> Any:
    if kind == "local":
        return _local(tmp_path)
    return RemoteBrokerOffsetStore(FakeClient({}), "g")


def _doc(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return result


def _file_offsets(path: Path) -> dict[MessageQueue, int]:
    return decode_offsets(path.read_bytes())


# -- registration and options --------------------------------------------------------


@pytest.fixture
def private_registries() -> Iterator[Registries]:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(offsets_plugin, name="offsets")
    yield Registries(pm)


def test_plugin_registers_both_stores(private_registries: Registries, tmp_path: Path) -> None:
    reg = private_registries.offset_stores
    assert {"local-file", "remote-broker"} <= set(reg.names())
    local = reg.create("local-file", _ctx({"dir": str(tmp_path)}))
    assert isinstance(local, LocalFileOffsetStore)
    remote = reg.create("remote-broker", _ctx(client=FakeClient({})))
    assert isinstance(remote, RemoteBrokerOffsetStore)


@pytest.mark.parametrize("factory", [create_local_file_store, create_remote_broker_store])
def test_unknown_option_is_named(factory: Any) -> None:
    with pytest.raises(ConfigError) as info:
        factory(_ctx({"dri": "/x", "zzz": 1}, client=FakeClient({})))
    text = str(info.value)
    assert "offset_store_options" in text
    assert "dri" in text and "zzz" in text and "unknown option" in text


def test_local_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"persist_mode.*'fsync' or 'no-fsync'.*'always'"):
        _local(tmp_path, persist_mode="always")
    with pytest.raises(ConfigError, match=r"dir.*non-empty path"):
        create_local_file_store(_ctx({"dir": 7}))
    with pytest.raises(ConfigError, match=r"dir.*non-empty path"):
        create_local_file_store(_ctx({"dir": ""}))
    assert _local(tmp_path, persist_mode="no-fsync").fsync is False
    assert _local(tmp_path).fsync is True


def test_remote_timeout_option() -> None:
    with pytest.raises(ConfigError, match=r"timeout_ms.*integer >= 1"):
        create_remote_broker_store(_ctx({"timeout_ms": 0}, client=FakeClient({})))
    with pytest.raises(ConfigError, match=r"timeout_ms"):
        create_remote_broker_store(_ctx({"timeout_ms": True}, client=FakeClient({})))
    store = create_remote_broker_store(_ctx({"timeout_ms": 1234}, client=FakeClient({})))
    assert store.timeout_ms == 1234
    assert create_remote_broker_store(_ctx(client=FakeClient({}))).timeout_ms == 5000


def test_remote_needs_the_client() -> None:
    with pytest.raises(ClientError, match="needs the client instance"):
        create_remote_broker_store(_ctx())


def test_local_path_layout_and_dir_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _local(tmp_path)
    assert store.path == tmp_path / "10.0.0.1@inst" / "g1" / "offsets.json"
    monkeypatch.setenv(DIR_ENV, str(tmp_path / "from-env"))
    assert create_local_file_store(_ctx()).path.parent.parent.parent == tmp_path / "from-env"
    # The option wins over the environment.
    assert _local(tmp_path / "opt").path.parent.parent.parent == tmp_path / "opt"
    monkeypatch.delenv(DIR_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = create_local_file_store(_ctx()).path
    home = tmp_path / "home" / ".rocketmq_offsets"
    assert default == home / "10.0.0.1@inst" / "g1" / "offsets.json"


@pytest.mark.parametrize("client_id", ["", "..", "a/b", "a\\b"])
def test_local_rejects_ids_that_are_not_directory_names(tmp_path: Path, client_id: str) -> None:
    with pytest.raises(ClientError, match="cannot be used as a directory name"):
        create_local_file_store(_ctx({"dir": str(tmp_path)}, client_id=client_id))


async def test_local_load_says_when_the_directory_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    store = _local(blocker)
    with pytest.raises(ClientError, match=r"cannot create directory .*not-a-dir"):
        await store.load()


# -- the in-memory table (the same code in both stores) ------------------------------


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_update_offset_increase_only(kind: str, tmp_path: Path) -> None:
    store = _either(kind, tmp_path)
    store.update_offset(Q0, 10, True)  # a new queue takes the value whatever the flag
    assert await store.read_offset(Q0, MEMORY) == 10
    store.update_offset(Q0, 5, True)
    assert await store.read_offset(Q0, MEMORY) == 10
    store.update_offset(Q0, 10, True)
    store.update_offset(Q0, 11, True)
    assert await store.read_offset(Q0, MEMORY) == 11
    store.update_offset(Q0, 3, False)  # orderly commit, OFFSET_ILLEGAL fix-up, reset
    assert await store.read_offset(Q0, MEMORY) == 3
    store.update_offset(None, 7, False)  # Java ignores a null queue
    assert store.clone_offset_table("") == {Q0: 3}


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_clone_and_remove(kind: str, tmp_path: Path) -> None:
    store = _either(kind, tmp_path)
    for i, mq in enumerate((Q0, Q1, R0)):
        store.update_offset(mq, i + 1, False)
    assert store.clone_offset_table("Orders") == {Q0: 1, Q1: 2}
    assert store.clone_offset_table("") == {Q0: 1, Q1: 2, R0: 3}
    assert store.clone_offset_table("  ") == {Q0: 1, Q1: 2, R0: 3}
    assert store.clone_offset_table("Nope") == {}
    clone = store.clone_offset_table("Orders")
    clone[Q0] = 99  # a copy, not a view
    assert await store.read_offset(Q0, MEMORY) == 1
    store.remove_offset(Q1)
    store.remove_offset(Q1)
    assert await store.read_offset(Q1, MEMORY) == -1
    assert store.clone_offset_table("") == {Q0: 1, R0: 3}


# -- local-file ---------------------------------------------------------------------------


async def test_local_round_trip(tmp_path: Path) -> None:
    store = _local(tmp_path)
    await store.load()
    assert store.clone_offset_table("") == {}
    store.update_offset(Q0, 42, True)
    store.update_offset(Q2, 7, True)
    store.update_offset(R0, 0, True)
    await store.persist_all({Q0, Q2, R0})

    doc = _doc(store.path)
    assert doc["version"] == 1 and doc["format"] == "rmqk-local-offsets"
    assert doc["group"] == "g1" and doc["clientId"] == "10.0.0.1@inst"
    entry = {"topic": "Orders", "brokerName": "broker-b", "queueId": 0, "offset": 7}
    assert entry in doc["offsets"]
    assert len(doc["offsets"]) == 3

    again = _local(tmp_path)
    await again.load()
    assert again.clone_offset_table("") == {Q0: 42, Q2: 7, R0: 0}

    fresh = _local(tmp_path)  # not loaded: the store read fills memory
    assert await fresh.read_offset(Q0, MEMORY) == -1
    assert await fresh.read_offset(Q0, STORE) == 42
    assert await fresh.read_offset(Q0, MEMORY) == 42
    assert await fresh.read_offset(Q2, FIRST) == 7
    assert await fresh.read_offset(Q1, STORE) == -1
    assert await fresh.read_offset(Q1, FIRST) == -1


async def test_local_read_from_store_replaces_memory(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.update_offset(Q0, 50, False)
    await store.persist_all({Q0})
    store.update_offset(Q0, 100, True)
    # MEMORY_FIRST_THEN_STORE answers from memory when it can.
    assert await store.read_offset(Q0, FIRST) == 100
    # READ_FROM_STORE writes what it read, not increase-only.
    assert await store.read_offset(Q0, STORE) == 50
    assert await store.read_offset(Q0, MEMORY) == 50


async def test_local_minus_one_when_nothing_is_stored(tmp_path: Path) -> None:
    store = _local(tmp_path)
    assert not store.path.exists()
    assert await store.read_offset(Q0, STORE) == -1
    assert await store.read_offset(Q0, FIRST) == -1
    assert await store.read_offset(Q0, MEMORY) == -1
    await store.load()
    assert store.clone_offset_table("") == {}
    assert await store.read_offset(Q0, STORE) == -1


async def test_local_persist_all_scope(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.update_offset(Q0, 10, False)
    store.update_offset(Q1, 11, False)
    store.update_offset(Q2, 12, False)

    await store.persist_all(set())  # nothing assigned: nothing written
    assert not store.path.exists()

    await store.persist_all({Q0, R0})  # R0 has no offset in memory: not written
    assert _file_offsets(store.path) == {Q0: 10}
    # The unassigned stay in memory (unlike remote-broker, which prunes them).
    assert store.clone_offset_table("") == {Q0: 10, Q1: 11, Q2: 12}

    # Queues in the file that are not persisted this time keep their stored offset.
    store.update_offset(Q0, 20, True)
    store.update_offset(Q1, 21, True)
    await store.persist_all({Q1})
    assert _file_offsets(store.path) == {Q0: 10, Q1: 21}

    await store.persist(Q2)
    assert _file_offsets(store.path) == {Q0: 10, Q1: 21, Q2: 12}
    await store.persist(R0)  # not in memory: nothing to write
    assert _file_offsets(store.path) == {Q0: 10, Q1: 21, Q2: 12}

    # Rebalance removal: persist, then forget; the file still has it for a re-add.
    await store.persist(Q0)
    store.remove_offset(Q0)
    assert await store.read_offset(Q0, MEMORY) == -1
    assert await store.read_offset(Q0, STORE) == 20


async def test_local_keeps_previous_content_as_bak(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.update_offset(Q0, 1, True)
    await store.persist_all({Q0})
    assert not store.bak_path.exists()  # no previous content yet
    first = store.path.read_bytes()

    await store.persist_all({Q0})  # unchanged: not rewritten, no rotation
    assert not store.bak_path.exists()
    assert store.path.read_bytes() == first

    store.update_offset(Q0, 2, True)
    await store.persist_all({Q0})
    assert store.bak_path.read_bytes() == first
    assert _file_offsets(store.path) == {Q0: 2}
    assert not list(store.path.parent.glob("*.tmp"))


@pytest.mark.parametrize(
    "damage",
    [b"", b"   \n", b'{"format": "rmqk-local-offsets", "version": 1, "offsets": [{"top',
     b"\xff\xfe", b'{"format": "rmqk-local-offsets", "version": 99, "offsets": []}',
     b'{"format": "rmqk-local-offsets", "version": 1, "offsets": [{"topic": "T"}]}',
     b"[1, 2]"],
    ids=["empty", "blank", "truncated", "not-utf8", "future-version", "bad-entry", "not-object"],
)
async def test_local_falls_back_to_bak(tmp_path: Path, damage: bytes) -> None:
    store = _local(tmp_path)
    store.update_offset(Q0, 5, True)
    store.update_offset(Q1, 6, True)
    await store.persist_all({Q0, Q1})
    store.update_offset(Q0, 8, True)
    await store.persist_all({Q0, Q1})
    assert _file_offsets(store.bak_path) == {Q0: 5, Q1: 6}
    store.path.write_bytes(damage)

    again = _local(tmp_path)
    await again.load()  # never crashes on a bad file
    assert again.clone_offset_table("") == {Q0: 5, Q1: 6}
    fresh = _local(tmp_path)
    assert await fresh.read_offset(Q1, STORE) == 6


async def test_local_corrupt_file_is_set_aside_not_overwritten_with_less(tmp_path: Path) -> None:
    store = _local(tmp_path)
    for mq, off in ((Q0, 5), (Q1, 6), (Q2, 7)):
        store.update_offset(mq, off, True)
    await store.persist_all({Q0, Q1, Q2})
    store.update_offset(Q0, 9, True)
    await store.persist_all({Q0})
    good_bak = store.bak_path.read_bytes()
    garbage = b'{"format": "rmqk-local-offsets", "vers'
    store.path.write_bytes(garbage)

    # A new member that only holds Q0 in memory persists it.
    other = _local(tmp_path)
    await other.load()
    assert other.clone_offset_table("") == {Q0: 5, Q1: 6, Q2: 7}
    other.remove_offset(Q1)
    other.remove_offset(Q2)
    other.update_offset(Q0, 30, True)
    await other.persist_all({Q0})

    # Merged with the backup, the only readable copy: Q1 and Q2 are not lost.
    assert _file_offsets(store.path) == {Q0: 30, Q1: 6, Q2: 7}
    # The corrupt file is kept for inspection and did not become the backup.
    aside = list(store.path.parent.glob("offsets.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == garbage
    assert store.bak_path.read_bytes() == good_bak


async def test_local_both_files_corrupt(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"{not json")
    store.bak_path.write_bytes(b"{nor this")
    # Issue 19 item 5: a start is refused, as Java's load throws (it used to start empty).
    with pytest.raises(ClientError, match="cannot be read"):
        await store.load()
    assert store.clone_offset_table("") == {}
    assert await store.read_offset(Q0, STORE) == -1  # a local read error is -1

    store.update_offset(Q0, 4, True)
    await store.persist_all({Q0})
    assert _file_offsets(store.path) == {Q0: 4}
    kept = sorted(p.read_bytes() for p in store.path.parent.glob("*.corrupt-*"))
    assert kept == [b"{nor this", b"{not json"]
    assert await _local(tmp_path).read_offset(Q0, STORE) == 4


async def test_local_missing_main_uses_bak_and_keeps_it(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.bak_path.write_bytes(encode_offsets({Q0: 3, Q1: 4}, "g1", "x"))
    store.update_offset(Q0, 9, True)
    await store.persist_all({Q0})
    assert _file_offsets(store.path) == {Q0: 9, Q1: 4}
    assert _file_offsets(store.bak_path) == {Q0: 3, Q1: 4}


async def test_local_failed_write_keeps_old_content_and_is_swallowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _local(tmp_path)
    store.update_offset(Q0, 1, True)
    await store.persist_all({Q0})
    old = store.path.read_bytes()

    real_replace = os.replace

    def crash_on_main(src: Any, dst: Any) -> None:
        if Path(dst) == store.path:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_main)
    store.update_offset(Q0, 2, True)
    await store.persist_all({Q0})  # logged, not raised
    await store.persist(Q0)
    assert store.path.read_bytes() == old
    assert not list(store.path.parent.glob("*.tmp"))

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "fsync", failing_fsync)
    await store.persist_all({Q0})
    assert store.path.read_bytes() == old
    # no-fsync mode does not call fsync at all.
    relaxed = _local(tmp_path, persist_mode="no-fsync")
    relaxed.update_offset(Q0, 3, True)
    await relaxed.persist_all({Q0})
    assert _file_offsets(store.path) == {Q0: 3}

    monkeypatch.undo()
    store.update_offset(Q0, 4, True)
    await store.persist_all({Q0})
    assert _file_offsets(store.path) == {Q0: 4}
    assert _file_offsets(store.bak_path) == {Q0: 3}


async def test_local_update_consume_offset_to_broker_is_a_no_op(tmp_path: Path) -> None:
    store = _local(tmp_path)
    await store.update_consume_offset_to_broker(Q0, 5, True)
    assert store.clone_offset_table("") == {}
    assert not store.path.exists()


def test_file_format_round_trip_and_errors() -> None:
    data = encode_offsets({Q2: 1, Q0: 2, R0: 3}, "g", "c")
    assert decode_offsets(data) == {Q0: 2, Q2: 1, R0: 3}
    # Sorted entries: equal tables give equal bytes.
    assert data == encode_offsets({R0: 3, Q0: 2, Q2: 1}, "g", "c")
    doc = json.loads(data)
    doc["offsets"][0]["queueId"] = -1
    with pytest.raises(ValueError, match=r"offsets\[0\]: 'queueId' must be an integer >= 0"):
        decode_offsets(json.dumps(doc).encode())
    doc["offsets"][0]["queueId"] = 0
    doc["offsets"][0]["offset"] = "12"
    with pytest.raises(ValueError, match=r"'offset' must be an integer"):
        decode_offsets(json.dumps(doc).encode())


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from rmqk.model import MessageQueue
    from rmqk.plugins.offsets.local_file import LocalFileOffsetStore

    async def main():
        store = LocalFileOffsetStore(sys.argv[1], "cid", "g", fsync=sys.argv[2] == "fsync")
        await store.load()
        mqs = {MessageQueue("T", "b", i) for i in range(8)}
        n = max(store.clone_offset_table("").values(), default=0)
        print("ready", flush=True)
        while True:
            n += 1
            for mq in mqs:
                store.update_offset(mq, n, True)
            await store.persist_all(mqs)

    asyncio.run(main())
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["fsync", "no-fsync"])
def test_local_kill_9_leaves_old_or_new_content(tmp_path: Path, mode: str) -> None:
    """A writer killed at random points leaves a whole file: one version, never torn."""
    path = tmp_path / "cid" / "g" / "offsets.json"
    last = 0
    for round_ in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), mode],
            stdout=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"ready"
            deadline = time.monotonic() + 20
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            # Kill at a different point of the write cycle each round.
            time.sleep(0.05 + 0.07 * round_)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        state = read_offset_file(path)
        assert state.state is FileState.VALID, state.reason
        values = set(state.offsets.values())
        assert len(state.offsets) == 8 and len(values) == 1, state.offsets
        (current,) = values
        assert current >= last
        last = current
        bak = read_offset_file(path.with_name("offsets.json.bak"))
        if bak.state is not FileState.MISSING:
            assert bak.state is FileState.VALID, bak.reason
            assert set(bak.offsets.values()) <= set(range(current + 1))
    assert last > 0


# -- remote-broker over the Transport interface --------------------------------------


class FakeTransport:
    """Just the two offset calls of rmqk.spi.transport.Transport, kept in memory.

    ``failures`` maps an address to the exception every call to it raises.
    """

    def __init__(self) -> None:
        self.committed: dict[tuple[str, str, MessageQueue], int] = {}
        self.updates: list[tuple[str, str, MessageQueue, int, bool, int | None]] = []
        self.queries: list[tuple[str, str, MessageQueue, int | None]] = []
        self.failures: dict[str, Exception] = {}

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int | None:
        self.queries.append((addr, group, mq, timeout_ms))
        await asyncio.sleep(0)
        if addr in self.failures:
            raise self.failures[addr]
        return self.committed.get((addr, group, mq))

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        oneway: bool = True,
        timeout_ms: int | None = None,
    ) -> None:
        await asyncio.sleep(0)
        if addr in self.failures:
            raise self.failures[addr]
        self.updates.append((addr, group, mq, offset, oneway, timeout_ms))
        self.committed[(addr, group, mq)] = offset


class FakeClient:
    """ClientInstance's broker lookup: a fixed broker table and a transport."""

    def __init__(self, brokers: dict[str, str]) -> None:
        self.brokers = brokers
        self.transport: Any = FakeTransport()
        self.lookups: list[tuple[str, str]] = []

    async def find_broker_addr_for_offsets(self, broker_name: str, topic: str) -> str:
        self.lookups.append((broker_name, topic))
        try:
            return self.brokers[broker_name]
        except KeyError:
            raise ClientError(f"The broker[{broker_name}] not exist") from None


A = "10.0.0.1:10911"
B = "10.0.0.2:10911"


def _remote(**options: Any) -> tuple[RemoteBrokerOffsetStore, FakeClient]:
    client = FakeClient({"broker-a": A, "broker-b": B})
    store = create_remote_broker_store(
        _ctx(options, client=client, group="cg", model=MessageModel.CLUSTERING)
    )
    return store, client


async def test_remote_read_from_store() -> None:
    store, client = _remote(timeout_ms=777)
    client.transport.committed[(A, "cg", Q0)] = 41
    assert await store.read_offset(Q0, STORE) == 41
    assert client.transport.queries == [(A, "cg", Q0, 777)]
    assert client.lookups == [("broker-a", "Orders")]
    assert await store.read_offset(Q0, MEMORY) == 41  # cached

    store.update_offset(Q0, 60, True)
    assert await store.read_offset(Q0, FIRST) == 60  # memory first, no query
    assert len(client.transport.queries) == 1
    assert await store.read_offset(Q0, STORE) == 41  # the broker wins, not increase-only
    assert await store.read_offset(Q0, MEMORY) == 41

    assert await store.read_offset(Q1, MEMORY) == -1
    assert len(client.transport.queries) == 2  # READ_FROM_MEMORY never asks
    client.transport.committed[(A, "cg", Q1)] = 3
    assert await store.read_offset(Q1, FIRST) == 3  # falls through to the broker
    assert await store.read_offset(Q1, MEMORY) == 3


async def test_remote_minus_one_means_no_offset_minus_two_means_not_asked() -> None:
    store, client = _remote()
    # The broker has none (QUERY_NOT_FOUND: the transport answers None).
    assert await store.read_offset(Q0, STORE) == -1
    assert await store.read_offset(Q0, FIRST) == -1
    # Any other error response is a broker exception too: -1, as Java.
    client.transport.failures[A] = BrokerError(ResponseCode.SYSTEM_ERROR, "busy", A)
    assert await store.read_offset(Q0, STORE) == -1
    # A transport failure is not "no offset": -2, or CONSUME_FROM_LAST_OFFSET would skip.
    client.transport.failures[A] = RemotingConnectError(f"connect to {A} failed")
    assert await store.read_offset(Q0, STORE) == -2
    assert await store.read_offset(Q0, FIRST) == -2
    # A broker the route does not know: Java's MQClientException, also -2.
    assert await store.read_offset(MessageQueue("Orders", "broker-z", 0), STORE) == -2
    # Nothing of this was cached.
    assert store.clone_offset_table("") == {}


async def test_remote_persist_all_sends_assigned_and_prunes_the_rest() -> None:
    store, client = _remote()
    for mq, off in ((Q0, 10), (Q1, 11), (Q2, 12), (R0, 13)):
        store.update_offset(mq, off, False)

    await store.persist_all(set())  # nothing assigned: nothing sent, nothing pruned
    assert client.transport.updates == []
    assert len(store.clone_offset_table("")) == 4

    await store.persist_all({Q0, Q2, MessageQueue("Orders", "broker-a", 9)})
    assert sorted(client.transport.updates) == sorted(
        [(A, "cg", Q0, 10, True, 5000), (B, "cg", Q2, 12, True, 5000)]
    )
    assert store.clone_offset_table("") == {Q0: 10, Q2: 12}
    assert await store.read_offset(Q1, MEMORY) == -1


async def test_remote_persist_errors_are_swallowed_per_queue() -> None:
    store, client = _remote()
    store.update_offset(Q0, 10, False)
    store.update_offset(Q2, 12, False)
    store.update_offset(MessageQueue("Orders", "broker-z", 0), 1, False)
    client.transport.failures[A] = RemotingConnectError("down")
    await store.persist_all({Q0, Q2, MessageQueue("Orders", "broker-z", 0)})
    # broker-a failed and broker-z is unknown; broker-b still got its commit.
    assert client.transport.updates == [(B, "cg", Q2, 12, True, 5000)]
    await store.persist(Q0)  # swallowed too
    assert len(client.transport.updates) == 1


async def test_remote_persist_one_queue() -> None:
    store, client = _remote()
    await store.persist(Q0)  # not in memory: nothing sent
    assert client.transport.updates == []
    store.update_offset(Q0, 8, True)
    store.update_offset(Q1, 9, True)
    await store.persist(Q0)
    assert client.transport.updates == [(A, "cg", Q0, 8, True, 5000)]
    store.remove_offset(Q0)
    await store.persist(Q0)
    assert len(client.transport.updates) == 1
    assert store.clone_offset_table("") == {Q1: 9}


async def test_remote_update_consume_offset_to_broker() -> None:
    store, client = _remote()
    await store.update_consume_offset_to_broker(Q2, 99, False)
    assert client.transport.updates == [(B, "cg", Q2, 99, False, 5000)]
    # Unlike persist, the direct call reports failures to its caller.
    with pytest.raises(ClientError, match=r"broker-z\] not exist"):
        await store.update_consume_offset_to_broker(MessageQueue("T", "broker-z", 0), 1, True)
    client.transport.failures[B] = RemotingConnectError("down")
    with pytest.raises(RemotingConnectError):
        await store.update_consume_offset_to_broker(Q2, 100, True)
    # The direct call does not touch the in-memory table.
    assert store.clone_offset_table("") == {}


async def test_remote_load_is_empty() -> None:
    store, client = _remote()
    await store.load()
    assert store.clone_offset_table("") == {}
    assert client.transport.queries == [] and client.lookups == []


# -- remote-broker over real TCP -----------------------------------------------------


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    from rmqk.plugins.broker import EmbeddedBroker

    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        await b.create_topic("Orders", queues=4)
        yield b


@pytest.fixture
async def client(broker: Any) -> Any:
    from rmqk.engine.client import ClientConfig, ClientInstance

    inst = ClientInstance("127.0.0.1@offsets-test", ClientConfig([broker.namesrv_addr]))
    await inst.transport.start()
    yield inst
    await inst.transport.close()


async def _eventually(store_factory: Any, mq: MessageQueue, expected: int) -> None:
    """Oneway commits land some time after the call: poll with fresh stores."""
    deadline = time.monotonic() + 15
    seen = None
    while time.monotonic() < deadline:
        seen = await store_factory().read_offset(mq, STORE)
        if seen == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the broker's offset of {mq} stayed {seen}, expected {expected}")


def _tcp_store(client: Any, group: str = "cg-tcp") -> RemoteBrokerOffsetStore:
    return create_remote_broker_store(
        _ctx(client=client, group=group, model=MessageModel.CLUSTERING)
    )


async def test_tcp_remote_store_commits_and_reads_back(client: Any) -> None:
    q = [MessageQueue("Orders", "broker-a", i) for i in range(4)]
    store = _tcp_store(client)
    # A queue that still starts at 0 answers 0 for a new group (as Apache does).
    assert await store.read_offset(q[0], STORE) == 0

    store.update_offset(q[0], 17, False)
    store.update_offset(q[1], 5, False)
    store.update_offset(q[2], 9, False)
    await store.persist_all({q[0], q[1]})
    assert store.clone_offset_table("Orders") == {q[0]: 17, q[1]: 5}  # q2 pruned
    await _eventually(lambda: _tcp_store(client), q[0], 17)
    await _eventually(lambda: _tcp_store(client), q[1], 5)
    assert await _tcp_store(client).read_offset(q[2], STORE) == 0  # never sent

    store.update_offset(q[0], 20, True)
    await store.persist(q[0])
    await _eventually(lambda: _tcp_store(client), q[0], 20)

    # A synchronous update is there as soon as the call returns.
    await store.update_consume_offset_to_broker(q[3], 42, False)
    assert await _tcp_store(client).read_offset(q[3], STORE) == 42
    # Offsets are per group.
    assert await _tcp_store(client, "other-group").read_offset(q[3], STORE) == 0


async def test_tcp_unreachable_broker_is_minus_two(broker: Any, client: Any) -> None:
    mq = MessageQueue("Orders", "broker-a", 0)
    store = _tcp_store(client)
    store.update_offset(mq, 3, False)
    await store.persist_all({mq})
    await _eventually(lambda: _tcp_store(client), mq, 3)
    # A broker the name server does not know: the route refresh fails to find it.
    assert await store.read_offset(MessageQueue("Orders", "broker-z", 0), STORE) == -2

    await broker.stop()
    fresh = _tcp_store(client)
    assert await fresh.read_offset(mq, STORE) == -2
    assert await fresh.read_offset(mq, FIRST) == -2
    assert fresh.clone_offset_table("") == {}
    store.update_offset(mq, 4, True)
    await store.persist_all({mq})  # logged, not raised
    await store.persist(mq)
    assert store.clone_offset_table("") == {mq: 4}


class _OffsetPeer:
    """A tiny broker on real TCP answering the two offset codes the way Apache does."""

    NOT_FOUND_QUEUE = 0
    ERROR_QUEUE = 1

    def __init__(self) -> None:
        self.commits: list[tuple[str, str, int, int]] = []

    async def handle(self, conn: Any, request: Any, serialize_type: int) -> Any:
        from rmqk.plugins.broker.commands import make_response
        from rmqk.wire.protocol import RequestCode

        fields = request.ext_fields
        queue_id = int(fields["queueId"])
        if request.code == RequestCode.QUERY_CONSUMER_OFFSET:
            if queue_id == self.NOT_FOUND_QUEUE:
                return make_response(request, ResponseCode.QUERY_NOT_FOUND, "Not found")
            if queue_id == self.ERROR_QUEUE:
                return make_response(request, ResponseCode.SYSTEM_ERROR, "store error")
            return make_response(request, fields={"offset": 100 + queue_id})
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.commits.append(
                (fields["consumerGroup"], fields["topic"], queue_id, int(fields["commitOffset"]))
            )
            return make_response(request)
        return make_response(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no")


async def test_tcp_not_found_and_error_answers_are_minus_one() -> None:
    from rmqk.plugins.broker.server import RemotingServer
    from rmqk.plugins.remoting import create_tcp_transport
    from rmqk.spi.transport import TransportConfig

    peer = _OffsetPeer()
    server = RemotingServer("offset-peer", peer.handle)
    port = await server.start("127.0.0.1", 0)
    transport = create_tcp_transport(TransportConfig(namesrv_addrs=()))
    try:
        client = FakeClient({"broker-a": f"127.0.0.1:{port}"})
        client.transport = transport  # the real tcp transport; only the lookup is fixed
        store = _tcp_store(client)
        assert await store.read_offset(Q0, STORE) == -1  # QUERY_NOT_FOUND
        assert await store.read_offset(Q1, STORE) == -1  # another error code
        q2 = MessageQueue("Orders", "broker-a", 2)
        assert await store.read_offset(q2, STORE) == 102
        assert store.clone_offset_table("") == {q2: 102}
        store.update_offset(q2, 103, True)
        await store.persist_all({q2})
        deadline = time.monotonic() + 10
        while not peer.commits and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert peer.commits == [("cg-tcp", "Orders", 2, 103)]
    finally:
        await transport.close()
        await server.stop()
