"""Name server client: routes in both JSON dialects, TOPIC_NOT_EXIST, failover."""

from __future__ import annotations

import pytest
from test_transport_support import Handler, PeerConnection, ScriptedServer, config, free_port

from rmqk.model import BrokerData, MessageQueue, QueueData, TopicRouteData
from rmqk.model.errors import BrokerError, RemotingConnectError, RemotingTimeoutError
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.plugins.remoting.namesrv import decode_topic_route, encode_topic_route
from rmqk.wire.bodies import BodyFormatError
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(30)

# What a 4.9.3 name server (fastjson defaults) sends: broker ids unquoted.
OLD_SERVER_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"},{"brokerAddrs":{0:"127.0.0.1:10915"},'
    b'"brokerName":"broker-b","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4},{"brokerName":"broker-b","perm":4,"readQueueNums":2,"topicSysFlag":0,'
    b'"writeQueueNums":2}]}'
)

# What a 4.9.4+ name server sends when asked for standard JSON.
STANDARD_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
    b'"perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)


def test_route_with_unquoted_integer_keys() -> None:
    route = decode_topic_route(OLD_SERVER_ROUTE)
    a, b = route.broker_datas
    assert a == BrokerData(
        "DefaultCluster", "broker-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    )
    assert a.master_addr() == "127.0.0.1:10911"
    assert b.broker_addrs == {0: "127.0.0.1:10915"}
    assert route.queue_datas == (
        QueueData("broker-a", 4, 4, 6, 0),
        QueueData("broker-b", 2, 2, 4, 0),
    )
    assert len(route.subscribe_queues("T")) == 6
    assert MessageQueue("T", "broker-b", 1) in route.subscribe_queues("T")
    assert all(q.broker_name == "broker-a" for q in route.publish_queues("T"))


def test_route_standard_json_and_old_spellings() -> None:
    route = decode_topic_route(STANDARD_ROUTE)
    assert route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10911"}
    assert route.queue_datas[0].read_queue_nums == 8
    # Servers before 4.4 wrote "topicSynFlag"; spaces and an orderTopicConf are fine too.
    old = decode_topic_route(
        b'{ "orderTopicConf" : "broker-a:4", "queueDatas" : [ {"brokerName":"broker-a",'
        b'"perm":6,"readQueueNums":4,"topicSynFlag":3,"writeQueueNums":4} ],'
        b'"brokerDatas":[{"brokerAddrs":{ 0 : "h:1" },"brokerName":"broker-a"}]}'
    )
    assert old.order_topic_conf == "broker-a:4"
    assert old.queue_datas[0].topic_sys_flag == 3
    assert old.broker_datas[0] == BrokerData("", "broker-a", {0: "h:1"})


@pytest.mark.parametrize("standard", [True, False])
def test_route_encoding_round_trips(standard: bool) -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("broker-a", 4, 4),),
        broker_datas=(BrokerData("c", "broker-a", {0: "h:1", 2: "h:3"}),),
    )
    body = encode_topic_route(route, standard_json=standard)
    assert (b'{0:"h:1"' in body) is not standard
    assert decode_topic_route(body) == route


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"queueDatas":[{"brokerName":"a","readQueueNums":"x","writeQueueNums":1}]}',
            "readQueueNums",
        ),
        (b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{x:"h:1"}}]}', "char"),
        (b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{"m":"h:1"}}]}', "broker id"),
        (b"[1,2", "char"),
    ],
)
def test_malformed_route_says_where(body: bytes, message: str) -> None:
    with pytest.raises(BodyFormatError, match=message):
        decode_topic_route(body)


def route_answer(body: bytes) -> Handler:
    def answer(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        if cmd.field("topic") == "Missing":
            return RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server"
            )
        return RemotingCommand.response_to(cmd, body=body)

    return answer


async def test_get_route_sends_topic_and_parses_old_servers() -> None:
    async with ScriptedServer(route_answer(OLD_SERVER_ROUTE)) as ns:
        transport = TcpTransport(config(ns.addr))
        try:
            route = await transport.get_route("Orders")
            assert route is not None and route.broker("broker-a") is not None
            request = ns.requests[0]
            assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
            assert request.ext_fields == {"topic": "Orders", "acceptStandardJsonOnly": "true"}
            assert await transport.get_route("Missing") is None
        finally:
            await transport.close()


async def test_get_route_error_code_is_a_broker_error() -> None:
    def answer(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, "namesrv sick")

    async with ScriptedServer(answer) as ns:
        transport = TcpTransport(config(ns.addr))
        try:
            with pytest.raises(BrokerError, match="namesrv sick"):
                await transport.get_route("Orders")
        finally:
            await transport.close()


async def test_failover_from_a_dead_name_server_then_sticks() -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with ScriptedServer(route_answer(STANDARD_ROUTE)) as live:
        transport = TcpTransport(config(dead, live.addr, connect_timeout_ms=1000))
        try:
            for _ in range(5):
                assert await transport.get_route("Orders") is not None
            assert transport.chosen_namesrv == live.addr
            assert len(live.requests) == 5
            assert len(live.connections) == 1
        finally:
            await transport.close()


async def test_failover_when_the_chosen_server_stops_answering() -> None:
    async with (
        ScriptedServer(route_answer(STANDARD_ROUTE)) as first,
        ScriptedServer(route_answer(STANDARD_ROUTE)) as second,
    ):
        transport = TcpTransport(config(first.addr, second.addr))
        try:
            assert await transport.get_route("Orders") is not None
            chosen = transport.chosen_namesrv
            silent, other = (first, second) if chosen == first.addr else (second, first)
            silent.handler = lambda cmd, conn: None  # hangs from now on
            assert await transport.get_route("Orders", timeout_ms=500) is not None
            assert transport.chosen_namesrv == other.addr
            assert len(other.requests) == 1
        finally:
            await transport.close()


async def test_every_name_server_failing_raises_the_last_error() -> None:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    transport = TcpTransport(config(*addrs, connect_timeout_ms=500))
    try:
        with pytest.raises(RemotingConnectError):
            await transport.get_route("Orders")
    finally:
        await transport.close()
    async with ScriptedServer(lambda cmd, conn: None) as silent:
        transport = TcpTransport(config(silent.addr))
        try:
            with pytest.raises(RemotingTimeoutError):
                await transport.get_route("Orders", timeout_ms=300)
        finally:
            await transport.close()


def test_namesrv_list_is_replaced_only_when_the_set_changes() -> None:
    transport = TcpTransport(config("a:1", "b:2"))
    assert sorted(transport.namesrv_addrs) == ["a:1", "b:2"]
    before = transport.namesrv_addrs
    transport.update_namesrv_addrs(["b:2", "a:1"])
    assert transport.namesrv_addrs == before
    transport.update_namesrv_addrs(["c:3;d:4"])  # Java's ';'-separated form
    assert sorted(transport.namesrv_addrs) == ["c:3", "d:4"]
    transport.update_namesrv_addrs([])
    assert sorted(transport.namesrv_addrs) == ["c:3", "d:4"]


async def test_no_name_server_configured() -> None:
    transport = TcpTransport(config())
    try:
        with pytest.raises(RemotingConnectError, match="no name server"):
            await transport.get_route("Orders")
    finally:
        await transport.close()
