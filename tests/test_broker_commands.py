"""Broker-pushed commands reaching a running push consumer (admin -> broker -> client)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from engine_support import admin_transport, committed_offsets, create_topic, produce, wait_for

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model.message import MessageExt
from rmqk.wire.bodies import decode_consumer_running_info
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)


async def running_consumer(
    broker: Any, group: str, topic: str, prefix: str, count: int
) -> tuple[AsyncPushConsumer, list[MessageExt]]:
    """``count`` messages ``<prefix><i>`` on a new two-queue ``topic`` and a started
    consumer from the first offset; the list is where its messages land."""
    await create_topic(broker, topic, 2)
    await produce(broker.namesrv_addr, topic, (f"{prefix}{i}".encode() for i in range(count)))
    got: list[MessageExt] = []
    c = AsyncPushConsumer(
        group, namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    c.subscribe(topic)
    c.register_listener(lambda msgs: got.extend(msgs))
    await c.start()
    return c, got


def reset_to_start(topic: str, group: str) -> RemotingCommand:
    """An admin's forced reset of ``group``'s offsets on ``topic`` to timestamp 0."""
    return RemotingCommand.request(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": topic, "group": group, "timestamp": 0, "isForce": True},
    )


async def test_reset_offset_from_the_broker_rewinds_a_running_consumer(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Java waits 10 s between dropping the queues and applying the offsets.
    monkeypatch.setattr(AsyncPushConsumer, "reset_offset_pause_ms", 200)
    c, got = await running_consumer(broker, "g-rewind", "Rewind", "m", 100)
    admin = await admin_transport(broker.namesrv_addr)
    try:
        await wait_for(lambda: len(got) >= 100, 20, "first pass")
        await c.persist_consumer_offset()
        await asyncio.sleep(0.3)
        request = reset_to_start("Rewind", "g-rewind")
        response = await admin.invoke(broker.broker_addr, request, 5000)
        assert response.code == ResponseCode.SUCCESS, response.remark
        await wait_for(lambda: len(got) >= 200, 20, "the rewound second pass")
        await asyncio.sleep(0.5)
    finally:
        await c.shutdown()
        await admin.close()
    bodies = sorted(m.body for m in got)
    assert bodies == sorted([f"m{i}".encode() for i in range(100)] * 2)
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-rewind", "Rewind", 2
    )
    assert sum(v or 0 for v in committed.values()) == 100


async def test_reset_offset_for_a_group_nobody_runs_is_refused(broker: Any) -> None:
    await create_topic(broker, "Nobody", 1)
    await produce(broker.namesrv_addr, "Nobody", [b"x"])
    admin = await admin_transport(broker.namesrv_addr)
    try:
        request = reset_to_start("Nobody", "g-nobody")
        response = await admin.invoke(broker.broker_addr, request, 5000)
    finally:
        await admin.close()
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "g-nobody" in (response.remark or "")


async def test_running_info_and_consume_directly_are_relayed_to_the_client(broker: Any) -> None:
    c, got = await running_consumer(broker, "g-info", "Info", "i", 10)
    admin = await admin_transport(broker.namesrv_addr)
    try:
        await wait_for(lambda: len(got) >= 10, 20, "messages")
        info_req = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "g-info", "clientId": c.client_id, "jstackEnable": False},
        )
        response = await admin.invoke(broker.broker_addr, info_req, 5000)
        assert response.code == ResponseCode.SUCCESS, response.remark
        info = decode_consumer_running_info(response.body)
        assert info.properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert broker.namesrv_addr in info.properties["PROP_NAMESERVER_ADDR"]
        assert {s.topic for s in info.subscriptions} == {"Info", "%RETRY%g-info"}
        assert len([mq for mq in info.mq_table if mq.topic == "Info"]) == 2
        assert info.status_table["Info"].consume_failed_msgs == 0

        direct_req = RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": "g-info", "clientId": c.client_id, "msgId": got[0].offset_msg_id},
        )
        response = await admin.invoke(broker.broker_addr, direct_req, 5000)
        assert response.code == ResponseCode.SUCCESS, response.remark
        result = json.loads(response.body)
        assert result["consumeResult"] == "CR_SUCCESS"
        assert result["order"] is False
        assert len(got) == 11  # the listener really consumed it once more
        assert got[-1].body == got[0].body
    finally:
        await c.shutdown()
        await admin.close()
