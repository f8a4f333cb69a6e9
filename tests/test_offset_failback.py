"""Issue 27 #8: offsets go back to a returning master at the next commit, as Java's do.

Java's RemoteBrokerOffsetStore looks for the master of the queue's broker group
(``findBrokerAddressInSubscribe(name, MASTER_ID, true)``) and, when the client's
table has none, refreshes the topic's route before falling back to any broker of
the group. rmqk used to fall back to the slave straight from the table, so a
master that came back was seen only at the 30-second periodic route refresh, and
a crash in that window re-delivered everything committed meanwhile.

Over real TCP: three embedded brokers. ``ns`` is the name server the client uses;
``master`` and ``slave`` stand for the two brokers of group ``broker-a``, which
the test registers with ``ns`` through REGISTER_BROKER on connections of its
own, so closing the master's connection takes it out of the route as a dead
master's channel does on Apache's name server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from test_broker_support import RawClient

from rmqk.model import MessageModel, MessageQueue
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.offsets.remote_broker import create_remote_broker_store
from rmqk.spi.contracts import OffsetStoreContext, ReadOffsetType
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

GROUP = "cg-failback"
TOPIC = "Orders"
MQ = MessageQueue(TOPIC, "broker-a", 0)


async def _register(ns: EmbeddedBroker, broker: EmbeddedBroker, broker_id: int) -> RawClient:
    """Register ``broker`` as id ``broker_id`` of group broker-a; the connection is its life."""
    conn = await RawClient.connect(ns.namesrv_addr)
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": broker.broker_addr,
        "clusterName": ns.cluster,
        "haServerAddr": broker.broker_addr,
        "brokerId": broker_id,
        "compressed": False,
    }
    table = {TOPIC: {"topicName": TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()
    answer = await conn.call(RequestCode.REGISTER_BROKER, fields, body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return conn


async def _route_ids(ns: EmbeddedBroker) -> set[str]:
    conn = await RawClient.connect(ns.namesrv_addr)
    try:
        answer = await conn.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        datas = json.loads(answer.body)["brokerDatas"]
        return {bid for d in datas if d["brokerName"] == "broker-a" for bid in d["brokerAddrs"]}
    finally:
        await conn.close()


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Oneway commits and connection closes land some time later: poll, bounded."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


@pytest.fixture
async def ns(broker_factory: Callable[..., Awaitable[EmbeddedBroker]]) -> EmbeddedBroker:
    return await broker_factory(broker_name="broker-x")


@pytest.fixture
async def client(ns: EmbeddedBroker) -> AsyncIterator[Any]:
    from rmqk.engine.client import ClientConfig, ClientInstance

    inst = ClientInstance("127.0.0.1@failback-test", ClientConfig([ns.namesrv_addr]))
    await inst.transport.start()
    try:
        yield inst
    finally:
        await inst.transport.close()


async def test_commit_returns_to_the_master_at_once_when_it_comes_back(
    broker_factory: Callable[..., Awaitable[EmbeddedBroker]], ns: EmbeddedBroker, client: Any
) -> None:
    master = await broker_factory(broker_name="broker-a")
    slave = await broker_factory(broker_name="broker-a")
    for b in (master, slave):
        await b.create_topic(TOPIC, queues=1)
    master_conn = await _register(ns, master, 0)
    slave_conn = await _register(ns, slave, 1)
    store = create_remote_broker_store(
        OffsetStoreContext(GROUP, client.client_id, MessageModel.CLUSTERING, client=client)
    )

    async def committed(broker: EmbeddedBroker) -> int | None:
        result: int | None = await client.transport.query_consumer_offset(
            broker.broker_addr, GROUP, MQ, 3000
        )
        return result

    try:
        assert await client.update_topic_route(TOPIC)
        assert client.broker_addr_table["broker-a"] == {
            0: master.broker_addr,
            1: slave.broker_addr,
        }
        await store.update_consume_offset_to_broker(MQ, 3, False)
        assert await committed(master) == 3

        # The master dies; the periodic route refresh sees the slave alone.
        await master_conn.close()
        await _until(lambda: _ids_are(ns, {"1"}), "the name server dropped the master")
        assert await client.update_topic_route(TOPIC)
        assert client.broker_addr_table["broker-a"] == {1: slave.broker_addr}
        # Commits go to the slave meanwhile (Java's fallback too).
        await store.update_consume_offset_to_broker(MQ, 5, False)
        assert await committed(slave) == 5
        assert await committed(master) == 3

        # The master comes back. No periodic refresh has run: the client's table
        # still has the slave alone when the next periodic persist commits.
        master_conn = await _register(ns, master, 0)
        assert client.broker_addr_table["broker-a"] == {1: slave.broker_addr}
        store.update_offset(MQ, 8, False)
        await store.persist_all({MQ})  # oneway, as the periodic persist sends it

        async def master_has_eight() -> bool:
            return await committed(master) == 8

        await _until(master_has_eight, "the commit reached the returning master")
        # It was the commit's own lookup that refreshed the route and found the master.
        assert client.broker_addr_table["broker-a"] == {
            0: master.broker_addr,
            1: slave.broker_addr,
        }
        assert await committed(slave) == 5
        # Queries follow the same lookup: the master's offset is read back.
        fresh = create_remote_broker_store(
            OffsetStoreContext(GROUP, client.client_id, MessageModel.CLUSTERING, client=client)
        )
        assert await fresh.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 8
    finally:
        await master_conn.close()
        await slave_conn.close()


async def _ids_are(ns: EmbeddedBroker, ids: set[str]) -> bool:
    return await _route_ids(ns) == ids
