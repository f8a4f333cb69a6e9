"""The data model: Java-compatible hashes, ordering, subscriptions, properties, ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqk.model import (
    BrokerData,
    ExpressionType,
    MessageQueue,
    QueueData,
    TopicRouteData,
    build_subscription,
    java_string_hash,
)
from rmqk.model.message import (
    MessageExt,
    decode_offset_msg_id,
    format_properties,
    offset_msg_id,
    parse_properties,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("polygenelubricants", -2147483648),  # famous Integer.MIN_VALUE hash
        ("\U0001f600", 1772899),  # hashed as the UTF-16 surrogate pair D83D DE00
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text(max_size=50))
def test_java_string_hash_is_a_signed_int32(text: str) -> None:
    h = java_string_hash(text)
    assert -(2**31) <= h < 2**31


def test_message_queue_sorts_like_java_and_prints_like_java() -> None:
    qs = [MessageQueue("T", "b", 10), MessageQueue("T", "b", 2), MessageQueue("S", "z", 0)]
    assert sorted(qs) == [
        MessageQueue("S", "z", 0),
        MessageQueue("T", "b", 2),
        MessageQueue("T", "b", 10),
    ]
    assert str(qs[0]) == "MessageQueue [topic=T, brokerName=b, queueId=10]"
    assert len({MessageQueue("T", "b", 1), MessageQueue("T", "b", 1)}) == 1


def test_message_queue_validates() -> None:
    with pytest.raises(ValueError, match="queue_id"):
        MessageQueue("T", "b", -1)
    with pytest.raises(ValueError, match="topic"):
        MessageQueue("", "b", 0)


def test_build_subscription_splits_on_double_bar_and_trims() -> None:
    sub = build_subscription("T", " TagA || TagB ||  ")
    assert sub.tags_set == {"TagA", "TagB"}
    assert sub.code_set == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert sub.matches_tag("TagA") and not sub.matches_tag("TagC") and not sub.matches_tag(None)
    everything = build_subscription("T", "*")
    assert everything.is_all and everything.matches_tag(None)
    assert build_subscription("T", None).sub_string == "*"
    assert build_subscription("T", "").sub_string == "*"


def test_build_subscription_errors_and_sql() -> None:
    with pytest.raises(ValueError, match="names no tag"):
        build_subscription("T", "||")
    sql = build_subscription("T", "a > 5", ExpressionType.SQL92)
    assert sql.expression_type is ExpressionType.SQL92 and sql.sub_string == "a > 5"
    assert sql.matches_tag("anything")
    with pytest.raises(ValueError, match="SQL92"):
        build_subscription("T", " ", "SQL92")


def test_parse_properties_follows_java_rules() -> None:
    text = "KEYS\x01k1 k2\x02TAGS\x01A\x02\x01novalue\x02nokey\x01\x02ab\x02x\x01y\x02"
    assert parse_properties(text) == {"KEYS": "k1 k2", "TAGS": "A", "x": "y"}
    assert parse_properties("") == {} and parse_properties(None) == {}
    assert parse_properties("TAGS\x01A") == {"TAGS": "A"}  # no trailing separator


prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props)) == props


def test_message_ext_lazy_properties_and_msg_id() -> None:
    m = MessageExt(
        topic="T",
        body=b"hi",
        store_host="10.0.0.1:10911",
        commit_log_offset=1234,
        properties_raw="TAGS\x01A\x02",
    )
    assert m._props is None  # not parsed until read
    assert m.tags == "A"
    assert m.msg_id == m.offset_msg_id == "0A00000100002A9F00000000000004D2"
    m.properties["UNIQ_KEY"] = "ABC"
    assert m.msg_id == "ABC"
    assert "UNIQ_KEY\x01ABC\x02" in m.properties_raw


def test_offset_msg_id_round_trips_ipv4_and_ipv6() -> None:
    v4 = offset_msg_id("127.0.0.1:10911", 99)
    assert len(v4) == 32 and decode_offset_msg_id(v4) == ("127.0.0.1:10911", 99)
    v6 = offset_msg_id("[::1]:10911", 7)
    assert len(v6) == 56 and decode_offset_msg_id(v6) == ("[::1]:10911", 7)
    with pytest.raises(ValueError, match="not an offset message id"):
        decode_offset_msg_id("ABCD")


def test_route_data_queue_sets() -> None:
    route = TopicRouteData(
        queue_datas=(
            QueueData("broker-a", read_queue_nums=2, write_queue_nums=3, perm=6),
            QueueData("broker-b", read_queue_nums=4, write_queue_nums=4, perm=4),  # read-only
            QueueData("broker-c", read_queue_nums=1, write_queue_nums=1, perm=6),  # no master
        ),
        broker_datas=(
            BrokerData("c", "broker-a", {0: "a:1", 1: "a:2"}),
            BrokerData("c", "broker-b", {0: "b:1"}),
            BrokerData("c", "broker-c", {1: "c:2"}),
        ),
    )
    subs = route.subscribe_queues("T")
    assert len(subs) == 2 + 4 + 1
    pubs = route.publish_queues("T")
    assert pubs == tuple(MessageQueue("T", "broker-a", i) for i in range(3))
    assert route.broker("broker-c") is not None and route.broker("broker-c").select_addr() == "c:2"
