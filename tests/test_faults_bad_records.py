"""Bad records in a queue (issue 19, items 7 and 10): delivered around, never a stall.

Over real TCP against the embedded broker. The bad records are made as a buggy
producer or a damaged disk would make them: a body flagged compressed that does
not inflate, a decompression bomb (100 MiB of zeros in about 100 KiB), and a record
whose TOTALSIZE was overwritten in the commit log file under the running broker.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from engine_support import admin_transport, create_topic, push_consumer, wait_for

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.remoting.message_codec import ZLIB_COMPRESSED_SYS_FLAG, prefix_size
from rmqk.transport import SendMessageRequest

pytestmark = pytest.mark.timeout(90)

TOPIC = "Damaged"
SKIP_LOG = "skipped a message record that cannot be decoded"


def zlib_bomb(size: int) -> bytes:
    """``size`` zero bytes deflated, made a chunk at a time so the test never holds them."""
    deflater = zlib.compressobj(9)
    chunk = bytes(1 << 22)
    parts = [deflater.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join([*parts, deflater.flush()])


async def send_raw(broker: Any, bodies: list[tuple[bytes, int]]) -> None:
    """Each (body, sysFlag) stored as given, to queue 0, in order."""
    transport = await admin_transport(broker.namesrv_addr)
    try:
        for body, sys_flag in bodies:
            request = SendMessageRequest(
                producer_group="raw-producer",
                topic=TOPIC,
                queue_id=0,
                sys_flag=sys_flag,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties="",
            )
            await transport.send_message(broker.broker_addr, broker.broker_name, request, body)
    finally:
        await transport.close()


def break_total_size(data_dir: Path, marker: bytes) -> None:
    """Overwrite the TOTALSIZE of the record whose body is ``marker``, in the file itself."""
    for path in sorted(data_dir.rglob("*")):
        if not path.is_file() or "commitlog" not in path.parts:
            continue
        data = path.read_bytes()
        at = data.find(marker)
        if at < 0:
            continue
        start = at - prefix_size(0)  # loopback hosts: the IPv4 prefix
        (total,) = struct.unpack_from(">i", data, start)
        assert 0 < total < 4096, total
        with open(path, "r+b") as f:
            f.seek(start)
            f.write(struct.pack(">i", 7))  # smaller than any record
        return
    raise AssertionError(f"record {marker!r} not found in the commit log")


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        await create_topic(b, TOPIC, 1)
        yield b


def body_collector(
    broker: Any, group: str, **options: Any
) -> tuple[AsyncPushConsumer, list[bytes]]:
    """A push consumer of ``TOPIC`` and the list the bodies it receives land in."""
    got: list[bytes] = []
    consumer = push_consumer(broker, group, **options)
    consumer.subscribe(TOPIC)

    @consumer.register_listener
    def handle(messages: list[MessageExt]) -> None:
        got.extend(m.body for m in messages)

    return consumer, got


async def test_bad_records_are_skipped_once_and_the_rest_delivered(
    broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bomb = zlib_bomb(100 * 1024 * 1024)
    assert len(bomb) < 200 * 1024  # stored well under the broker's 4 MiB limit
    records = [
        (b"m0", 0),
        (b"m1", 0),
        (b"flagged compressed, not zlib", ZLIB_COMPRESSED_SYS_FLAG),  # offset 2
        (b"m3", 0),
        (bomb, ZLIB_COMPRESSED_SYS_FLAG),  # offset 4: inflates past the 64 MiB default
        (b"m5", 0),
        (b"m6-damaged-on-disk", 0),  # offset 6: its TOTALSIZE is overwritten below
        (b"m7", 0),
        (zlib.compress(b"m8" * 5000), ZLIB_COMPRESSED_SYS_FLAG),  # a good compressed body
        (b"m9", 0),
    ]
    await send_raw(broker, records)
    break_total_size(tmp_path / "broker", b"m6-damaged-on-disk")

    # One consume worker: the order asserted below is the queue's. With the default
    # 20 the first pull's messages go to as many threads at once, and their calls may
    # land in any order (seen on Python 3.13, about one run in three).
    consumer, got = body_collector(
        broker, "g-damaged", pull_batch_size=32, consume_thread_min=1, consume_thread_max=1
    )
    caplog.set_level(logging.ERROR)
    await consumer.start()
    try:
        await wait_for(lambda: b"m9" in got, 20, "the record after every bad one")
        # Long enough for several re-pulls a second if a bad offset were retried.
        await asyncio.sleep(2.5)
        stats = consumer.stats.topics[TOPIC]
    finally:
        await consumer.shutdown()

    assert got == [b"m0", b"m1", b"m3", b"m5", b"m7", b"m8" * 5000, b"m9"]
    errors = [r.getMessage() for r in caplog.records if SKIP_LOG in r.getMessage()]
    # One error per bad record, naming its queue and offset; never repeated.
    assert len(errors) == 3, errors
    for offset, error in zip((2, 4, 6), errors, strict=True):
        assert f"[topic={TOPIC}, brokerName=" in error and "queueId=0]" in error, error
        assert f"queue offset {offset}:" in error, error
    assert "does not inflate" in errors[0]
    assert "max_decompressed_body_size" in errors[1]
    assert "TOTALSIZE" in errors[2]
    assert stats.skipped_records_total == 3


async def test_a_smaller_cap_makes_a_large_body_a_bad_record(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    large = zlib.compress(b"x" * 300_000)
    await send_raw(broker, [(large, ZLIB_COMPRESSED_SYS_FLAG), (b"after", 0)])
    consumer, got = body_collector(broker, "g-capped", max_decompressed_body_size=100_000)
    caplog.set_level(logging.ERROR)
    await consumer.start()
    try:
        await wait_for(lambda: b"after" in got, 20, "the message after the large one")
    finally:
        await consumer.shutdown()
    assert got == [b"after"]
    errors = [r.getMessage() for r in caplog.records if SKIP_LOG in r.getMessage()]
    assert len(errors) == 1 and "(100000 bytes)" in errors[0], errors
