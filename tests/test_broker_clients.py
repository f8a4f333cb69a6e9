"""Embedded broker: heartbeats, group membership notifications, queue locks and
relayed admin calls, over real TCP."""

from __future__ import annotations

import asyncio
import json

import attrs
import pytest
from test_broker_support import RawClient, json_body

from rmqk.wire.protocol import RPC_ONEWAY, RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)


async def _expect_notify(client: RawClient, group: str, timeout: float = 5.0) -> None:
    request = await client.next_inbound(timeout)
    assert request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert request.flag & RPC_ONEWAY
    assert request.ext_fields == {"consumerGroup": group}


async def _expect_silence(client: RawClient, seconds: float = 0.3) -> None:
    await asyncio.sleep(seconds)
    assert client.drain_inbound() == []


async def _consumer_ids(client: RawClient, group: str) -> list[str] | None:
    answer = await client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if answer.code != ResponseCode.SUCCESS:
        return None
    return sorted(json_body(answer)["consumerIdList"])


async def test_join_change_and_leave_notify_the_group(broker):
    a = await RawClient.connect(broker.broker_addr)
    b = await RawClient.connect(broker.broker_addr)
    try:
        assert (await a.heartbeat("10.0.0.1@a", "grp", {"T": "*"})).code == ResponseCode.SUCCESS
        await _expect_notify(a, "grp")
        # The same heartbeat again changes nothing.
        await a.heartbeat("10.0.0.1@a", "grp", {"T": "*"})
        await _expect_silence(a)

        await b.heartbeat("10.0.0.2@b", "grp", {"T": "*"})
        await _expect_notify(a, "grp")
        await _expect_notify(b, "grp")
        assert await _consumer_ids(a, "grp") == ["10.0.0.1@a", "10.0.0.2@b"]

        # A newer subVersion of a known topic replaces it silently; a new topic notifies.
        await a.heartbeat("10.0.0.1@a", "grp", {"T": "x"}, sub_version=5)
        await _expect_silence(a)
        await a.heartbeat("10.0.0.1@a", "grp", {"T": "*", "U": "*"}, sub_version=6)
        await _expect_notify(a, "grp")
        await _expect_notify(b, "grp")

        left = await b.call(
            RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.2@b", "consumerGroup": "grp"}
        )
        assert left.code == ResponseCode.SUCCESS
        await _expect_notify(a, "grp")
        assert await _consumer_ids(a, "grp") == ["10.0.0.1@a"]
    finally:
        await a.close()
        await b.close()


async def test_channel_close_notifies_the_rest(broker):
    a = await RawClient.connect(broker.broker_addr)
    b = await RawClient.connect(broker.broker_addr)
    try:
        await a.heartbeat("10.0.0.1@a", "closing", {"T": "*"})
        await b.heartbeat("10.0.0.2@b", "closing", {"T": "*"})
        a.drain_inbound()
        await asyncio.sleep(0.1)
        a.drain_inbound()
        await b.close()
        await _expect_notify(a, "closing")
        assert await _consumer_ids(a, "closing") == ["10.0.0.1@a"]
    finally:
        await a.close()


async def test_missing_heartbeats_expire_a_member(broker_factory):
    broker = await broker_factory(channel_expiry=0.6)
    a = await RawClient.connect(broker.broker_addr)
    b = await RawClient.connect(broker.broker_addr)

    async def keep_alive() -> None:
        while True:
            await a.heartbeat("10.0.0.1@a", "expiring", {"T": "*"})
            await asyncio.sleep(0.1)

    beat = asyncio.ensure_future(keep_alive())
    try:
        await b.heartbeat("10.0.0.2@b", "expiring", {"T": "*"})
        await asyncio.sleep(0.1)
        a.drain_inbound()
        # b goes silent: it is dropped, its connection closed, and a is told.
        await asyncio.wait_for(b.closed.wait(), 10)
        await _expect_notify(a, "expiring")
        assert await _consumer_ids(a, "expiring") == ["10.0.0.1@a"]
    finally:
        beat.cancel()
        await a.close()
        await b.close()


async def test_unknown_group_answers(broker):
    c = await RawClient.connect(broker.broker_addr)
    try:
        answer = await c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "ghost"})
        assert (answer.code, answer.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "no consumer for this group, ghost",
        )
        conns = await c.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ghost"})
        assert (conns.code, conns.remark) == (
            ResponseCode.CONSUMER_NOT_ONLINE,
            "the consumer group[ghost] not online",
        )
        info = await c.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "ghost", "clientId": "x@y"}
        )
        assert (info.code, info.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The Consumer <ghost> <x@y> not online",
        )
    finally:
        await c.close()


async def test_heartbeat_creates_the_retry_topic_and_lists_connections(broker):
    c = await RawClient.connect(broker.broker_addr)
    try:
        await c.heartbeat("10.0.0.1@a", "rgroup", {"T": "TagA || TagB"}, producer_groups=["pg"])
        cfg = broker.store.topics.get("%RETRY%rgroup")
        assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (1, 1, 6)
        assert broker.namesrv.routes.route("%RETRY%rgroup") is not None
        assert "pg" in broker.processors.clients.producers
        conns = json_body(
            await c.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "rgroup"})
        )
        assert [x["clientId"] for x in conns["connectionSet"]] == ["10.0.0.1@a"]
        assert conns["connectionSet"][0]["language"] == "JAVA"
        assert conns["messageModel"] == "CLUSTERING"
        sub = conns["subscriptionTable"]["T"]
        assert sub["tagsSet"] == ["TagA", "TagB"]
        assert sorted(sub["codeSet"]) == sorted([2598919, 2598920])
        bad = await c.call(RequestCode.HEART_BEAT, body=b"{not json")
        assert bad.code == ResponseCode.SYSTEM_ERROR
    finally:
        await c.close()


async def test_consumer_running_info_is_relayed_to_the_client(broker):
    consumer = await RawClient.connect(broker.broker_addr)
    admin = await RawClient.connect(broker.broker_addr)
    seen: list[RemotingCommand] = []

    def answer(request: RemotingCommand) -> RemotingCommand:
        seen.append(request)
        return RemotingCommand(0, body=b'{"running":true}', remark="fine")

    consumer.answer[RequestCode.GET_CONSUMER_RUNNING_INFO] = answer
    try:
        await consumer.heartbeat("10.0.0.9@c", "relay", {"T": "*"})
        reply = await admin.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "relay", "clientId": "10.0.0.9@c", "jstackEnable": False},
        )
        assert reply.code == ResponseCode.SUCCESS
        assert reply.remark == "fine"
        assert json.loads(reply.body) == {"running": True}
        assert seen[0].ext_fields == {
            "consumerGroup": "relay",
            "clientId": "10.0.0.9@c",
            "jstackEnable": "false",
        }
    finally:
        await consumer.close()
        await admin.close()


def _lock_body(group: str, client_id: str, queues: list[int]) -> bytes:
    return json.dumps(
        {
            "consumerGroup": group,
            "clientId": client_id,
            "mqSet": [{"topic": "Ordered", "brokerName": "broker-a", "queueId": q} for q in queues],
        }
    ).encode()


async def _lock(c: RawClient, client_id: str, queues: list[int]) -> list[int]:
    answer = await c.call(RequestCode.LOCK_BATCH_MQ, body=_lock_body("lg", client_id, queues))
    assert answer.code == ResponseCode.SUCCESS
    return sorted(m["queueId"] for m in json_body(answer)["lockOKMQSet"])


async def test_lock_exclusivity_unlock_and_expiry(broker_factory):
    broker = await broker_factory(lock_expiry=0.5)
    c = await RawClient.connect(broker.broker_addr)
    try:
        assert await _lock(c, "a", [0, 1]) == [0, 1]
        assert await _lock(c, "b", [1, 2]) == [2]
        assert await _lock(c, "a", [0, 1, 2]) == [0, 1]
        unlock = await c.call(RequestCode.UNLOCK_BATCH_MQ, body=_lock_body("lg", "b", [1]))
        assert unlock.code == ResponseCode.SUCCESS  # not b's lock: ignored
        assert await _lock(c, "b", [1]) == []
        await c.call(RequestCode.UNLOCK_BATCH_MQ, body=_lock_body("lg", "a", [1]))
        assert await _lock(c, "b", [1]) == [1]

        # a renews queue 0 while b's locks lapse.
        for _ in range(4):
            await asyncio.sleep(0.2)
            assert await _lock(c, "a", [0]) == [0]
        assert await _lock(c, "a", [1, 2]) == [1, 2]
        assert await _lock(c, "b", [0]) == []
    finally:
        await c.close()


async def test_relayed_call_times_out_when_the_client_is_silent(broker):
    broker.processors.settings = attrs.evolve(broker.processors.settings, call_client_timeout=0.3)
    consumer = await RawClient.connect(broker.broker_addr)
    admin = await RawClient.connect(broker.broker_addr)
    try:
        await consumer.heartbeat("10.0.0.9@mute", "mute", {"T": "*"})
        reply = await admin.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "mute", "clientId": "10.0.0.9@mute"},
        )
        assert reply.code == ResponseCode.CONSUME_MSG_TIMEOUT
        assert reply.remark.startswith("consumer <mute> <10.0.0.9@mute> Timeout: ")
        # The client saw the forwarded request (and the join notification).
        codes = {r.code for r in consumer.drain_inbound()}
        assert RequestCode.GET_CONSUMER_RUNNING_INFO in codes
    finally:
        await consumer.close()
        await admin.close()
