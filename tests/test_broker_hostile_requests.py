"""Issue 19 #4, #8, #13: hostile requests to the embedded broker, over real TCP.

* #4: a send into ``%RETRY%<group>`` needs SUB on a group, whatever header dialect.
* #8: names that are not text (lone surrogates) or not legal names are refused at
  the door; every request is answered, and the topic tables stay readable for
  good (hypothesis over names).
* #13: a request that raises costs one WARNING line, a traceback once per kind.
"""

from __future__ import annotations

import json
import logging
import string
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_broker_hostile_support import SyncClient, heartbeat_body, json_of, raw_call
from test_broker_support import RawClient

from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.acl import AccessValidator, AclConfig, load_acl_config
from rmqk.plugins.remoting import acl as client_acl
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(120)

USER = client_acl.Credentials("rmqk-user", "user-SECRET-0002")
ACL_TOML = f"""
globalWhiteRemoteAddresses = []

[[accounts]]
accessKey = "{USER.access_key}"
secretKey = "{USER.secret_key}"
admin = false
defaultTopicPerm = "PUB|SUB"
defaultGroupPerm = "DENY"
groupPerms = ["mine=SUB"]
"""


def _acl(tmp_path: Path) -> AclConfig:
    path = tmp_path / "plain_acl.toml"
    path.write_text(ACL_TOML)
    return load_acl_config(path)


def _signed(code: int, fields: dict[str, str], body: bytes = b"x") -> RemotingCommand:
    request = RemotingCommand.request(code, fields)
    request.body = body
    client_acl.sign(request, USER)
    return request


def _v1_send(topic: str, group: str | None) -> dict[str, str]:
    fields = {"topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)),
              "flag": "0", "properties": ""}  # fmt: skip
    if group is not None:
        fields["producerGroup"] = group
    return fields


def _v2_send(topic: str, group: str | None) -> dict[str, str]:
    fields = {"b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": ""}  # fmt: skip
    if group is not None:
        fields["a"] = group
    return fields


RETRY_SENDS = [
    # (code, fields): every way a send can name a retry topic it may not write.
    (RequestCode.SEND_MESSAGE, _v1_send("%RETRY%victim", "mine")),
    (RequestCode.SEND_MESSAGE, _v1_send("%RETRY%victim", "other")),
    (RequestCode.SEND_MESSAGE_V2, _v2_send("%RETRY%victim", "mine")),
    (RequestCode.SEND_MESSAGE_V2, _v2_send("%RETRY%victim", None)),
    (RequestCode.SEND_MESSAGE_V2, _v2_send("%RETRY%mine", "other")),
    (RequestCode.SEND_BATCH_MESSAGE, _v2_send("%RETRY%victim", "mine")),
]


@pytest.mark.parametrize(("code", "fields"), RETRY_SENDS)
def test_retry_topic_sends_need_the_groups(
    tmp_path: Path, code: int, fields: dict[str, str]
) -> None:
    validator = AccessValidator(_acl(tmp_path))
    denied = validator.check(_signed(code, dict(fields)), "10.0.0.9:1")
    assert denied is not None
    assert "No default permission for group:" in denied.message


def test_retry_topic_send_of_ones_own_group_passes(tmp_path: Path) -> None:
    validator = AccessValidator(_acl(tmp_path))
    for code, fields in [
        (RequestCode.SEND_MESSAGE, _v1_send("%RETRY%mine", "mine")),
        (RequestCode.SEND_MESSAGE_V2, _v2_send("%RETRY%mine", "mine")),
        (RequestCode.SEND_MESSAGE_V2, _v2_send("Orders", "any-producer")),
    ]:
        assert validator.check(_signed(code, fields), "10.0.0.9:1") is None


async def test_no_injection_into_a_retry_queue_over_tcp(tmp_path: Path) -> None:
    async with EmbeddedBroker(
        tmp_path / "b", namesrv_port=0, broker_port=0, acl=_acl(tmp_path)
    ) as broker:
        client = await RawClient.connect(broker.broker_addr)
        try:
            for code, fields in RETRY_SENDS:
                request = _signed(code, dict(fields))
                request.opaque = 7000 + len(client.pending) + code
                answer = await client.send(request)
                assert answer.code == ResponseCode.SYSTEM_ERROR, (code, fields)
                assert "AclException" in (answer.remark or "")
            assert broker.store.max_offset("%RETRY%victim", 0) == 0
            assert broker.store.max_offset("%RETRY%mine", 0) == 0
        finally:
            await client.close()


# -- #8: names ------------------------------------------------------------------------------

LEGAL = string.ascii_letters + string.digits + "%|_-"
names = st.one_of(
    st.text(alphabet=LEGAL, min_size=1, max_size=20),
    st.text(min_size=0, max_size=12),  # any code point, lone surrogates included
    st.builds(
        lambda a, b: a + "\ud800" + b, st.text(LEGAL, max_size=5), st.text(LEGAL, max_size=5)
    ),
)


def _legal_group(name: str) -> bool:
    return bool(name.strip()) and len(name) <= 255 and all(c in LEGAL for c in name)


def test_names_are_refused_at_the_door_and_every_request_is_answered(
    broker_thread_factory: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "names"
    handle = broker_thread_factory(data_dir=data_dir)
    bk = SyncClient(handle.broker_addr)
    ns = SyncClient(handle.namesrv_addr)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(name=names)
    def one_name(name: str) -> None:
        hb = bk.call(RequestCode.HEART_BEAT, {}, heartbeat_body([name], ["T"], [name]))
        expected = ResponseCode.SUCCESS if _legal_group(name) else ResponseCode.SYSTEM_ERROR
        assert hb.code == expected, (name, hb.remark)
        pull = {"consumerGroup": name, "topic": name, "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "1", "sysFlag": "4", "commitOffset": "0",
                "subscription": "*", "subVersion": "0"}  # fmt: skip
        assert bk.call(RequestCode.PULL_MESSAGE, pull).code != ResponseCode.SUCCESS
        # Answered at all is the point (SyncClient raises on silence).
        bk.call(RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": name, "topic": name, "queueId": "0"})  # fmt: skip
        route = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name})
        if route.code == ResponseCode.SUCCESS:
            assert json_of(route)["queueDatas"]
        send_back = bk.call(RequestCode.CONSUMER_SEND_MSG_BACK,
                            {"group": name, "offset": "0", "delayLevel": "0"})  # fmt: skip
        assert send_back.code != ResponseCode.SUCCESS

    try:
        one_name()
        _assert_tables_readable(bk, ns)
    finally:
        bk.close()
        ns.close()
    handle.stop()
    # The tables stay readable after a restart too: nothing unreadable was stored.
    again = broker_thread_factory(data_dir=data_dir)
    bk, ns = SyncClient(again.broker_addr), SyncClient(again.namesrv_addr)
    try:
        _assert_tables_readable(bk, ns)
    finally:
        bk.close()
        ns.close()


def _assert_tables_readable(bk: SyncClient, ns: SyncClient) -> None:
    configs = bk.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert configs.code == ResponseCode.SUCCESS
    stored = json_of(configs)["topicConfigTable"]
    assert all(_legal_group(t) for t in stored), [t for t in stored if not _legal_group(t)]
    listed = ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
    assert listed.code == ResponseCode.SUCCESS
    assert set(json_of(listed)["topicList"]) == set(stored)


async def test_lone_surrogate_names_get_answers_not_silence(broker: EmbeddedBroker) -> None:
    bk = await RawClient.connect(broker.broker_addr)
    ns = await RawClient.connect(broker.namesrv_addr)
    try:
        pull = await raw_call(bk, RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g", "topic": "T\udc00", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0", "subVersion": "0"})  # fmt: skip
        assert pull.code == ResponseCode.SYSTEM_ERROR
        assert "topic" in (pull.remark or "")
        route = await raw_call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "\ud800"})
        assert route.code == ResponseCode.SYSTEM_ERROR
        hb = await raw_call(bk, RequestCode.HEART_BEAT, {}, heartbeat_body(["g\ud800"]))
        assert hb.code == ResponseCode.SYSTEM_ERROR
        assert "illegal characters" in (hb.remark or "")
        assert broker.store.topics.get("%RETRY%g\ud800") is None
    finally:
        await bk.close()
        await ns.close()


# -- #13: logs ------------------------------------------------------------------------------


async def test_a_failing_request_logs_one_line_and_a_traceback_once_per_kind(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(conn: Any, request: RemotingCommand, serialize_type: int) -> None:
        raise RuntimeError("boom " + "x" * 200)

    def bad_key(conn: Any, request: RemotingCommand, serialize_type: int) -> None:
        raise KeyError("missing")

    handlers = broker.processors._handlers
    handlers[RequestCode.GET_MAX_OFFSET] = boom
    handlers[RequestCode.GET_MIN_OFFSET] = bad_key
    caplog.set_level(logging.INFO, logger="rmqk")
    client = await RawClient.connect(broker.broker_addr)
    try:
        for _ in range(100):
            for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET):
                answer = await client.call(code, {"topic": "T", "queueId": 0})
                assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "KeyError: 'missing'"
    finally:
        await client.close()
    failures = [r for r in caplog.records if "failed" in r.getMessage() and r.name.startswith(
        "rmqk.broker")]  # fmt: skip
    assert len(failures) == 200
    assert all(r.levelno == logging.WARNING for r in failures)
    with_traceback = [r for r in failures if r.exc_info]
    assert len(with_traceback) == 2
    assert sum(len(r.getMessage()) for r in failures) < 200 * 300
    # The remark a client sees is one line too.
    assert "\n" not in (answer.remark or "")


def test_every_heartbeat_group_rule_matches_apache() -> None:
    # Validators.checkGroup at rocketmq-all-4.9.8: not blank, at most 255, ^[%|a-zA-Z0-9_-]+$.
    from rmqk.plugins.broker.processors.topics import validate_group

    assert validate_group("ok-group_1|%") is None
    assert validate_group("g" * 255) is None
    assert validate_group("g" * 256) == "the specified group is longer than group max length 255."
    assert validate_group(" ") == "the specified group is blank"
    assert validate_group("a b") == (
        "the specified group[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    )
    assert json.dumps(validate_group("\ud800"))  # a remark that can be sent
