"""SQL92 subscriptions end to end, over real TCP against the embedded broker.

Messages carry user properties set by rmqk's producer; the broker filters them
(enablePropertyFilter on) and the consumers receive exactly the matching ones.
With the option off, or with an expression the broker refuses, start() and
subscribe() fail with the broker's own code and reason, as Java's
checkClientInBroker makes them.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_support import start_rmqk
from engine_support import create_topic, push_consumer, wait_for

from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.sync import PushConsumer
from rmqk.model import ConsumeStatus, ServiceState
from rmqk.model.errors import RmqkError, SubscriptionRefusedError
from rmqk.model.message import Message, MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.config_file import BrokerFileConfig, read_broker_config
from rmqk.wire.protocol import ResponseCode

pytestmark = pytest.mark.timeout(90)

TOTAL = 200


def props(i: int) -> dict[str, str]:
    # price: "45" for n=90, "45.5" for n=91.
    price = str(i // 2) if i % 2 == 0 else str(i / 2)
    out = {"n": str(i), "kind": "even" if i % 2 == 0 else "odd", "price": price}
    if i % 3 == 0:
        out["region"] = "eu"
    return out


async def send_all(namesrv: str, topic: str) -> None:
    async with AsyncProducer("sql92-producer", namesrv_addr=namesrv) as producer:
        for start in range(0, TOTAL, 50):
            batch = [
                Message(
                    topic,
                    f"m-{i}".encode(),
                    tags="TagA" if i % 10 == 0 else "TagB",
                    properties=props(i),
                )
                for i in range(start, start + 50)
            ]
            await producer.send_batch(batch)


@pytest.fixture
async def filtering_broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(
        tmp_path / "broker", namesrv_port=0, broker_port=0, enable_property_filter=True
    ) as b:
        yield b


@pytest.fixture
async def plain_broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(tmp_path / "plain", namesrv_port=0, broker_port=0) as b:
        yield b


def lite(broker: Any, group: str) -> AsyncLitePullConsumer:
    return AsyncLitePullConsumer(
        group, namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )


async def poll_at_least(
    c: AsyncLitePullConsumer, count: int, timeout_s: float, settle_ms: int
) -> list[MessageExt]:
    """Poll until ``count`` messages came or ``timeout_s`` passed, then once more for strays."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await c.poll(300))
    got.extend(await c.poll(settle_ms))
    return got


def numbers(messages: list[MessageExt]) -> Counter[int]:
    return Counter(int(m.get_property("n") or "-1") for m in messages)


async def test_push_consumer_receives_exactly_the_matching_messages(filtering_broker: Any) -> None:
    await create_topic(filtering_broker, "SqlPush", 4)
    await send_all(filtering_broker.namesrv_addr, "SqlPush")
    expected = {i for i in range(TOTAL) if (i >= 50 and i % 2 == 0) or i % 10 == 0}
    got: list[MessageExt] = []
    c = push_consumer(filtering_broker, "g-sql-push")
    # TAGS is a property like any other to the broker's evaluator, as on Apache.
    c.subscribe("SqlPush", "(n >= 50 AND kind = 'even') OR TAGS = 'TagA'", "SQL92")
    c.register_listener(lambda msgs: got.extend(msgs))
    await c.start()
    try:
        await wait_for(lambda: len(got) >= len(expected), 30, f"{len(expected)} messages")
        await asyncio.sleep(1.0)  # nothing more may come
    finally:
        await c.shutdown()
    seen = numbers(got)
    assert set(seen) == expected
    assert max(seen.values()) == 1


async def test_lite_pull_consumer_receives_exactly_the_matching_messages(
    filtering_broker: Any,
) -> None:
    await create_topic(filtering_broker, "SqlLite", 2)
    await send_all(filtering_broker.namesrv_addr, "SqlLite")
    # region is missing on two messages of three: unknown, so not selected.
    expected = {i for i in range(TOTAL) if i % 3 == 0 and i / 2 > 10.0}
    assert len(expected) == 60
    c = lite(filtering_broker, "g-sql-lite")
    c.subscribe("SqlLite", "region IS NOT NULL AND price > 10.0", "SQL92")
    async with c:
        got = await poll_at_least(c, len(expected), 30, 1000)
    seen = numbers(got)
    assert set(seen) == expected
    assert max(seen.values()) == 1


async def test_a_thrown_evaluation_selects_nothing(filtering_broker: Any) -> None:
    # price is "90.5" for n=181: Integer.valueOf throws, Apache logs it and skips the message.
    await create_topic(filtering_broker, "SqlThrow", 1)
    await send_all(filtering_broker.namesrv_addr, "SqlThrow")
    expected = {i for i in range(TOTAL) if i % 2 == 0 and i / 2 > 90}
    c = lite(filtering_broker, "g-sql-throw")
    c.subscribe("SqlThrow", "price > 90", "SQL92")
    async with c:
        got = await poll_at_least(c, len(expected), 30, 1000)
    assert set(numbers(got)) == expected


@pytest.mark.parametrize("kind", ["push", "lite"])
async def test_invalid_sql_fails_start_with_the_brokers_reason(
    filtering_broker: Any, kind: str
) -> None:
    await create_topic(filtering_broker, "SqlBad", 1)
    if kind == "push":
        c: Any = push_consumer(filtering_broker, f"g-bad-{kind}")
        c.register_listener(lambda msgs: None)
    else:
        c = lite(filtering_broker, f"g-bad-{kind}")
    c.subscribe("SqlBad", "a = NULL", "SQL92")
    with pytest.raises(SubscriptionRefusedError) as caught:
        await c.start()
    assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert caught.value.remark == "java.lang.RuntimeException: 'NULL' cannot be compared."
    assert "'SqlBad'" in str(caught.value) and "'a = NULL'" in str(caught.value)
    assert c.state is ServiceState.START_FAILED
    # The failed consumer left its group: a corrected one starts under the same name.
    if kind == "push":
        again: Any = push_consumer(filtering_broker, f"g-bad-{kind}")
        again.register_listener(lambda msgs: None)
    else:
        again = lite(filtering_broker, f"g-bad-{kind}")
    again.subscribe("SqlBad", "a = 1", "SQL92")
    await again.start()
    await (again.shutdown() if kind == "push" else again.close())


async def test_a_topic_without_a_route_is_not_checked(filtering_broker: Any) -> None:
    """As Java's checkClientInBroker: no broker of the topic is known, so none is asked."""
    c = lite(filtering_broker, "g-no-route")
    c.subscribe("NoSuchTopic", "a = NULL", "SQL92")
    async with c:
        assert c.state is ServiceState.RUNNING


async def test_retry_redelivers_a_matching_message(tmp_path: Path) -> None:
    """Retry topics are not filtered (filterSupportRetry off, Apache's default)."""
    async with EmbeddedBroker(
        tmp_path / "retry",
        namesrv_port=0,
        broker_port=0,
        enable_property_filter=True,
        delay_levels=" ".join(["100ms"] * 18),
    ) as broker:
        await create_topic(broker, "SqlRetry", 1)
        await send_all(broker.namesrv_addr, "SqlRetry")
        deliveries: list[tuple[int, int]] = []
        c = push_consumer(broker, "g-sql-retry")
        c.subscribe("SqlRetry", "n = 7 OR n = 8", "SQL92")

        @c.register_listener
        def handle(messages: list[MessageExt]) -> ConsumeStatus:
            for m in messages:
                deliveries.append((int(m.get_property("n") or "-1"), m.reconsume_times))
            if any(m.get_property("n") == "8" and m.reconsume_times == 0 for m in messages):
                return ConsumeStatus.RECONSUME_LATER
            return ConsumeStatus.CONSUME_SUCCESS

        await c.start()
        try:
            await wait_for(lambda: (8, 1) in deliveries, 30, "the retried message")
            await asyncio.sleep(0.5)
        finally:
            await c.shutdown()
        assert sorted(deliveries) == [(7, 0), (8, 0), (8, 1)]


@pytest.mark.parametrize("kind", ["push", "lite"])
async def test_a_broker_without_property_filter_refuses_sql92_at_start(
    plain_broker: Any, kind: str
) -> None:
    await create_topic(plain_broker, "SqlOff", 1)
    if kind == "push":
        c: Any = push_consumer(plain_broker, "g-off")
        c.register_listener(lambda msgs: None)
    else:
        c = lite(plain_broker, "g-off")
    c.subscribe("SqlOff", "a > 5", "SQL92")
    with pytest.raises(SubscriptionRefusedError) as caught:
        await c.start()
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    assert caught.value.remark == "The broker does not support consumer to filter message by SQL92"


async def test_a_pull_with_sql92_is_refused_when_the_option_is_off(plain_broker: Any) -> None:
    """The pull path answers as Apache's PullMessageProcessor: SYSTEM_ERROR and the reason."""
    from test_broker_support import RawClient

    await create_topic(plain_broker, "SqlOffPull", 1)
    client = await RawClient.connect(plain_broker.broker_addr)
    try:
        response = await client.call(
            11,  # PULL_MESSAGE
            {
                "consumerGroup": "g",
                "topic": "SqlOffPull",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 4,  # subscription carried in the pull
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "a > 5",
                "subVersion": 1,
                "expressionType": "SQL92",
            },
        )
    finally:
        await client.close()
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "The broker does not support consumer to filter message by SQL92"


async def test_async_subscribe_on_a_running_consumer_reports_the_refusal(
    filtering_broker: Any,
) -> None:
    await create_topic(filtering_broker, "SqlFirst", 1)
    await create_topic(filtering_broker, "SqlLater", 1)
    c = lite(filtering_broker, "g-sql-later")
    c.subscribe("SqlFirst", "*")
    async with c:
        pending = c.subscribe("SqlLater", "n >", "SQL92")
        assert pending is not None
        with pytest.raises(SubscriptionRefusedError, match="ParseException"):
            await pending
        # The refused subscription was not taken.
        assert "SqlLater" not in c.rebalance.subscription_inner
        accepted = c.subscribe("SqlLater", "n < 3", "SQL92")
        assert accepted is not None
        await accepted
        await send_all(filtering_broker.namesrv_addr, "SqlLater")
        got = await poll_at_least(c, 3, 20, 500)
    assert sorted(numbers(got).elements()) == [0, 1, 2]


def test_sync_subscribe_on_a_running_consumer_raises(broker_thread_factory: Any) -> None:
    handle = broker_thread_factory(enable_property_filter=True)
    asyncio.run(create_topic(handle, "SqlSync", 1))
    c = PushConsumer("g-sql-sync", namesrv_addr=handle.namesrv_addr)
    c.subscribe("SqlSync", "*")
    c.register_listener(lambda msgs: None)
    c.start()
    try:
        with pytest.raises(SubscriptionRefusedError, match="Lexical error"):
            c.subscribe("SqlSync", "n # 1", "SQL92")
        c.subscribe("SqlSync", "n > 1", "SQL92")
    finally:
        c.shutdown()


def test_broker_conf_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# Apache's broker.conf\nenablePropertyFilter=TRUE\nbrokerName = b-1\n"
        "brokerClusterName: C1\nautoCreateTopicEnable=false\n"
    )
    assert read_broker_config(conf) == BrokerFileConfig(
        enable_property_filter=True, broker_name="b-1", cluster="C1", auto_create_topic=False
    )
    conf.write_text(
        "transactionTimeOut=3000\ntransactionCheckMax=5\ntransactionCheckInterval=1500\n"
    )
    tx_conf = read_broker_config(conf)
    assert tx_conf == BrokerFileConfig(
        transaction_timeout_ms=3000, transaction_check_max=5, transaction_check_interval_ms=1500
    )
    from rmqk.plugins.broker.cli import _transaction_settings

    settings = _transaction_settings(tx_conf)
    assert (settings.timeout, settings.check_max, settings.check_interval) == (3.0, 5, 1.5)
    default = _transaction_settings(BrokerFileConfig())
    assert (default.timeout, default.check_max, default.check_interval) == (6.0, 15, 60.0)
    conf.write_text("transactionCheckMax=0\n")
    with pytest.raises(RmqkError, match="transactionCheckMax=0: must be at least 1"):
        read_broker_config(conf)
    conf.write_text("enablePropertyFilter=yes\n")
    with pytest.raises(RmqkError, match="enablePropertyFilter='yes': expected true or false"):
        read_broker_config(conf)
    conf.write_text("filterSupportRetry=true\n")
    with pytest.raises(RmqkError, match="filterSupportRetry is not a setting"):
        read_broker_config(conf)


def _broker_process(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = start_rmqk("broker", "--port", "0", "--data", str(tmp_path / "d"), *args, env=env)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if "data in" in line:
            break
    return proc, lines


def test_rmqk_broker_flag_wins_over_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("enablePropertyFilter=false\nbrokerName=b-conf\n")
    proc, lines = _broker_process(tmp_path, "--config", str(conf), "--enable-property-filter")
    try:
        text = "\n".join(lines)
        assert "broker b-conf (cluster DefaultCluster)" in text
        assert "SQL92 filtering on (enablePropertyFilter=true)" in text
        match = re.search(r"name server listening on (\S+)", text)
        assert match is not None
        namesrv = match.group(1)

        async def check() -> None:
            c = AsyncLitePullConsumer("g-cli", namesrv_addr=namesrv)
            async with AsyncProducer("p-cli", namesrv_addr=namesrv) as p:
                await p.send(Message("CliSql", b"x", properties={"a": "7"}))
            c.subscribe("CliSql", "a > 5", "SQL92")
            async with c:
                pass

        asyncio.run(check())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_rmqk_broker_without_the_flag_refuses_sql92(tmp_path: Path) -> None:
    proc, lines = _broker_process(tmp_path)
    try:
        text = "\n".join(lines)
        assert "SQL92 filtering" not in text
        match = re.search(r"name server listening on (\S+)", text)
        assert match is not None
        namesrv = match.group(1)

        async def check() -> None:
            async with AsyncProducer("p-cli", namesrv_addr=namesrv) as p:
                await p.send(Message("CliSql", b"x", properties={"a": "7"}))
            c = AsyncLitePullConsumer("g-cli", namesrv_addr=namesrv)
            c.subscribe("CliSql", "a > 5", "SQL92")
            with pytest.raises(SubscriptionRefusedError, match="does not support"):
                await c.start()

        asyncio.run(check())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def _sql_heartbeat(group: str, topic: str, expression: str, version: int) -> bytes:
    import json

    sub = {
        "classFilterMode": False,
        "codeSet": [],
        "expressionType": "SQL92",
        "subString": expression,
        "subVersion": version,
        "tagsSet": [],
        "topic": topic,
    }
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": [sub],
        "unitMode": False,
    }
    body = {"clientID": "raw@1", "consumerDataSet": [consumer], "producerDataSet": []}
    return json.dumps(body).encode()


async def test_pulls_by_heartbeat_use_the_compiled_filter_data(filtering_broker: Any) -> None:
    """Without the subscription flag a pull uses what the heartbeat registered (Apache's order)."""
    from test_broker_support import RawClient

    from rmqk.wire.protocol import RequestCode

    await create_topic(filtering_broker, "SqlRaw", 1)
    await send_all(filtering_broker.namesrv_addr, "SqlRaw")
    client = await RawClient.connect(filtering_broker.broker_addr)
    try:
        ok = await client.call(
            RequestCode.HEART_BEAT, body=_sql_heartbeat("g-raw", "SqlRaw", "a >", 1)
        )
        assert ok.code == ResponseCode.SUCCESS
        refused = await client.pull("SqlRaw", group="g-raw", subscription=None)
        assert refused.code == ResponseCode.FILTER_DATA_NOT_EXIST
        assert refused.remark == (
            "The broker's consumer filter data is not exist!Your expression may be wrong!"
        )
        body = _sql_heartbeat("g-raw", "SqlRaw", "n BETWEEN 10 AND 12", 2)
        assert (await client.call(RequestCode.HEART_BEAT, body=body)).code == ResponseCode.SUCCESS
        found = await client.pull("SqlRaw", group="g-raw", subscription=None)
        assert found.code == ResponseCode.SUCCESS
        from test_broker_support import messages_of

        assert [m.get_property("n") for m in messages_of(found)] == ["10", "11", "12"]
    finally:
        await client.close()


async def test_check_client_config_answers_as_apache(filtering_broker: Any) -> None:
    import json

    from test_broker_support import RawClient

    from rmqk.wire.protocol import RequestCode

    def body(sub: dict[str, Any] | None) -> bytes:
        return json.dumps({"clientId": "c", "group": "g", "subscriptionData": sub}).encode()

    client = await RawClient.connect(filtering_broker.broker_addr)
    try:
        empty = await client.call(RequestCode.CHECK_CLIENT_CONFIG)
        assert (empty.code, empty.remark) == (ResponseCode.SUCCESS, None)
        tag = await client.call(
            RequestCode.CHECK_CLIENT_CONFIG,
            body=body({"topic": "T", "subString": "a >", "expressionType": "TAG"}),
        )
        assert tag.code == ResponseCode.SUCCESS  # a tag expression is never checked
        good = await client.call(
            RequestCode.CHECK_CLIENT_CONFIG,
            body=body({"topic": "T", "subString": "a > 1", "expressionType": "SQL92"}),
        )
        assert good.code == ResponseCode.SUCCESS
        # No filter of that type is registered: Apache's NullPointerException has no message.
        unknown = await client.call(
            RequestCode.CHECK_CLIENT_CONFIG,
            body=body({"topic": "T", "subString": "a > 1", "expressionType": "XYZ"}),
        )
        assert (unknown.code, unknown.remark) == (ResponseCode.SUBSCRIPTION_PARSE_FAILED, None)
    finally:
        await client.close()
