"""Every Transport method against a loopback peer that checks the exact header names."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from test_transport_support import PeerConnection, ScriptedServer, config

from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    PullStatus,
    SendStatus,
    build_subscription,
)
from rmqk.model.errors import BrokerError, RemotingTimeoutError
from rmqk.model.message import Message, MessageExt
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.transport import (
    ConsumerData,
    HeartbeatData,
    ProducerData,
    PullMessageRequest,
    SendMessageRequest,
)
from rmqk.wire.message_codec import encode_batch, encode_stored_message
from rmqk.wire.protocol import RPC_ONEWAY, LanguageCode, RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(30)

Answer = Callable[[RemotingCommand], RemotingCommand | None]


class Script:
    """What the peer answers, per request code."""

    def __init__(self) -> None:
        self.answers: dict[int, Answer] = {}

    def __call__(self, cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand | None:
        answer = self.answers.get(cmd.code)
        if answer is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, "unscripted")
        return answer(cmd)


@pytest.fixture
async def peer() -> AsyncIterator[tuple[ScriptedServer, Script, TcpTransport]]:
    script = Script()
    async with ScriptedServer(script) as server:
        transport = TcpTransport(config(server.addr))
        try:
            yield server, script, transport
        finally:
            await transport.close()


MQ = MessageQueue("Orders", "broker-a", 3)


def ok(**fields: object) -> Answer:
    return lambda cmd: RemotingCommand.response_to(cmd, fields=fields)


async def test_pull_message_found(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    body = b"".join(
        encode_stored_message(
            topic="Orders",
            body=f"m{i}".encode(),
            queue_id=3,
            queue_offset=100 + i,
            commit_log_offset=5000 + i,
            store_host="127.0.0.1:10911",
            properties_raw="TAGS\x01TagA",
        )
        for i in range(2)
    )
    script.answers[RequestCode.PULL_MESSAGE] = lambda cmd: RemotingCommand.response_to(
        cmd,
        fields={
            "nextBeginOffset": 102,
            "minOffset": 0,
            "maxOffset": 102,
            "suggestWhichBrokerId": 1,
        },
        body=body,
    )
    sub = build_subscription("Orders", "TagA || TagB", sub_version=77)
    request = PullMessageRequest(
        consumer_group="g1",
        topic="Orders",
        queue_id=3,
        queue_offset=100,
        max_msg_nums=32,
        sys_flag=3,
        commit_offset=99,
        suspend_timeout_millis=15000,
        subscription=sub.sub_string,
        sub_version=sub.sub_version,
    )
    result = await transport.pull_message(server.addr, request, 30_000)
    assert server.requests[0].ext_fields == {
        "consumerGroup": "g1",
        "topic": "Orders",
        "queueId": "3",
        "queueOffset": "100",
        "maxMsgNums": "32",
        "sysFlag": "3",
        "commitOffset": "99",
        "suspendTimeoutMillis": "15000",
        "subscription": "TagA || TagB",
        "subVersion": "77",
        "expressionType": "TAG",
    }
    assert server.requests[0].language == LanguageCode.PYTHON
    assert result.status is PullStatus.FOUND
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (102, 0, 102)
    assert result.suggest_which_broker_id == 1
    assert [m.body for m in result.messages] == [b"m0", b"m1"]
    assert [m.queue_offset for m in result.messages] == [100, 101]
    assert result.messages[0].tags == "TagA"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
        (ResponseCode.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL),
    ],
)
async def test_pull_message_statuses(
    peer: tuple[ScriptedServer, Script, TcpTransport], code: int, status: PullStatus
) -> None:
    server, script, transport = peer
    script.answers[RequestCode.PULL_MESSAGE] = lambda cmd: RemotingCommand.response_to(
        cmd,
        code,
        fields={"nextBeginOffset": 7, "minOffset": 1, "maxOffset": 9, "suggestWhichBrokerId": 0},
    )
    request = PullMessageRequest("g", "T", 0, 5, 32, 2, 0, 15000, None, 0)
    result = await transport.pull_message(server.addr, request, 5000)
    assert result.status is status
    assert result.messages == ()
    assert result.next_begin_offset == 7
    assert "subscription" not in server.requests[0].ext_fields


async def test_pull_message_error_code(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.PULL_MESSAGE] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST, "consumer's group info not exist"
    )
    request = PullMessageRequest("g", "T", 0, 5, 32, 2, 0, 15000, None, 0)
    with pytest.raises(BrokerError) as err:
        await transport.pull_message(server.addr, request, 5000)
    assert err.value.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    assert err.value.remark == "consumer's group info not exist"
    assert err.value.address == server.addr


async def test_query_consumer_offset(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.QUERY_CONSUMER_OFFSET] = ok(offset=42)
    assert await transport.query_consumer_offset(server.addr, "g1", MQ) == 42
    assert server.requests[0].ext_fields == {
        "consumerGroup": "g1",
        "topic": "Orders",
        "queueId": "3",
        "bname": "broker-a",
    }
    script.answers[RequestCode.QUERY_CONSUMER_OFFSET] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
    )
    assert await transport.query_consumer_offset(server.addr, "g1", MQ) is None


async def test_update_consumer_offset_oneway_and_sync(
    peer: tuple[ScriptedServer, Script, TcpTransport],
) -> None:
    server, script, transport = peer
    script.answers[RequestCode.UPDATE_CONSUMER_OFFSET] = ok()
    await transport.update_consumer_offset(server.addr, "g1", MQ, 120)
    await transport.update_consumer_offset(server.addr, "g1", MQ, 121, oneway=False)
    await server.wait_requests(2)
    first, second = server.requests
    expected = {
        "consumerGroup": "g1",
        "topic": "Orders",
        "queueId": "3",
        "commitOffset": "120",
        "bname": "broker-a",
    }
    assert first.ext_fields == expected and first.flag & RPC_ONEWAY
    assert second.ext_fields == {**expected, "commitOffset": "121"}
    assert not second.flag & RPC_ONEWAY
    script.answers[RequestCode.UPDATE_CONSUMER_OFFSET] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.SYSTEM_ERROR, "no"
    )
    with pytest.raises(BrokerError):
        await transport.update_consumer_offset(server.addr, "g1", MQ, 1, oneway=False)


async def test_send_heartbeat_body_is_javas_heartbeat_data(
    peer: tuple[ScriptedServer, Script, TcpTransport],
) -> None:
    server, script, transport = peer
    script.answers[RequestCode.HEART_BEAT] = lambda cmd: RemotingCommand(
        0, opaque=cmd.opaque, flag=1, version=409
    )
    heartbeat = HeartbeatData(
        client_id="10.0.0.1@123#456",
        producers=[ProducerData("CLIENT_INNER_PRODUCER")],
        consumers=[
            ConsumerData(
                group_name="g1",
                consume_type=ConsumeType.CONSUME_PASSIVELY,
                message_model=MessageModel.CLUSTERING,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                subscriptions=[build_subscription("Orders", "TagA", sub_version=1700000000000)],
            )
        ],
    )
    assert await transport.send_heartbeat(server.addr, heartbeat) == 409
    request = server.requests[0]
    assert request.ext_fields == {}
    assert json.loads(request.body) == {
        "clientID": "10.0.0.1@123#456",
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        "consumerDataSet": [
            {
                "groupName": "g1",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "topic": "Orders",
                        "subString": "TagA",
                        "tagsSet": ["TagA"],
                        "codeSet": [2598919],
                        "subVersion": 1700000000000,
                        "expressionType": "TAG",
                    }
                ],
            }
        ],
    }


async def test_unregister_client(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.UNREGISTER_CLIENT] = ok()
    await transport.unregister_client(server.addr, "ip@1", None, "g1")
    assert server.requests[0].ext_fields == {"clientID": "ip@1", "consumerGroup": "g1"}


async def test_get_consumer_ids(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.GET_CONSUMER_LIST_BY_GROUP] = lambda cmd: (
        RemotingCommand.response_to(cmd, body=b'{"consumerIdList":["10.0.0.1@a","10.0.0.2@b"]}')
    )
    assert await transport.get_consumer_ids(server.addr, "g1") == ["10.0.0.1@a", "10.0.0.2@b"]
    assert server.requests[0].ext_fields == {"consumerGroup": "g1"}
    script.answers[RequestCode.GET_CONSUMER_LIST_BY_GROUP] = lambda cmd: (
        RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, "no consumer")
    )
    with pytest.raises(BrokerError, match="no consumer"):
        await transport.get_consumer_ids(server.addr, "g1")


async def test_lock_and_unlock_batch(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    other = MessageQueue("Orders", "broker-a", 4)
    script.answers[RequestCode.LOCK_BATCH_MQ] = lambda cmd: RemotingCommand.response_to(
        cmd, body=b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":3,"topic":"Orders"}]}'
    )
    script.answers[RequestCode.UNLOCK_BATCH_MQ] = ok()
    locked = await transport.lock_batch_mq(server.addr, "g1", "ip@1", [MQ, other])
    assert locked == {MQ}
    await transport.unlock_batch_mq(server.addr, "g1", "ip@1", [MQ])
    await transport.unlock_batch_mq(server.addr, "g1", "ip@1", [MQ], oneway=True)
    await server.wait_requests(3)
    lock, unlock, unlock_oneway = server.requests
    assert json.loads(lock.body) == {
        "consumerGroup": "g1",
        "clientId": "ip@1",
        "mqSet": [
            {"topic": "Orders", "brokerName": "broker-a", "queueId": 3},
            {"topic": "Orders", "brokerName": "broker-a", "queueId": 4},
        ],
    }
    assert lock.code == RequestCode.LOCK_BATCH_MQ and unlock.code == RequestCode.UNLOCK_BATCH_MQ
    assert json.loads(unlock.body)["mqSet"] == [
        {"topic": "Orders", "brokerName": "broker-a", "queueId": 3}
    ]
    assert unlock_oneway.flag & RPC_ONEWAY and not unlock.flag & RPC_ONEWAY


async def test_consumer_send_msg_back(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.CONSUMER_SEND_MSG_BACK] = ok()
    msg = MessageExt(
        topic="Orders",
        body=b"x",
        commit_log_offset=123456,
        store_host="127.0.0.1:10911",
        broker_name="broker-a",
        properties={"UNIQ_KEY": "AC11000100002A9F0000000000000001"},
    )
    await transport.consumer_send_msg_back(server.addr, msg, "g1", 0, 16)
    assert server.requests[0].ext_fields == {
        "offset": "123456",
        "group": "g1",
        "delayLevel": "0",
        "originMsgId": "AC11000100002A9F0000000000000001",
        "originTopic": "Orders",
        "unitMode": "false",
        "maxReconsumeTimes": "16",
        "bname": "broker-a",
    }


async def test_offset_queries(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.GET_MAX_OFFSET] = ok(offset=900)
    script.answers[RequestCode.GET_MIN_OFFSET] = ok(offset=10)
    script.answers[RequestCode.SEARCH_OFFSET_BY_TIMESTAMP] = ok(offset=450)
    script.answers[RequestCode.GET_EARLIEST_MSG_STORETIME] = ok(timestamp=1700000000123)
    assert await transport.get_max_offset(server.addr, MQ) == 900
    assert await transport.get_min_offset(server.addr, MQ) == 10
    assert await transport.search_offset(server.addr, MQ, 1700000000000) == 450
    assert await transport.get_earliest_msg_store_time(server.addr, MQ) == 1700000000123
    queue = {"topic": "Orders", "queueId": "3", "bname": "broker-a"}
    assert [(r.code, r.ext_fields) for r in server.requests] == [
        (RequestCode.GET_MAX_OFFSET, queue),
        (RequestCode.GET_MIN_OFFSET, queue),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": "1700000000000"}),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, queue),
    ]
    script.answers[RequestCode.GET_MAX_OFFSET] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.SYSTEM_ERROR, "no queue"
    )
    with pytest.raises(BrokerError, match="no queue"):
        await transport.get_max_offset(server.addr, MQ)


async def test_view_message(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    record = encode_stored_message(
        topic="Orders", body=b"hello", commit_log_offset=777, store_host="127.0.0.1:10911"
    )
    script.answers[RequestCode.VIEW_MESSAGE_BY_ID] = lambda cmd: RemotingCommand.response_to(
        cmd, body=record
    )
    msg = await transport.view_message(server.addr, 777)
    assert (msg.topic, msg.body, msg.commit_log_offset) == ("Orders", b"hello", 777)
    assert server.requests[0].ext_fields == {"offset": "777"}


def _send_request(batch: bool = False) -> SendMessageRequest:
    return SendMessageRequest(
        producer_group="pg",
        topic="Orders",
        queue_id=2,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="UNIQ_KEY\x01ID-1\x02TAGS\x01TagA",
        batch=batch,
        max_reconsume_times=None,
    )


async def test_send_message_v2(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.SEND_MESSAGE_V2] = ok(
        msgId="7F00000100002A9F0000000000000010", queueId=2, queueOffset=55, MSG_REGION="r1"
    )
    result = await transport.send_message(server.addr, "broker-a", _send_request(), b"payload")
    request = server.requests[0]
    assert request.code == RequestCode.SEND_MESSAGE_V2
    assert request.body == b"payload"
    assert request.ext_fields == {
        "a": "pg",
        "b": "Orders",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "UNIQ_KEY\x01ID-1\x02TAGS\x01TagA",
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    assert result is not None
    assert result.status is SendStatus.SEND_OK
    assert result.msg_id == "ID-1"
    assert result.offset_msg_id == "7F00000100002A9F0000000000000010"
    assert result.queue == MessageQueue("Orders", "broker-a", 2)
    assert result.queue_offset == 55
    assert result.region_id == "r1"


async def test_send_message_statuses_and_errors(
    peer: tuple[ScriptedServer, Script, TcpTransport],
) -> None:
    server, script, transport = peer
    script.answers[RequestCode.SEND_MESSAGE_V2] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.FLUSH_DISK_TIMEOUT, fields={"msgId": "X", "queueId": 2, "queueOffset": 1}
    )
    result = await transport.send_message(server.addr, "broker-a", _send_request(), b"p")
    assert result is not None and result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert result.region_id == "DefaultRegion"
    script.answers[RequestCode.SEND_MESSAGE_V2] = lambda cmd: RemotingCommand.response_to(
        cmd, ResponseCode.NO_PERMISSION, "the topic is not writable"
    )
    with pytest.raises(BrokerError) as err:
        await transport.send_message(server.addr, "broker-a", _send_request(), b"p")
    assert err.value.code == ResponseCode.NO_PERMISSION


async def test_send_batch_and_oneway(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.SEND_BATCH_MESSAGE] = ok(msgId="A,B", queueId=2, queueOffset=9)
    body = encode_batch(
        [
            Message("Orders", b"1", properties={"UNIQ_KEY": "U1"}),
            Message("Orders", b"2", properties={"UNIQ_KEY": "U2"}),
        ]
    )
    result = await transport.send_message(server.addr, "broker-a", _send_request(True), body)
    assert server.requests[0].code == RequestCode.SEND_BATCH_MESSAGE
    assert server.requests[0].field("m") == "true"
    assert result is not None and result.msg_id == "U1,U2"
    oneway = await transport.send_message(
        server.addr, "broker-a", _send_request(), b"x", oneway=True
    )
    assert oneway is None
    await server.wait_requests(2)
    assert server.requests[1].flag & RPC_ONEWAY


async def test_create_topic(peer: tuple[ScriptedServer, Script, TcpTransport]) -> None:
    server, script, transport = peer
    script.answers[RequestCode.UPDATE_AND_CREATE_TOPIC] = ok()
    await transport.create_topic(server.addr, "Orders", 8, 8)
    assert server.requests[0].ext_fields == {
        "topic": "Orders",
        "defaultTopic": "TBW102",
        "readQueueNums": "8",
        "writeQueueNums": "8",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }


async def test_broker_name_comes_from_the_route(
    peer: tuple[ScriptedServer, Script, TcpTransport],
) -> None:
    server, script, transport = peer
    route = (
        '{"brokerDatas":[{"brokerAddrs":{0:"' + server.addr + '"},"brokerName":"broker-a",'
        '"cluster":"c"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        '"writeQueueNums":4}]}'
    )
    script.answers[RequestCode.GET_ROUTEINFO_BY_TOPIC] = lambda cmd: RemotingCommand.response_to(
        cmd, body=route.encode()
    )
    record = encode_stored_message(topic="Orders", body=b"x", store_host="127.0.0.1:10911")
    script.answers[RequestCode.PULL_MESSAGE] = lambda cmd: RemotingCommand.response_to(
        cmd,
        fields={"nextBeginOffset": 1, "minOffset": 0, "maxOffset": 1, "suggestWhichBrokerId": 0},
        body=record,
    )
    await transport.get_route("Orders")
    result = await transport.pull_message(
        server.addr, PullMessageRequest("g", "Orders", 0, 0, 32, 2, 0, 15000, None, 0), 5000
    )
    assert result.messages[0].broker_name == "broker-a"


async def test_pull_timeout_leaves_the_connection_open(
    peer: tuple[ScriptedServer, Script, TcpTransport],
) -> None:
    server, script, transport = peer
    script.answers[RequestCode.PULL_MESSAGE] = lambda cmd: None  # held past the timeout
    request = PullMessageRequest("g", "T", 0, 5, 32, 2, 0, 15000, None, 0)
    with pytest.raises(RemotingTimeoutError):
        await transport.pull_message(server.addr, request, 300)
    # Java pulls asynchronously and keeps the channel: other queues' polls share it.
    assert transport.pool.connection(server.addr) is not None
