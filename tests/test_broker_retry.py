"""Embedded broker: CONSUMER_SEND_MSG_BACK to %RETRY% with delay levels, and %DLQ%."""

from __future__ import annotations

import asyncio

import pytest
from test_broker_support import RawClient, messages_of

from rmqk.model.message import MessageExt
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

LEVELS = " ".join(["50ms"] * 18)


@pytest.fixture
async def setup(broker_factory):
    broker = await broker_factory(delay_levels=LEVELS)
    client = await RawClient.connect(broker.broker_addr)
    yield broker, client
    await client.close()


async def _wait_pull(client: RawClient, topic: str, offset: int = 0) -> list[MessageExt]:
    for _ in range(200):
        response = await client.pull(topic, offset=offset)
        if response.code == ResponseCode.SUCCESS:
            return messages_of(response)
        await asyncio.sleep(0.02)
    raise AssertionError(f"nothing arrived in {topic}")


async def _send_back(client: RawClient, msg: MessageExt, delay_level: int, **extra: object):
    fields: dict[str, object] = {
        "offset": msg.commit_log_offset,
        "group": "cg",
        "delayLevel": delay_level,
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": False,
    }
    fields.update(extra)
    version = int(fields.pop("version", 409))  # type: ignore[call-overload]
    return await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, fields, version=version)


async def test_send_back_goes_to_retry_after_the_delay(setup):
    broker, client = setup
    sent = await client.send_message(
        "Work", b"payload", tags="TagA", keys="K", properties={"UNIQ_KEY": "U1"}, born_timestamp=42
    )
    [original] = messages_of(await client.pull("Work"))
    back = await _send_back(client, original, delay_level=2)
    assert back.code == ResponseCode.SUCCESS
    assert back.remark is None
    assert back.ext_fields == {}

    [retry] = await _wait_pull(client, "%RETRY%cg")
    assert retry.topic == "%RETRY%cg"
    assert retry.body == b"payload"
    assert retry.reconsume_times == 1
    # Stored again only once its delay level (50 ms here) had passed.
    assert retry.store_timestamp - original.store_timestamp >= 50
    assert retry.born_timestamp == 42
    assert retry.born_host == original.born_host
    assert retry.store_host == broker.broker_addr
    props = retry.properties
    assert props["RETRY_TOPIC"] == "Work"
    assert props["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
    assert props["DELAY"] == "2"
    assert props["REAL_TOPIC"] == "%RETRY%cg"
    assert props["REAL_QID"] == "0"
    assert props["WAIT"] == "false"
    assert (props["TAGS"], props["KEYS"], props["UNIQ_KEY"]) == ("TagA", "K", "U1")

    # A second round keeps the first origin and topic; level 0 means 3 + reconsumeTimes.
    assert (await _send_back(client, retry, delay_level=0)).code == ResponseCode.SUCCESS
    [again] = await _wait_pull(client, "%RETRY%cg", offset=1)
    assert again.reconsume_times == 2
    assert again.properties["DELAY"] == "4"
    assert again.properties["RETRY_TOPIC"] == "Work"
    assert again.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]


async def test_dead_letter_after_max_reconsume_times(setup):
    broker, client = setup
    await client.send_message("Work", b"x", reconsume_times=16)
    await client.send_message("Work", b"y", reconsume_times=1)
    await client.send_message("Work", b"z")
    over, one, fresh = messages_of(await client.pull("Work"))

    # The default limit is 16.
    assert (await _send_back(client, over, 1)).code == ResponseCode.SUCCESS
    [dead] = await _wait_pull(client, "%DLQ%cg")
    assert dead.body == b"x"
    assert dead.reconsume_times == 17
    assert dead.properties["DELAY"] == "0"
    assert dead.properties["RETRY_TOPIC"] == "Work"
    cfg = broker.store.topics.get("%DLQ%cg")
    assert (cfg.read_queue_nums, cfg.write_queue_nums) == (1, 1)

    # The header's maxReconsumeTimes counts from client version 3.4.9 on.
    assert (await _send_back(client, one, 1, maxReconsumeTimes=1)).code == ResponseCode.SUCCESS
    assert [m.body for m in await _wait_pull(client, "%DLQ%cg", offset=1)] == [b"y"]
    await _send_back(client, one, 1, maxReconsumeTimes=1, version=100)
    assert [m.body for m in await _wait_pull(client, "%RETRY%cg")] == [b"y"]

    # A negative delay level goes straight to the DLQ.
    assert (await _send_back(client, fresh, -1)).code == ResponseCode.SUCCESS
    assert [m.body for m in await _wait_pull(client, "%DLQ%cg", offset=2)] == [b"z"]


async def test_send_back_of_an_unknown_offset(setup):
    _, client = setup
    back = await client.call(
        RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 123456789, "group": "cg", "delayLevel": 1}
    )
    assert (back.code, back.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "look message by offset failed, 123456789",
    )
    missing = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 1, "group": "cg"})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark.endswith("the custom field <delayLevel> is null")


async def test_client_side_retry_send_past_the_limit_lands_in_the_dlq(setup):
    _, client = setup
    sent = await client.send_message(
        "%RETRY%cg", b"fallback", reconsume_times=3, max_reconsume_times=3
    )
    assert sent.code == ResponseCode.SUCCESS
    [dead] = await _wait_pull(client, "%DLQ%cg")
    assert dead.body == b"fallback"
    assert dead.reconsume_times == 3
