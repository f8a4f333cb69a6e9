"""Fuzzing the topic route parser (GET_ROUTEINFO_BY_TOPIC bodies).

A name server, or something pretending to be one, may send any body. The parser
must answer every input with a TopicRouteData or a BodyFormatError naming what
was wrong, never with another exception and never by hanging.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_codec_fuzz import mutated

from rmqk.model import BrokerData, QueueData, TopicRouteData
from rmqk.plugins.remoting.namesrv import decode_topic_route, encode_topic_route
from rmqk.wire.bodies import BodyFormatError

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(
    max_examples=300,
    deadline=2000,  # milliseconds: a hang shows up as a failure, not a stuck run
    suppress_health_check=[HealthCheck.too_slow],
)

names = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_characters='"\\'),
    min_size=1,
    max_size=12,
)


@st.composite
def routes(draw: st.DrawFn) -> TopicRouteData:
    brokers = draw(st.lists(names, min_size=0, max_size=3, unique=True))
    queue_datas = tuple(
        QueueData(
            broker_name=b,
            read_queue_nums=draw(st.integers(0, 1024)),
            write_queue_nums=draw(st.integers(0, 1024)),
            perm=draw(st.integers(0, 15)),
            topic_sys_flag=draw(st.integers(0, 3)),
        )
        for b in brokers
    )
    broker_datas = tuple(
        BrokerData(
            cluster=draw(names),
            broker_name=b,
            broker_addrs=draw(
                st.dictionaries(
                    st.integers(0, 3),
                    st.builds(lambda p: f"127.0.0.1:{p}", st.integers(1, 65535)),
                    max_size=3,
                )
            ),
        )
        for b in brokers
    )
    conf = draw(st.one_of(st.none(), st.just("broker-a:4;broker-b:4")))
    return TopicRouteData(queue_datas=queue_datas, broker_datas=broker_datas, order_topic_conf=conf)


SAMPLES = [
    encode_topic_route(
        TopicRouteData(
            queue_datas=(QueueData("broker-a", 4, 4, 6, 0), QueueData("broker-b", 8, 8, 6, 0)),
            broker_datas=(
                BrokerData("c", "broker-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}),
                BrokerData("c", "broker-b", {0: "127.0.0.1:10931"}),
            ),
            order_topic_conf="broker-a:4",
        ),
        standard_json=standard,
    )
    for standard in (True, False)
]


def decode_or_body_error(data: bytes | str) -> None:
    try:
        route = decode_topic_route(data)
    except BodyFormatError as exc:
        assert str(exc)  # says what was wrong
    else:
        assert isinstance(route, TopicRouteData)
        for b in route.broker_datas:
            assert all(isinstance(k, int) and isinstance(v, str) for k, v in b.broker_addrs.items())
        for q in route.queue_datas:
            assert isinstance(q.read_queue_nums, int) and isinstance(q.broker_name, str)


@settings(FUZZ, max_examples=100)
@given(routes(), st.booleans())
def test_round_trip(route: TopicRouteData, standard: bool) -> None:
    assert decode_topic_route(encode_topic_route(route, standard_json=standard)) == route


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    decode_or_body_error(data)


@FUZZ
@given(mutated(SAMPLES))
def test_mutated_bodies(data: bytes) -> None:
    decode_or_body_error(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | names,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
    max_leaves=20,
)
route_keys = st.sampled_from(
    [
        "queueDatas", "brokerDatas", "brokerName", "brokerAddrs", "readQueueNums",
        "writeQueueNums", "perm", "topicSysFlag", "topicSynFlag", "cluster", "orderTopicConf",
        "filterServerTable",
    ]
)  # fmt: skip
route_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | names,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(route_keys | names, inner, max_size=5)
    ),
    max_leaves=25,
)


@FUZZ
@given(st.one_of(json_values, route_like))
def test_wrong_shapes(value: object) -> None:
    decode_or_body_error(json.dumps(value))


@FUZZ
@given(
    st.dictionaries(st.integers(-5, 5) | names, names | st.integers(), max_size=4),
    st.booleans(),
)
def test_broker_addr_tables(addrs: dict[object, object], quote: bool) -> None:
    items = ",".join(
        (json.dumps(str(k)) if quote or not isinstance(k, int) else str(k)) + ":" + json.dumps(v)
        for k, v in addrs.items()
    )
    body = '{"brokerDatas":[{"brokerName":"b","brokerAddrs":{' + items + "}}]}"
    decode_or_body_error(body)


@pytest.mark.parametrize("depth", [100, 5_000, 200_000])
def test_deep_nesting_is_an_error_not_a_crash(depth: int) -> None:
    for opener, closer in (("[", "]"), ('{"a":', "}"), ("{1:", "}")):
        body = '{"queueDatas":' + opener * depth + "1" + closer * depth + "}"
        decode_or_body_error(body)
