"""The producer: Java's validation, queue selection, send modes, over the embedded broker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from engine_support import create_topic, max_offsets

from rmqk.engine.producer import AsyncProducer, select_by_hash
from rmqk.engine.sync import Producer
from rmqk.model import MessageQueue, SendStatus, java_string_hash
from rmqk.model.errors import ClientError
from rmqk.model.message import Message

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message("bad topic", b"x"), "contains illegal characters"),
        (Message("TBW102", b"x"), "AUTO_CREATE_TOPIC_KEY"),
        (Message("T", b""), "body length is zero"),
        (Message("T", b"x" * (4 * 1024 * 1024 + 1)), "over max value"),
        (Message("", b"x"), "topic is blank"),
    ],
)
async def test_invalid_messages_are_refused_before_sending(
    broker: Any, message: Message, error: str
) -> None:
    async with AsyncProducer("p-validate", namesrv_addr=broker.namesrv_addr) as p:
        with pytest.raises(ClientError, match=error):
            await p.send(message)


async def test_send_modes_and_key_hash_selection(broker: Any) -> None:
    await create_topic(broker, "Sends", 4)
    async with AsyncProducer("p-modes", namesrv_addr=broker.namesrv_addr) as p:
        result = await p.send(Message("Sends", b"one", tags="A", keys="k1"))
        assert result.status is SendStatus.SEND_OK
        assert len(result.msg_id) == 32 and len(result.offset_msg_id) == 32
        queues = await p.queues_for("Sends")
        assert len(queues) == 4
        # The same key always lands on the queue its Java hash code selects.
        results = [await p.send_orderly(Message("Sends", b"o"), "order-42") for _ in range(5)]
        expected = queues[abs(java_string_hash("order-42")) % 4]
        assert {r.queue for r in results} == {expected}
        assert select_by_hash(queues, Message("Sends", b"x"), "order-42") == expected
        await p.send_oneway(Message("Sends", b"fire-and-forget"))
        batch = await p.send_batch([Message("Sends", f"b{i}".encode()) for i in range(10)])
        assert batch.status is SendStatus.SEND_OK
        with pytest.raises(ClientError, match="same"):
            await p.send_batch([Message("Sends", b"x"), Message("Other", b"y")])
        with pytest.raises(ClientError, match="TimeDelayLevel"):
            await p.send_batch([Message("Sends", b"x", delay_level=2)])
    for _ in range(50):
        if (
            sum((await max_offsets(broker.namesrv_addr, broker.broker_addr, "Sends", 4)).values())
            == 17
        ):
            break
        await asyncio.sleep(0.05)
    total = await max_offsets(broker.namesrv_addr, broker.broker_addr, "Sends", 4)
    assert sum(total.values()) == 1 + 5 + 1 + 10


async def test_unknown_topic_is_auto_created_through_the_template_route(broker: Any) -> None:
    async with AsyncProducer("p-auto", namesrv_addr=broker.namesrv_addr) as p:
        result = await p.send(Message("BrandNew", b"hello"))
    assert result.queue.topic == "BrandNew"


async def test_sync_producer_facade(broker: Any) -> None:
    await create_topic(broker, "SyncSends", 2)
    results: list[Any] = []

    def run() -> None:
        with Producer("p-sync", namesrv_addr=broker.namesrv_addr) as p:
            results.append(p.send(Message("SyncSends", b"s", tags="T")))
            mq = MessageQueue("SyncSends", broker.broker_name, 1)
            results.append(p.send(Message("SyncSends", b"q"), queue=mq))

    thread = threading.Thread(target=run)
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0.05)
    assert [r.status for r in results] == [SendStatus.SEND_OK, SendStatus.SEND_OK]
    assert results[1].queue.queue_id == 1


def test_group_names_are_checked() -> None:
    with pytest.raises(ClientError, match="DEFAULT_PRODUCER"):
        AsyncProducer("DEFAULT_PRODUCER", namesrv_addr="127.0.0.1:1")
    with pytest.raises(ClientError, match="invalid"):
        AsyncProducer("bad group", namesrv_addr="127.0.0.1:1")
