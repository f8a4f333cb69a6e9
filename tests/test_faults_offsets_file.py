"""A broadcasting consumer whose offsets files are both unreadable (issue 19, item 5).

Java's LocalFileOffsetStore.load throws when the file and its ``.bak`` both fail
to parse, so the consumer does not start. rmqk used to start at
``consume_from_where`` (for broadcasting, the queue's end) and skip silently
everything sent meanwhile; now it refuses, naming the files and what to do.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, produce, wait_for

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model import MessageQueue
from rmqk.model.errors import ClientError
from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.offsets.local_file import LocalFileOffsetStore, encode_offsets

pytestmark = pytest.mark.timeout(90)

Q0 = MessageQueue("T", "b", 0)


def corrupt(path: Path) -> None:
    path.write_bytes(b'{"format": "rmqk-local-offsets", "vers')


def empty(path: Path) -> None:
    path.write_bytes(b"")


def missing(path: Path) -> None:
    path.unlink(missing_ok=True)


def unreadable(path: Path) -> None:
    # A directory in its place: reading fails with an OSError, whoever runs the test.
    path.unlink(missing_ok=True)
    path.mkdir()


def valid(path: Path) -> None:
    path.write_bytes(encode_offsets({Q0: 7}, "g", "cid"))


Damage = Callable[[Path], None]


def damaged_store(tmp_path: Path, main: Damage, bak: Damage) -> LocalFileOffsetStore:
    """A store whose file and backup were both valid, then took ``main`` and ``bak``."""
    store = LocalFileOffsetStore(tmp_path, "cid", "g")
    store.path.parent.mkdir(parents=True)
    valid(store.path)
    valid(store.bak_path)
    main(store.path)
    bak(store.bak_path)
    return store


@pytest.mark.parametrize(
    ("main", "bak"),
    [
        (corrupt, corrupt),
        (unreadable, corrupt),
        (corrupt, unreadable),
        (missing, corrupt),
        (empty, corrupt),
        (corrupt, missing),
        (corrupt, empty),
    ],
)
async def test_load_refuses_when_no_file_holds_offsets(
    tmp_path: Path, main: Damage, bak: Damage
) -> None:
    store = damaged_store(tmp_path, main, bak)
    with pytest.raises(ClientError) as caught:
        await store.load()
    message = str(caught.value)
    assert str(store.path) in message and str(store.bak_path) in message
    assert "move both files aside to start from consume_from_where" in message
    assert f"Restore a good copy of {store.path.name}" in message


@pytest.mark.parametrize(
    ("main", "bak"),
    [(missing, missing), (empty, missing), (empty, empty), (corrupt, valid), (missing, valid)],
)
async def test_load_starts_when_nothing_was_lost(tmp_path: Path, main: Damage, bak: Damage) -> None:
    store = damaged_store(tmp_path, main, bak)
    await store.load()
    expected = {Q0: 7} if bak is valid else {}
    assert store.clone_offset_table("") == expected


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        await create_topic(b, "Fanout", 2)
        yield b


async def test_broadcasting_consumer_refuses_to_start_on_unreadable_offsets(
    broker: Any, tmp_path: Path
) -> None:
    got: list[bytes] = []
    offsets_dir = tmp_path / "offsets"

    def member() -> AsyncPushConsumer:
        c = AsyncPushConsumer(
            "g-bc",
            namesrv_addr=broker.namesrv_addr,
            message_model="BROADCASTING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            instance_name="m1",
            offset_store_options={"dir": str(offsets_dir)},
        )
        c.subscribe("Fanout")

        @c.register_listener
        def handle(messages: list[MessageExt]) -> None:
            got.extend(m.body for m in messages)

        return c

    first = member()
    await first.start()
    try:
        await produce(broker.namesrv_addr, "Fanout", (f"a{i}".encode() for i in range(10)))
        await wait_for(lambda: len(got) >= 10, 20, "the first messages")
    finally:
        await first.shutdown()  # persists the offsets
    (path,) = offsets_dir.rglob("offsets.json")

    # Sent while the member is down; then both files are damaged (a good copy kept).
    await produce(broker.namesrv_addr, "Fanout", (f"b{i}".encode() for i in range(10)))
    bak = path.with_name("offsets.json.bak")
    good = tmp_path / "good-offsets.json"
    shutil.copy(path, good)
    corrupt(path)
    corrupt(bak)
    got.clear()
    with pytest.raises(ClientError) as caught:
        await member().start()
    assert str(path) in str(caught.value) and str(bak) in str(caught.value)
    assert got == []

    # Restoring the good copy lets it go on where it was: nothing sent meanwhile is lost.
    shutil.copy(good, path)
    again = member()
    await again.start()
    sent_meanwhile = {f"b{i}".encode() for i in range(10)}
    try:
        await wait_for(lambda: sent_meanwhile <= set(got), 20, "the messages sent while down")
    finally:
        await again.shutdown()
    # At least once: a message whose offset had not reached the file may come again.
    assert set(got) <= sent_meanwhile | {f"a{i}".encode() for i in range(10)}
