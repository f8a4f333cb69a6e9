"""Issue 27 #0: the bodies Java's tools decode are the bytes fastjson 1.2.69 writes.

Apache's ``mqadmin consumerStatus`` failed on every rmqk consumer with
``JSONException: syntax error, expect {, actual error, pos 0``: rmqk keyed the
running info's ``mqTable`` by the string ``topic@broker@qid`` where fastjson writes
the MessageQueue object itself in key position. rmqk's own reader accepted both, so
only bytes compared with what Java writes catch it.

The fixtures below are the output of ``RemotingSerializable.encode()`` (that is,
``JSON.toJSONString(obj, false)``, fastjson 1.2.69) on the rocketmq-all-4.9.8
classes named above each one, filled with the values the Python side builds.
Where Java's own order is a hash order (``Properties``, a ``HashSet`` or
``HashMap`` of more than one element) a fixture has one element, so its bytes do
not depend on it; rmqk writes such collections sorted, and the tests say so.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import pytest
from engine_support import admin_transport, create_topic, produce, wait_for
from test_broker_support import RawClient

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model import ExpressionType, MessageQueue, SubscriptionData
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.status.collect import parse_running_info
from rmqk.spi.transport import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
)
from rmqk.wire import bodies, jsonwire
from rmqk.wire.bodies import ObjectKey
from rmqk.wire.javajson import java_double, java_string
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

# -- fixtures: fastjson 1.2.69 on the 4.9.8 classes ------------------------------------

# ConsumerRunningInfo: properties (Properties, one entry), subscriptionSet
# (TreeSet<SubscriptionData>: "%RETRY%cg" "*" subVersion 1700000000124, and "Orders"
# "TagA || TagB" with its tags and hash codes, subVersion 1700000000123), mqTable
# (TreeMap<MessageQueue, ProcessQueueInfo>: Orders/broker-a/3 filled in, Orders/0
# with commitOffset -1 and droped, %RETRY%cg/0 all defaults), statusTable
# (TreeMap<String, ConsumeStatus>: Orders pullRT 12.5, pullTPS 12345678.9,
# consumeRT 0.000999, consumeOKTPS 1.0E7, consumeFailedTPS 0.1, consumeFailedMsgs 3;
# %RETRY%cg all zero), jstack null (left out).

RUNNING = (
    b'{"mqTable":{{"brokerName":"broker-a","queueId":0,'
    b'"topic":"%RETRY%cg"}:{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,'
    b'"cachedMsgSizeInMiB":0,"commitOffset":0,"droped":false,"lastConsumeTimestamp":0,'
    b'"lastLockTimestamp":0,"lastPullTimestamp":0,"locked":false,"transactionMsgCount":0,'
    b'"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0},'
    b'{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:{"cachedMsgCount":0,'
    b'"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,"commitOffset":-1,'
    b'"droped":true,"lastConsumeTimestamp":0,"lastLockTimestamp":0,"lastPullTimestamp":0,'
    b'"locked":false,"transactionMsgCount":0,"transactionMsgMaxOffset":0,'
    b'"transactionMsgMinOffset":0,"tryUnlockTimes":0},{"brokerName":"broker-a","queueId":3,'
    b'"topic":"Orders"}:{"cachedMsgCount":8,"cachedMsgMaxOffset":50,"cachedMsgMinOffset":43,'
    b'"cachedMsgSizeInMiB":1,"commitOffset":42,"droped":false,'
    b'"lastConsumeTimestamp":1700000000400,"lastLockTimestamp":1700000000200,'
    b'"lastPullTimestamp":1700000000300,"locked":true,"transactionMsgCount":2,'
    b'"transactionMsgMaxOffset":41,"transactionMsgMinOffset":40,"tryUnlockTimes":1}},'
    b'"properties":{"PROP_CONSUMEORDERLY":"false"},'
    b'"statusTable":{"%RETRY%cg":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,'
    b'"consumeOKTPS":0.0,"consumeRT":0.0,"pullRT":0.0,"pullTPS":0.0},'
    b'"Orders":{"consumeFailedMsgs":3,"consumeFailedTPS":0.1,"consumeOKTPS":1.0E7,'
    b'"consumeRT":9.99E-4,"pullRT":12.5,"pullTPS":1.23456789E7}},'
    b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
    b'"subString":"*","subVersion":1700000000124,"tagsSet":[],"topic":"%RETRY%cg"},'
    b'{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG",'
    b'"subString":"TagA || TagB","subVersion":1700000000123,"tagsSet":["TagA","TagB"],'
    b'"topic":"Orders"}]}'
)

# The same with jstack set to this text (escapes: \n \t \" \\ by letter, U+0001,
# U+007F and U+2028 as upper-case \\uXXXX, '/' and non-ASCII text as they are).
JSTACK = (
    b'"main                                    TID: 1 STATE: RUNNABLE\\n\\tat a.B(C.java:1) '
    b'\\"q\\" \\\\ / \\u0001\\u007F\\u2028 \xc3\xa9 \xe4\xb8\xad\\n"'
)
RUNNING_JSTACK = b'{"jstack":' + JSTACK + b"," + RUNNING[1:]

# ConsumerConnection: connectionSet (HashSet<Connection>, one: clientId
# "127.0.0.1@4242", clientAddr "127.0.0.1:54321", language JAVA, version 409),
# subscriptionTable ("Orders" as above), CONSUME_PASSIVELY, CLUSTERING,
# CONSUME_FROM_LAST_OFFSET.
CONNECTION = (
    b'{"connectionSet":[{"clientAddr":"127.0.0.1:54321","clientId":"127.0.0.1@4242",'
    b'"language":"JAVA","version":409}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
    b'"subscriptionTable":{"Orders":{"classFilterMode":false,"codeSet":[2598919,2598920],'
    b'"expressionType":"TAG","subString":"TagA || TagB","subVersion":1700000000123,'
    b'"tagsSet":["TagA","TagB"],"topic":"Orders"}}}'
)

# ConsumeStats: offsetTable (HashMap<MessageQueue, OffsetWrapper>, one: Orders/broker-a/1
# brokerOffset 100, consumerOffset 60, lastTimestamp 1700000000500), consumeTps 0.
CONSUME_STATS = (
    b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":1,'
    b'"topic":"Orders"}:{"brokerOffset":100,"consumerOffset":60,'
    b'"lastTimestamp":1700000000500}}}'
)

# GetConsumerStatusBody: messageQueueTable {Orders/broker-a/1: 60}, consumerTable {}.
CONSUMER_STATUS = (
    b'{"consumerTable":{},"messageQueueTable":{{"brokerName":"broker-a","queueId":1,'
    b'"topic":"Orders"}:60}}'
)

# ResetOffsetBody: offsetTable {Orders/broker-a/1: 7}.
RESET_OFFSET = b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"Orders"}:7}}'


# ConsumeMessageDirectlyResult: order false, autoCommit true, CR_THROW_EXCEPTION, spentTimeMills
# 7, remark "java.lang.RuntimeException: boom\n\tat a.B(C.java:1)" + U+0000 U+001F U+0085 U+2029.
DIRECT = (
    b'{"autoCommit":true,"consumeResult":"CR_THROW_EXCEPTION","order":false,'
    b'"remark":"java.lang.RuntimeException: boom\\n\\tat a.B(C.java:1)'
    b'\\u0000\\u001F\\u0085\\u2029",'
    b'"spentTimeMills":7}'
)

# What Java's Double.toString-style writer (fastjson's Ryu port) gives for each double,
# read off fastjson's output for ConsumeStatus.pullRT (NaN and the infinities: null).
JAVA_DOUBLES = [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (1.5, "1.5"), (0.001, "0.001"),
    (0.000999, "9.99E-4"), (1e7, "1.0E7"), (9999999.0, "9999999.0"),
    (12345678.9, "1.23456789E7"), (1e-5, "1.0E-5"), (123.456, "123.456"), (1e21, "1.0E21"),
    (2.5e-10, "2.5E-10"), (100.0, "100.0"), (0.1, "0.1"), (1 / 3, "0.3333333333333333"),
    (-2.0, "-2.0"), (float("nan"), "null"), (float("inf"), "null"),
    (1234567.125, "1234567.125"), (4.35, "4.35"), (0.3, "0.3"),
    (2.0 / 3 * 1e-3, "6.666666666666666E-4"), (5e-324, "4.9E-324"),
    (1.7976931348623157e308, "1.7976931348623157E308"),
]  # fmt: skip

ORDERS_SUB = SubscriptionData(
    "Orders",
    "TagA || TagB",
    tags_set=frozenset({"TagB", "TagA"}),
    code_set=frozenset({2598920, 2598919}),
    sub_version=1700000000123,
    expression_type=ExpressionType.TAG,
)
RETRY_SUB = SubscriptionData("%RETRY%cg", "*", sub_version=1700000000124)
MQ1 = MessageQueue("Orders", "broker-a", 1)


def _pq(**fields: Any) -> ProcessQueueInfo:
    values: dict[str, Any] = {f.name: 0 for f in attrs.fields(ProcessQueueInfo)}
    values.update(locked=False, droped=False)
    values.update(fields)
    return ProcessQueueInfo(**values)


def _running(jstack: str | None = None) -> ConsumerRunningInfo:
    # Given in neither Java's TreeMap nor TreeSet order: the encoder sorts as they do.
    return ConsumerRunningInfo(
        properties={"PROP_CONSUMEORDERLY": "false"},
        subscriptions=(ORDERS_SUB, RETRY_SUB),
        mq_table={
            MessageQueue("Orders", "broker-a", 3): _pq(
                commit_offset=42,
                cached_msg_min_offset=43,
                cached_msg_max_offset=50,
                cached_msg_count=8,
                cached_msg_size_in_mib=1,
                transaction_msg_min_offset=40,
                transaction_msg_max_offset=41,
                transaction_msg_count=2,
                locked=True,
                try_unlock_times=1,
                last_lock_timestamp=1700000000200,
                last_pull_timestamp=1700000000300,
                last_consume_timestamp=1700000000400,
            ),
            MessageQueue("Orders", "broker-a", 0): _pq(commit_offset=-1, droped=True),
            MessageQueue("%RETRY%cg", "broker-a", 0): _pq(),
        },
        status_table={
            "Orders": ConsumeStatus(
                pull_rt=12.5,
                pull_tps=12345678.9,
                consume_rt=0.000999,
                consume_ok_tps=1.0e7,
                consume_failed_tps=0.1,
                consume_failed_msgs=3,
            ),
            "%RETRY%cg": ConsumeStatus(),
        },
        jstack=jstack,
    )


JSTACK_TEXT = (
    "main" + " " * 36 + 'TID: 1 STATE: RUNNABLE\n\tat a.B(C.java:1) "q" \\ / \x01\x7f\u2028 é 中\n'
)


def test_running_info_is_the_bytes_fastjson_writes() -> None:
    assert bodies.encode_consumer_running_info(_running()) == RUNNING
    assert bodies.encode_consumer_running_info(_running(JSTACK_TEXT)) == RUNNING_JSTACK


def test_running_info_reads_back_from_java_and_from_older_rmqk() -> None:
    # subscriptionSet comes back in the TreeSet's order.
    in_java_order = (RETRY_SUB, ORDERS_SUB)
    assert bodies.decode_consumer_running_info(RUNNING) == attrs.evolve(
        _running(), subscriptions=in_java_order
    )
    assert bodies.decode_consumer_running_info(RUNNING_JSTACK) == attrs.evolve(
        _running(JSTACK_TEXT), subscriptions=in_java_order
    )
    # rmqk before issue 27 keyed mqTable by "topic@broker@queueId"; its reader still reads it.
    old = b'{"mqTable":{"Orders@broker-a@3":{"cachedMsgCount":8,"locked":true}},"properties":{}}'
    info = bodies.decode_consumer_running_info(old)
    assert info.mq_table == {
        MessageQueue("Orders", "broker-a", 3): _pq(cached_msg_count=8, locked=True)
    }
    # And the status command's reader reads Java's (= rmqk's) form.
    status = parse_running_info(RUNNING)
    assert list(status.queues) == sorted(_running().mq_table)
    assert status.queues[MessageQueue("Orders", "broker-a", 3)]["cachedMsgCount"] == 8


def test_running_info_properties_are_written_sorted() -> None:
    # Java's Properties is a hash table: its order is the JDK's, not part of the contract.
    # rmqk writes the keys sorted; a Java reader puts them back into a Properties.
    info = ConsumerRunningInfo(properties={"b": "2", "PROP_Z": "1", "a": "x\ty"})
    assert bodies.encode_consumer_running_info(info) == (
        b'{"mqTable":{},"properties":{"PROP_Z":"1","a":"x\\ty","b":"2"},"statusTable":{},'
        b'"subscriptionSet":[]}'
    )


def test_offset_map_bodies_are_the_bytes_fastjson_writes() -> None:
    assert bodies.encode_consumer_status({MQ1: 60}) == CONSUMER_STATUS
    assert bodies.encode_reset_offset({MQ1: 7}) == RESET_OFFSET
    assert bodies.decode_consumer_status(CONSUMER_STATUS) == {MQ1: 60}
    assert bodies.decode_reset_offset(RESET_OFFSET) == {MQ1: 7}


def test_consume_directly_result_is_the_bytes_fastjson_writes() -> None:
    result = ConsumeMessageDirectlyResult(
        order=False,
        auto_commit=True,
        consume_result="CR_THROW_EXCEPTION",
        remark="java.lang.RuntimeException: boom\n\tat a.B(C.java:1)\x00\x1f\x85\u2029",
        spent_time_mills=7,
    )
    assert bodies.encode_consume_message_directly_result(result) == DIRECT
    assert bodies.decode_consume_message_directly_result(DIRECT) == result


@pytest.mark.parametrize(("value", "text"), JAVA_DOUBLES)
def test_doubles_are_written_as_java_writes_them(value: float, text: str) -> None:
    assert java_double(value) == text


def test_strings_are_escaped_as_fastjson_escapes_them() -> None:
    assert java_string(JSTACK_TEXT).encode() == JSTACK
    # Every control character, DEL and the C1 range, by code.
    assert (
        java_string("\x00\x0b\x1f\x80\x9f\xa0\u2029")
        == '"\\u0000\\u000B\\u001F\\u0080\\u009F\xa0\\u2029"'
    )


def test_broker_bodies_use_the_same_scalars() -> None:
    # The embedded broker's writer (ConsumeStats, connection lists, routes) shares them.
    body = jsonwire.dumps({"consumeTps": 12345678.9, "jstack": JSTACK_TEXT, "nan": float("nan")})
    assert body == b'{"consumeTps":1.23456789E7,"jstack":' + JSTACK + b',"nan":null}'
    assert jsonwire.loads(body)["consumeTps"] == 12345678.9


# -- over TCP: what the embedded broker answers, and what it relays from a client ------


async def test_running_info_relayed_by_the_broker_is_what_java_reads(
    broker: EmbeddedBroker,
) -> None:
    await create_topic(broker, "Wire", 2)
    await produce(broker.namesrv_addr, "Wire", (f"w{i}".encode() for i in range(6)))
    got: list[Any] = []
    consumer = AsyncPushConsumer(
        "g-wire", namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe("Wire", "*")
    consumer.register_listener(lambda msgs: got.extend(msgs))
    await consumer.start()
    admin = await admin_transport(broker.namesrv_addr)
    try:
        await wait_for(lambda: len(got) >= 6, 20, "messages")
        held = set(consumer.rebalance.process_queue_table)
        request = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "g-wire", "clientId": consumer.client_id, "jstackEnable": True},
        )
        response = await admin.invoke(broker.broker_addr, request, 5000)
    finally:
        await consumer.shutdown()
        await admin.close()
    assert response.code == ResponseCode.SUCCESS, response.remark
    body = response.body
    # Every mqTable key is the queue object, as fastjson writes a TreeMap<MessageQueue, _>;
    # the string keys rmqk wrote before made fastjson fail at "expect {".
    table = bodies.loads(body)["mqTable"]
    assert table and all(isinstance(key, ObjectKey) for key in table)
    info = bodies.decode_consumer_running_info(body)
    assert set(info.mq_table) == held and "Wire" in {mq.topic for mq in held}
    # The body is the fastjson rendering of what it holds (the fixtures pin that rendering).
    assert bodies.encode_consumer_running_info(info) == body
    props = info.properties
    assert props["PROP_NAMESERVER_ADDR"] == f"{broker.namesrv_addr};"
    assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
    assert props["PROP_CLIENT_VERSION"] == "V4_9_8"
    # The consumer's settings under DefaultMQPushConsumer's field names, values as toString().
    assert props["messageModel"] == "CLUSTERING"
    assert props["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert props["consumeThreadMin"] == "20" and props["pullBatchSize"] == "32"
    assert not [key for key in props if "_" in key and not key.startswith("PROP_")]
    # Java's push consumer reports a ConsumeStatus for every subscribed topic.
    assert set(info.status_table) == {"Wire", "%RETRY%g-wire"}
    assert info.status_table["Wire"].pull_tps >= 0.0
    # jstackEnable: the process's threads, in UtilAll.jstack's layout.
    assert info.jstack is not None
    assert re.search(r"^MainThread {30}TID: \d+ STATE: ALIVE$", info.jstack, re.M)


async def test_connection_list_is_the_bytes_fastjson_writes(broker: EmbeddedBroker) -> None:
    await broker.create_topic("Orders")
    client = await RawClient.connect(broker.broker_addr)
    admin = await RawClient.connect(broker.broker_addr)
    heartbeat = {
        "clientID": "127.0.0.1@4242",
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": "cg",
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [
                    json.loads(bodies.dumps(bodies.subscription_json(ORDERS_SUB)))
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    try:
        beat = await client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
        assert beat.code == ResponseCode.SUCCESS
        local = client.writer.get_extra_info("sockname")
        answer = await admin.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "cg"})
    finally:
        await client.close()
        await admin.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # The one dynamic value: the address the broker saw the heartbeat come from.
    assert answer.body == CONNECTION.replace(b"127.0.0.1:54321", f"{local[0]}:{local[1]}".encode())


async def test_consume_stats_are_the_bytes_fastjson_writes(broker: EmbeddedBroker) -> None:
    await broker.create_topic("Orders", queues=2)
    await produce(broker.namesrv_addr, "Orders", (b"x" for _ in range(200)))
    admin = await RawClient.connect(broker.broker_addr)
    try:
        max_offset = await admin.call(RequestCode.GET_MAX_OFFSET, {"topic": "Orders", "queueId": 1})
        broker_offset = int(max_offset.ext_fields["offset"])
        assert broker_offset > 0
        commit = await admin.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "cg", "topic": "Orders", "queueId": 1, "commitOffset": 60},
        )
        assert commit.code == ResponseCode.SUCCESS
        answer = await admin.call(
            RequestCode.GET_CONSUME_STATS, {"consumerGroup": "cg", "topic": "Orders"}
        )
    finally:
        await admin.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # Queue 0 has no offset of the group; queue 1 is the fixture's entry. fastjson writes a
    # HashMap<MessageQueue, OffsetWrapper> in hash order; rmqk writes it in queue order.
    stored = broker.store.store_time_at("Orders", 1, 59)
    entry_1 = (
        CONSUME_STATS[len(b'{"consumeTps":0.0,"offsetTable":{') : -2]
        .replace(b'"brokerOffset":100', b'"brokerOffset":%d' % broker_offset)
        .replace(b'"lastTimestamp":1700000000500', b'"lastTimestamp":%d' % stored)
    )
    entry_0 = (
        b'{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:{"brokerOffset":%d,'
        b'"consumerOffset":0,"lastTimestamp":0}' % broker.store.max_offset("Orders", 0)
    )
    assert answer.body == b'{"consumeTps":0.0,"offsetTable":{' + entry_0 + b"," + entry_1 + b"}}"
