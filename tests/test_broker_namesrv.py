"""Embedded name server: routes, cluster info and how requests fail, over real TCP."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from test_broker_support import RawClient

from rmqk.wire import jsonwire
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


async def test_route_json_shape_fastjson_and_standard(broker):
    await broker.create_topic("Routed", queues=3)
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        # A client older than 4.9.4 gets fastjson's unquoted integer keys, fields sorted.
        old = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"}, version=300)
        assert old.code == ResponseCode.SUCCESS
        assert old.body.decode() == (
            '{"brokerDatas":[{"brokerAddrs":{0:"' + broker.broker_addr + '"},'
            '"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
            '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":3,'
            '"topicSysFlag":0,"writeQueueNums":3}]}'
        )
        # 4.9.4 and later (or acceptStandardJsonOnly) get standard JSON.
        new = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"})
        route = json.loads(new.body)
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.broker_addr}
        asked = await ns.call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": "Routed", "acceptStandardJsonOnly": True},
            version=300,
        )
        assert json.loads(asked.body) == route
        assert jsonwire.loads(old.body)["brokerDatas"][0]["brokerAddrs"] == {0: broker.broker_addr}
    finally:
        await ns.close()


async def test_unknown_topic_and_auto_create_key_topic(broker):
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        missing = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert missing.remark == "No topic route info in name server for the topic: Nope" + FAQ
        assert missing.body == b""
        # Java producers look up TBW102 to find where to auto-create a topic.
        tbw = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        queue = json.loads(tbw.body)["queueDatas"][0]
        assert (queue["perm"], queue["readQueueNums"]) == (7, 8)
        no_topic = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
        assert no_topic.code == ResponseCode.SYSTEM_ERROR
        assert no_topic.remark.endswith("the custom field <topic> is null")
    finally:
        await ns.close()


async def test_cluster_info_and_topic_list(broker):
    await broker.create_topic("Listed")
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        info = await ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)
        assert info.body.decode() == (
            '{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"' + broker.broker_addr + '"},'
            '"brokerName":"broker-a","cluster":"DefaultCluster"}},'
            '"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
        )
        topics = json.loads((await ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
        assert "Listed" in topics["topicList"]
        assert "TBW102" in topics["topicList"]
    finally:
        await ns.close()


async def test_deleted_topic_leaves_the_route(broker):
    await broker.create_topic("Doomed")
    bk = await RawClient.connect(broker.broker_addr)
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        route = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Doomed"})
        assert route.code == ResponseCode.SUCCESS
        deleted = await bk.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Doomed"})
        assert deleted.code == ResponseCode.SUCCESS
        route = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Doomed"})
        assert route.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await bk.close()
        await ns.close()


async def test_register_broker_over_the_wire(broker):
    ns = await RawClient.connect(broker.namesrv_addr)
    body = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 1, "timestamp": 1},
            "topicConfigTable": {
                "Remote": {
                    "order": False,
                    "perm": 6,
                    "readQueueNums": 2,
                    "topicFilterType": "SINGLE_TAG",
                    "topicName": "Remote",
                    "topicSysFlag": 0,
                    "writeQueueNums": 2,
                }
            },
        },
    }
    try:
        reg = await ns.call(
            RequestCode.REGISTER_BROKER,
            {
                "brokerName": "broker-b",
                "brokerAddr": "127.0.0.2:10911",
                "clusterName": "DefaultCluster",
                "haServerAddr": "127.0.0.2:10912",
                "brokerId": 0,
                "compressed": False,
            },
            json.dumps(body).encode(),
        )
        assert reg.code == ResponseCode.SUCCESS
        route = json.loads(
            (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Remote"})).body
        )
        assert route["brokerDatas"] == [
            {
                "brokerAddrs": {"0": "127.0.0.2:10911"},
                "brokerName": "broker-b",
                "cluster": "DefaultCluster",
            }
        ]
    finally:
        await ns.close()
    # The registering connection closed: the broker it registered is gone.
    for _ in range(100):
        if broker.namesrv.routes.route("Remote") is None:
            break
        await asyncio.sleep(0.02)
    assert broker.namesrv.routes.route("Remote") is None


async def test_unknown_codes_namesrv_silent_broker_not_supported(broker):
    ns = await RawClient.connect(broker.namesrv_addr)
    bk = await RawClient.connect(broker.broker_addr)
    try:
        # Apache's name server has no answer for a code it does not know...
        with pytest.raises(asyncio.TimeoutError):
            await ns.call(9999, timeout=0.3)
        # ...and keeps the connection open.
        assert (await ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS
        # The broker's default processor answers REQUEST_CODE_NOT_SUPPORTED.
        answer = await bk.call(9999)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert answer.remark == " request type 9999 not supported"
    finally:
        await ns.close()
        await bk.close()


@pytest.mark.parametrize("garbage", ["bad-length", "bad-header", "oversize"])
async def test_malformed_frame_closes_only_that_connection(broker, garbage):
    good = await RawClient.connect(broker.broker_addr)
    bad = await RawClient.connect(broker.broker_addr)
    try:
        await good.send_message("Frames", b"before")
        if garbage == "bad-length":
            bad.write_raw(struct.pack(">i", 2) + b"\x00\x00")
        elif garbage == "bad-header":
            header = b"{not json"
            bad.write_raw(struct.pack(">iI", 4 + len(header), len(header)) + header)
        else:
            bad.write_raw(struct.pack(">i", 64 * 1024 * 1024))
        await asyncio.wait_for(bad.closed.wait(), 5)
        sent = await good.send_message("Frames", b"after")
        assert sent.code == ResponseCode.SUCCESS
        assert sent.ext_fields["queueOffset"] == "1"
    finally:
        await good.close()
        await bad.close()
