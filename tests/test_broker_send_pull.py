"""Embedded broker: sending, pulling and queue offsets over real TCP."""

from __future__ import annotations

import time
import zlib

import pytest
from test_broker_support import RawClient, messages_of

from rmqk.model import java_string_hash
from rmqk.model.message import Message, offset_msg_id
from rmqk.wire.frame import SerializeType
from rmqk.wire.message_codec import encode_batch
from rmqk.wire.protocol import LanguageCode, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


@pytest.fixture
async def client(broker):
    c = await RawClient.connect(broker.broker_addr)
    yield c
    await c.close()


def two_queue_topic(topic: str) -> dict[str, object]:
    """UPDATE_AND_CREATE_TOPIC fields for a read-write topic of two queues, as mqadmin sends."""
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "order": False,
    }


async def test_send_and_pull_round_trip_with_every_field(broker, client):
    born = 1_700_000_000_123
    sent = await client.send_message(
        "Orders",
        b"hello world",
        tags="TagA",
        keys="k1 k2",
        queue_id=2,
        flag=7,
        born_timestamp=born,
        properties={"UNIQ_KEY": "AABBCC", "WAIT": "true", "custom": "v"},
    )
    assert sent.code == ResponseCode.SUCCESS
    assert sent.remark is None
    assert sent.language == LanguageCode.JAVA
    assert sent.version == 409
    assert sent.ext_fields == {
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
        "msgId": offset_msg_id(broker.broker_addr, 0),
        "queueId": "2",
        "queueOffset": "0",
    }

    pulled = await client.pull("Orders", queue_id=2, offset=0)
    assert pulled.code == ResponseCode.SUCCESS
    assert pulled.remark == "FOUND"
    assert pulled.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "1",
        "minOffset": "0",
        "maxOffset": "1",
    }
    [msg] = messages_of(pulled)
    assert msg.topic == "Orders"
    assert msg.body == b"hello world"
    assert msg.queue_id == 2
    assert msg.queue_offset == 0
    assert msg.commit_log_offset == 0
    assert msg.flag == 7
    assert msg.sys_flag == 0
    assert msg.born_timestamp == born
    assert msg.born_host == client.writer.get_extra_info("sockname")[0] + ":" + str(
        client.writer.get_extra_info("sockname")[1]
    )
    assert msg.store_host == broker.broker_addr
    assert abs(msg.store_timestamp - time.time() * 1000) < 60_000
    assert msg.reconsume_times == 0
    assert msg.body_crc == zlib.crc32(b"hello world") & 0x7FFFFFFF
    # WAIT only steers the flush and is not stored; the broker adds CLUSTER.
    assert msg.properties == {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "AABBCC",
        "custom": "v",
        "CLUSTER": "DefaultCluster",
    }
    assert msg.offset_msg_id == sent.ext_fields["msgId"]
    # 4.9.8 writes no separator after the last property.
    raw = messages_of(pulled)[0].properties_raw  # a fresh decode: the stored text
    assert raw.count("\x02") == 4
    assert not raw.endswith("\x02")


async def test_send_v1_header_and_its_missing_field_error(broker, client):
    fields = {
        "producerGroup": "pg",
        "topic": "V1Topic",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 1,
        "sysFlag": 0,
        "bornTimestamp": 5,
        "flag": 0,
        "properties": "TAGS\x01x\x02",
    }
    ok = await client.call(RequestCode.SEND_MESSAGE, fields, b"v1")
    assert ok.code == ResponseCode.SUCCESS
    assert ok.ext_fields["queueId"] == "1"

    del fields["bornTimestamp"]
    bad = await client.call(RequestCode.SEND_MESSAGE, fields, b"v1")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert bad.remark == (
        "org.apache.rocketmq.remoting.exception.RemotingCommandException: "
        "the custom field <bornTimestamp> is null"
    )
    assert bad.ext_fields == {}


async def test_batch_send(broker, client):
    batch = encode_batch(
        [Message("Batched", f"m{i}".encode(), tags="T" if i % 2 else None) for i in range(3)]
    )
    fields = {
        "a": "pg",
        "b": "Batched",
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": 1,
        "h": 0,
        "i": "",
        "m": True,
    }
    sent = await client.call(RequestCode.SEND_BATCH_MESSAGE, fields, batch)
    assert sent.code == ResponseCode.SUCCESS
    ids = sent.ext_fields["msgId"].split(",")
    assert len(ids) == 3
    assert sent.ext_fields["queueOffset"] == "0"
    msgs = messages_of(await client.pull("Batched"))
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert [m.offset_msg_id for m in msgs] == ids
    assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in msgs)
    assert msgs[1].tags == "T"
    # The batch's tags are indexed per message: a tag pull finds only the tagged one.
    tagged = messages_of(await client.pull("Batched", subscription="T"))
    assert [m.body for m in tagged] == [b"m1"]


async def test_response_uses_the_request_serialize_type(broker):
    c = await RawClient.connect(broker.broker_addr, SerializeType.ROCKETMQ)
    try:
        sent = await c.send_message("Binary", b"x")
        assert sent.code == ResponseCode.SUCCESS
        assert c.response_types[sent.opaque] is SerializeType.ROCKETMQ
        pulled = await c.pull("Binary")
        assert c.response_types[pulled.opaque] is SerializeType.ROCKETMQ
        assert messages_of(pulled)[0].body == b"x"
    finally:
        await c.close()


async def test_pull_statuses_match_apache(broker, client):
    for i in range(3):
        await client.send_message("Statuses", f"m{i}".encode(), tags="A")

    empty = await client.pull("Statuses", queue_id=1, offset=0)
    assert (empty.code, empty.remark) == (ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE")
    assert empty.ext_fields["nextBeginOffset"] == "0"
    assert empty.body == b""

    moved_empty = await client.pull("Statuses", queue_id=1, offset=5)
    assert (moved_empty.code, moved_empty.remark) == (
        ResponseCode.PULL_OFFSET_MOVED,
        "NO_MESSAGE_IN_QUEUE",
    )

    at_max = await client.pull("Statuses", offset=3)
    assert (at_max.code, at_max.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert at_max.ext_fields["nextBeginOffset"] == "3"
    assert at_max.ext_fields["maxOffset"] == "3"

    beyond = await client.pull("Statuses", offset=10)
    assert (beyond.code, beyond.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY")
    assert beyond.ext_fields["nextBeginOffset"] == "3"

    unmatched = await client.pull("Statuses", subscription="B || C")
    assert (unmatched.code, unmatched.remark) == (
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        "NO_MATCHED_MESSAGE",
    )
    assert unmatched.ext_fields["nextBeginOffset"] == "3"
    assert unmatched.body == b""


async def test_pull_offset_too_small_after_old_segments_are_deleted(broker_factory):
    broker = await broker_factory(max_message_size=1024, segment_size=4096)
    client = await RawClient.connect(broker.broker_addr)
    try:
        for _ in range(100):
            assert (await client.send_message("Old", b"x" * 100)).code == ResponseCode.SUCCESS
        broker.store.delete_commit_log_before(broker.store.commit_log_max_offset - 4096)
        broker.store.clean_consume_queues()
        low = broker.store.min_offset("Old", 0)
        assert low > 0
        small = await client.pull("Old", offset=0)
        assert (small.code, small.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
        assert small.ext_fields["nextBeginOffset"] == str(low)
        assert small.ext_fields["minOffset"] == str(low)
        # No committed offset and a queue that no longer starts at 0: QUERY_NOT_FOUND.
        query = await client.call(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "fresh", "topic": "Old", "queueId": 0},
        )
        assert query.code == ResponseCode.QUERY_NOT_FOUND
        assert query.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
    finally:
        await client.close()


async def test_pull_caps_at_32_messages_and_256_kib(broker, client):
    for i in range(40):
        await client.send_message("Many", str(i).encode())
    pulled = await client.pull("Many", max_msgs=100)
    assert len(messages_of(pulled)) == 32
    assert pulled.ext_fields["nextBeginOffset"] == "32"

    big = b"b" * (100 * 1024)
    for _ in range(3):
        await client.send_message("Big", big)
    pulled = await client.pull("Big", max_msgs=32)
    assert len(messages_of(pulled)) == 2
    assert pulled.ext_fields["nextBeginOffset"] == "2"


async def test_tag_filtering_by_hash(broker, client):
    for tag in ["A", "B", "C", "A"]:
        await client.send_message("Tags", tag.encode(), tags=tag)
    got = messages_of(await client.pull("Tags", subscription="A || C"))
    assert [m.body for m in got] == [b"A", b"C", b"A"]
    # Untagged messages only match "*".
    await client.send_message("Tags", b"none")
    every = messages_of(await client.pull("Tags", subscription="*"))
    assert len(every) == 5


async def test_pull_subscription_from_heartbeat_or_code_24(broker, client):
    await client.send_message("Subs", b"a", tags="A")
    await client.send_message("Subs", b"b", tags="B")

    no_group = await client.pull("Subs", group="g24", subscription=None)
    assert no_group.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    assert no_group.remark == "the consumer's group info not exist" + FAQ
    assert no_group.ext_fields == {}

    await client.heartbeat("10.0.0.1@c1", "g24", {"Other": "*"})
    no_topic = await client.pull("Subs", group="g24", subscription=None)
    assert no_topic.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    assert no_topic.remark == "the consumer's subscription not exist" + FAQ

    await client.heartbeat("10.0.0.1@c1", "g24", {"Subs": "B"})
    pulled = await client.pull("Subs", group="g24", subscription=None)
    assert [m.body for m in messages_of(pulled)] == [b"b"]


async def test_pull_errors_for_unknown_topic_and_queue(broker, client):
    unknown = await client.pull("NoSuchTopic")
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "topic[NoSuchTopic] not exist, apply first please! " + FAQ
    assert unknown.ext_fields == {}

    await client.send_message("Small", b"x")
    bad_queue = await client.pull("Small", queue_id=9)
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR
    assert bad_queue.remark.startswith(
        "queueId[9] is illegal, topic:[Small] topicConfig.readQueueNums:[4] consumer:[/127.0.0.1:"
    )

    sql = await client.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "g",
            "topic": "Small",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 1,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "a > 1",
            "subVersion": 0,
            "expressionType": "SQL92",
        },
    )
    assert sql.code == ResponseCode.SYSTEM_ERROR
    assert sql.remark == "The broker does not support consumer to filter message by SQL92"


async def test_commit_offset_piggyback_and_offset_queries(broker, client):
    for _ in range(5):
        await client.send_message("Offsets", b"x")
    query = {"consumerGroup": "og", "topic": "Offsets", "queueId": 0}

    # No committed offset, queue starting at 0: Apache answers 0.
    first = await client.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert (first.code, first.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})

    # Without the commit flag the commitOffset field is ignored.
    await client.pull("Offsets", group="og", sys_flag=0x4, commit_offset=4)
    assert (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, query)).ext_fields == {
        "offset": "0"
    }
    await client.pull("Offsets", group="og", sys_flag=0x5, commit_offset=3)
    assert (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, query)).ext_fields == {
        "offset": "3"
    }

    update = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, dict(query, commitOffset=5))
    assert update.code == ResponseCode.SUCCESS
    assert (await client.call(RequestCode.QUERY_CONSUMER_OFFSET, query)).ext_fields == {
        "offset": "5"
    }
    missing = await client.call(RequestCode.UPDATE_CONSUMER_OFFSET, query)
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert "the custom field <commitOffset> is null" in missing.remark


async def test_queue_offsets_times_and_view_by_id(broker, client):
    before = int(time.time() * 1000) - 1
    sent = [await client.send_message("Times", f"m{i}".encode(), tags="t") for i in range(3)]
    q = {"topic": "Times", "queueId": 0}
    assert (await client.call(RequestCode.GET_MAX_OFFSET, q)).ext_fields == {"offset": "3"}
    assert (await client.call(RequestCode.GET_MIN_OFFSET, q)).ext_fields == {"offset": "0"}
    earliest = await client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, q)
    assert int(earliest.ext_fields["timestamp"]) >= before
    search = await client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, dict(q, timestamp=before))
    assert search.ext_fields == {"offset": "0"}
    unknown = await client.call(RequestCode.GET_MAX_OFFSET, {"topic": "Nope", "queueId": 0})
    assert unknown.ext_fields == {"offset": "0"}

    msg_id = sent[1].ext_fields["msgId"]
    commit_offset = int(msg_id[-16:], 16)
    view = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_offset})
    assert view.code == ResponseCode.SUCCESS
    [msg] = messages_of(view)
    assert (msg.body, msg.queue_offset, msg.offset_msg_id) == (b"m1", 1, msg_id)
    gone = await client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**9})
    assert gone.code == ResponseCode.SYSTEM_ERROR
    assert gone.remark == f"can not find message by the offset, {10**9}"


async def test_auto_created_topic_has_four_queues_and_a_route(broker, client):
    await client.send_message("AutoTopic", b"x")
    cfg = broker.store.topics.get("AutoTopic")
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (4, 4, 6)
    route = broker.namesrv.routes.route("AutoTopic")
    assert route["queueDatas"][0]["readQueueNums"] == 4


async def test_no_auto_create_answers_topic_not_exist(broker_factory):
    broker = await broker_factory(auto_create_topic=False)
    client = await RawClient.connect(broker.broker_addr)
    try:
        sent = await client.send_message("Unknown", b"x")
        assert sent.code == ResponseCode.TOPIC_NOT_EXIST
        assert sent.remark == "topic[Unknown] not exist, apply first please!" + FAQ
        assert sent.ext_fields == {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        created = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, two_queue_topic("Unknown"))
        assert created.code == ResponseCode.SUCCESS
        assert (await client.send_message("Unknown", b"x", queue_id=1)).code == ResponseCode.SUCCESS
        bad_queue = await client.send_message("Unknown", b"x", queue_id=2)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR
        assert bad_queue.remark.startswith(
            "request queueId[2] is illegal, TopicConfig [topicName=Unknown, readQueueNums=2, "
            "writeQueueNums=2, perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, "
            "order=false] Producer: 127.0.0.1:"
        )
    finally:
        await client.close()


async def test_send_validation_errors(broker_factory):
    broker = await broker_factory(max_message_size=1024)
    client = await RawClient.connect(broker.broker_addr)
    try:
        big = await client.send_message("Sized", b"x" * 1025)
        assert big.code == ResponseCode.MESSAGE_ILLEGAL
        assert big.remark == (
            "the message is illegal, maybe msg body or properties length not matched. "
            "msg body length limit 1024B, msg properties length limit 32KB."
        )
        illegal = await client.send_message("bad topic!", b"x")
        assert illegal.code == ResponseCode.SYSTEM_ERROR
        assert illegal.remark == (
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
        forbidden = await client.send_message("SCHEDULE_TOPIC_XXXX", b"x")
        assert forbidden.code == ResponseCode.NO_PERMISSION
        assert forbidden.remark == "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."
        system = await client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, two_queue_topic("TBW102"))
        assert system.code == ResponseCode.SYSTEM_ERROR
        assert system.remark == "The topic[TBW102] is conflict with system topic."
    finally:
        await client.close()


def test_tag_hash_matches_java():
    # The broker filters by these codes; "TagA" is Java's 2598919.
    assert java_string_hash("TagA") == 2598919
