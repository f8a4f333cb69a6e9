"""Issue 19 #1: no name-server request from a client takes the embedded broker's routes.

Fault scenarios over real TCP: forged REGISTER_BROKER (closed or kept open),
UNREGISTER_BROKER and DELETE_TOPIC_IN_NAMESRV; and the periodic registration
that heals whatever still happens to the route table, as Apache's broker
re-registers every registerNameServerPeriod.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from test_broker_support import RawClient

from rmqk.plugins.broker import EmbeddedBroker
from rmqk.wire import jsonwire
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

EVIL_ADDR = "127.0.0.66:10911"


def _register_fields(broker: EmbeddedBroker, addr: str, broker_id: int = 0) -> dict[str, Any]:
    return {
        "brokerName": broker.broker_name,
        "brokerAddr": addr,
        "clusterName": broker.cluster,
        "haServerAddr": addr,
        "brokerId": broker_id,
        "compressed": False,
    }


def _register_body(*topics: str) -> bytes:
    table = {
        t: {"topicName": t, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6} for t in topics
    }
    return json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()


async def _route_addrs(ns: RawClient, topic: str) -> dict[str, str] | None:
    answer = await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if answer.code != ResponseCode.SUCCESS:
        return None
    datas = json.loads(answer.body)["brokerDatas"]
    return {k: v for d in datas for k, v in d["brokerAddrs"].items()}


@pytest.mark.parametrize("forged_addr", ["evil", "own"])
async def test_forged_registration_neither_redirects_nor_removes_routes(
    broker: EmbeddedBroker, forged_addr: str
) -> None:
    await broker.create_topic("Orders")
    addr = EVIL_ADDR if forged_addr == "evil" else broker.broker_addr
    forger = await RawClient.connect(broker.namesrv_addr)
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        forged = await forger.call(
            RequestCode.REGISTER_BROKER, _register_fields(broker, addr), _register_body("Other")
        )
        assert forged.code == ResponseCode.SYSTEM_ERROR
        assert "embedded broker" in (forged.remark or "")
        # While the forging connection is open, producers are still sent to the broker...
        assert await _route_addrs(ns, "Orders") == {"0": broker.broker_addr}
        assert await _route_addrs(ns, "Other") is None
        await forger.close()
        await asyncio.sleep(0.2)
        # ...and once it closed, nothing of the broker went with it.
        assert await _route_addrs(ns, "Orders") == {"0": broker.broker_addr}
        assert await _route_addrs(ns, "TBW102") == {"0": broker.broker_addr}
    finally:
        await forger.close()
        await ns.close()


async def test_forged_registration_of_another_name_at_the_broker_address(
    broker: EmbeddedBroker,
) -> None:
    await broker.create_topic("Orders")
    forger = await RawClient.connect(broker.namesrv_addr)
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        fields = {**_register_fields(broker, broker.broker_addr), "brokerName": "broker-z"}
        forged = await forger.call(RequestCode.REGISTER_BROKER, fields, _register_body("Z"))
        assert forged.code == ResponseCode.SYSTEM_ERROR
        await forger.close()
        await asyncio.sleep(0.2)
        assert await _route_addrs(ns, "Orders") == {"0": broker.broker_addr}
    finally:
        await forger.close()
        await ns.close()


async def test_unregister_and_delete_topic_cannot_empty_the_cluster(
    broker: EmbeddedBroker,
) -> None:
    await broker.create_topic("Orders")
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        fields = _register_fields(broker, broker.broker_addr)
        del fields["haServerAddr"], fields["compressed"]
        gone = await ns.call(RequestCode.UNREGISTER_BROKER, fields)
        assert gone.code == ResponseCode.SYSTEM_ERROR
        info = jsonwire.loads((await ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        assert info["clusterAddrTable"] == {broker.cluster: [broker.broker_name]}
        deleted = await ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"})
        assert deleted.code == ResponseCode.SUCCESS
        # The broker still has the topic, so the name server still routes to it.
        assert await _route_addrs(ns, "Orders") == {"0": broker.broker_addr}
        # A remote broker's queues of the topic do go (what DELETE_TOPIC_IN_NAMESRV is for).
        remote = {**_register_fields(broker, EVIL_ADDR), "brokerName": "broker-r"}
        assert (
            await ns.call(RequestCode.REGISTER_BROKER, remote, _register_body("Orders"))
        ).code == ResponseCode.SUCCESS
        assert (
            len(
                json.loads(
                    (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})).body
                )["queueDatas"]
            )
            == 2
        )
        await ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Orders"})
        route = json.loads(
            (await ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})).body
        )
        assert [q["brokerName"] for q in route["queueDatas"]] == [broker.broker_name]
    finally:
        await ns.close()


async def test_slave_of_the_embedded_broker_may_still_register(broker: EmbeddedBroker) -> None:
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        slave = await ns.call(
            RequestCode.REGISTER_BROKER,
            _register_fields(broker, "127.0.0.7:10911", broker_id=1),
            _register_body(),
        )
        assert slave.code == ResponseCode.SUCCESS
        assert slave.ext_fields["masterAddr"] == broker.broker_addr
    finally:
        await ns.close()


async def test_periodic_registration_heals_the_route_table(broker_factory: Any) -> None:
    broker: EmbeddedBroker = await broker_factory(register_period=0.2)
    await broker.create_topic("Orders")
    routes = broker.namesrv.routes
    # Whatever emptied the table (a bug, an operator's tool), the broker puts itself back.
    routes.unregister_broker(broker.cluster, broker.broker_addr, broker.broker_name, 0)
    assert routes.route("Orders") is None
    for _ in range(100):
        if routes.route("Orders") is not None:
            break
        await asyncio.sleep(0.05)
    assert routes.route("Orders") is not None


def test_register_period_default_is_apaches() -> None:
    # BrokerConfig.registerNameServerPeriod = 30 s at rocketmq-all-4.9.8.
    assert EmbeddedBroker(".").register_period == 30.0
