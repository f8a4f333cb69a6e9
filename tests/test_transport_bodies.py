"""JSON bodies as Java's fastjson writes and reads them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    build_subscription,
)
from rmqk.spi.transport import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    HeartbeatData,
    ProducerData,
)
from rmqk.wire import bodies
from rmqk.wire.bodies import BodyFormatError, ObjectKey

MQ = MessageQueue("T", "b", 1)


def test_lenient_loads_reads_fastjson_keys() -> None:
    value = bodies.loads(
        b'{"m":{0:"zero",-1:"neg"},"t":{{"topic":"T","queueId":1,"brokerName":"b"}:5},'
        b'"s":"\\u00e9\xc3\xa9","f":1.5,"n":null,"b":[true,false]}'
    )
    assert value["m"] == {0: "zero", -1: "neg"}
    ((key, offset),) = value["t"].items()
    assert isinstance(key, ObjectKey) and dict(key) == {
        "brokerName": "b",
        "queueId": 1,
        "topic": "T",
    }
    assert offset == 5
    assert value["s"] == "éé"
    assert (value["f"], value["n"], value["b"]) == (1.5, None, [True, False])


@pytest.mark.parametrize(
    "text", [b'{"a":1', b'{"a" 1}', b'{"a":1,}', b"[1 2]", b'{"a":tru}', b'{"a":1} x', b"\xff"]
)
def test_lenient_loads_rejects_broken_text(text: bytes) -> None:
    with pytest.raises(BodyFormatError):
        bodies.loads(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_lenient_parser_agrees_with_json_on_standard_text(value: object) -> None:
    text = json.dumps(value)
    assert bodies._LenientParser(text).document() == json.loads(text)


def test_heartbeat_is_fastjson_shaped_and_round_trips() -> None:
    heartbeat = HeartbeatData(
        client_id="ip@1",
        producers=[ProducerData("pg")],
        consumers=[
            ConsumerData(
                "g",
                ConsumeType.CONSUME_ACTIVELY,
                MessageModel.BROADCASTING,
                ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                [
                    build_subscription("T", "b || a", sub_version=5),
                    build_subscription("S", "a > 1", ExpressionType.SQL92, sub_version=6),
                ],
            )
        ],
    )
    body = bodies.encode_heartbeat(heartbeat)
    assert body.startswith(b'{"clientID":"ip@1","consumerDataSet":[{"consumeFromWhere":')
    assert b'"tagsSet":["a","b"]' in body and b'"codeSet":[97,98]' in body
    assert b'"expressionType":"SQL92","subString":"a > 1"' in body
    assert bodies.decode_heartbeat(body) == heartbeat


def test_heartbeat_decode_names_the_bad_field() -> None:
    with pytest.raises(BodyFormatError, match=r"consumeType.*CONSUME_SOMEHOW"):
        bodies.decode_heartbeat(
            b'{"clientID":"x","consumerDataSet":[{"groupName":"g",'
            b'"consumeType":"CONSUME_SOMEHOW"}]}'
        )


def test_lock_bodies() -> None:
    body = bodies.encode_lock_batch_request("g", "ip@1", [MQ])
    assert body == (
        b'{"clientId":"ip@1","consumerGroup":"g",'
        b'"mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    )
    assert bodies.decode_lock_batch_request(body) == ("g", "ip@1", {MQ})
    assert bodies.decode_lock_batch_response(bodies.encode_lock_batch_response([MQ])) == {MQ}
    assert bodies.decode_lock_batch_response(b'{"lockOKMQSet":[]}') == set()


def test_consumer_id_list() -> None:
    assert bodies.decode_consumer_id_list(bodies.encode_consumer_id_list(["a", "b"])) == ["a", "b"]
    with pytest.raises(BodyFormatError, match="consumerIdList"):
        bodies.decode_consumer_id_list(b'{"consumerIdList":[1]}')


def test_offset_tables_use_object_keys() -> None:
    offsets = {MQ: 7, MessageQueue("T", "b", 0): 3}
    body = bodies.encode_reset_offset(offsets)
    assert body == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:3,'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}'
    )
    assert bodies.decode_reset_offset(body) == offsets
    assert bodies.decode_consumer_status(bodies.encode_consumer_status(offsets)) == offsets
    # A writer that had to quote the key object (standard JSON) is read too.
    quoted = b'{"offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":1,\\"topic\\":\\"T\\"}":7}}'
    assert bodies.decode_reset_offset(quoted) == {MQ: 7}


def test_consume_message_directly_result() -> None:
    result = ConsumeMessageDirectlyResult(True, False, "CR_LATER", "slow", 12)
    body = bodies.encode_consume_message_directly_result(result)
    assert body == (
        b'{"autoCommit":false,"consumeResult":"CR_LATER","order":true,'
        b'"remark":"slow","spentTimeMills":12}'
    )
    assert bodies.decode_consume_message_directly_result(body) == result
