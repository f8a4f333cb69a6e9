"""``rmqk admin dlq list|show|resend`` over TCP against the embedded broker.

Dead letters are made as a broker makes them: a message consumed from its topic is
sent back (CONSUMER_SEND_MSG_BACK) with delay level -1, which sends it to ``%DLQ%G``
with RETRY_TOPIC and ORIGIN_MESSAGE_ID set.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from cli_support import module_broker, rmqk
from test_broker_support import RawClient, messages_of

from rmqk import PushConsumer
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(180)

broker = module_broker()


def dead_letters(broker_addr: str, group: str, topic: str, bodies: list[str]) -> None:
    async def run() -> None:
        client = await RawClient.connect(broker_addr)
        try:
            for i, body in enumerate(bodies):
                sent = await client.send_message(
                    topic,
                    body.encode(),
                    tags="TagD",
                    keys=f"key-{body}",
                    properties={"p": str(i)},
                )
                assert sent.code == ResponseCode.SUCCESS
            pulled = messages_of(await client.pull(topic, max_msgs=len(bodies) + 10))
            for msg in pulled[-len(bodies) :]:
                fields = {
                    "offset": msg.commit_log_offset,
                    "group": group,
                    "delayLevel": -1,
                    "originMsgId": msg.msg_id,
                    "originTopic": msg.topic,
                    "unitMode": False,
                }
                back = await client.call(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
                assert back.code == ResponseCode.SUCCESS, back.remark
        finally:
            await client.close()

    asyncio.run(run())


def admin(broker: Any, *args: str) -> Any:
    return rmqk("admin", *args, "--namesrv", broker.namesrv_addr)


def read_all(broker: Any, topic: str, count: int) -> list[dict[str, Any]]:
    out = rmqk(
        "consume",
        "--namesrv",
        broker.namesrv_addr,
        "--topic",
        topic,
        "--from",
        "earliest",
        "--count",
        str(count),
        "--format",
        "json",
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_list_show_resend_and_a_second_resend_sends_nothing(broker: Any) -> None:
    dead_letters(broker.broker_addr, "dg", "DlqWork", ["a", "b", "c"])
    dead_letters(broker.broker_addr, "dg", "DlqOther", ["z"])

    listed = admin(broker, "dlq", "list", "--group", "dg", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["topic"]: r["count"] for r in json.loads(listed.stdout)} == {
        "DlqWork": 3,
        "DlqOther": 1,
    }
    shown = admin(broker, "dlq", "show", "--group", "dg", "--count", "2", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(r["body"], r["original_topic"]) for r in rows] == [("a", "DlqWork"), ("b", "DlqWork")]

    first = admin(broker, "dlq", "resend", "--group", "dg")
    assert first.returncode == 0, first.stderr
    assert "resent 4 dead letter(s) of group dg: 1 to DlqOther, 3 to DlqWork" in first.stdout
    again = admin(broker, "dlq", "resend", "--group", "dg")
    assert again.returncode == 0, again.stderr
    assert "resent 0 dead letter(s) of group dg: none" in again.stdout

    # Each original once and each copy once: nothing was sent twice.
    work = read_all(broker, "DlqWork", 6)
    assert sorted(r["body"] for r in work) == ["a", "a", "b", "b", "c", "c"]
    copies = [r for r in work if "ORIGIN_MESSAGE_ID" in r["properties"]]
    assert sorted(r["body"] for r in copies) == ["a", "b", "c"]
    for row in copies:
        assert (row["tags"], row["keys"]) == ("TagD", f"key-{row['body']}")
        assert row["properties"]["p"] == str("abc".index(row["body"]))
    # The DLQ itself is left as it was: list still counts what is there.
    after = admin(broker, "dlq", "list", "--group", "dg", "--json")
    assert {r["topic"]: r["count"] for r in json.loads(after.stdout)}["DlqWork"] == 3


def test_resend_to_the_retry_topic_is_consumed_once_by_a_push_consumer(broker: Any) -> None:
    # The resend runs in its own process (a lite pull consumer and an async producer);
    # a blocking PushConsumer of the group takes the copies from %RETRY%dg2.
    dead_letters(broker.broker_addr, "dg2", "DlqTwo", [f"m{i}" for i in range(5)])
    got: list[tuple[str, str]] = []
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[Any]) -> None:
        with lock:
            got.extend((m.topic, m.body.decode()) for m in msgs)
            if len([g for g in got if g[1].startswith("m")]) >= 10:
                done.set()

    consumer = PushConsumer(
        "dg2", namesrv_addr=broker.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe("DlqTwo", "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        out = admin(broker, "dlq", "resend", "--group", "dg2", "--to-topic", "%RETRY%dg2")
        assert out.returncode == 0, out.stderr
        assert "resent 5 dead letter(s) of group dg2: 5 to %RETRY%dg2" in out.stdout
        assert done.wait(60)
        # Let a duplicate, if any, arrive before judging.
        again = admin(broker, "dlq", "resend", "--group", "dg2", "--to-topic", "%RETRY%dg2")
        assert "resent 0" in again.stdout
    finally:
        consumer.shutdown()
    # Originals once from DlqTwo and copies once, shown under their original topic.
    assert sorted(got) == sorted([("DlqTwo", f"m{i}") for i in range(5)] * 2)


def test_since_passes_over_older_dead_letters_and_records_them(broker: Any) -> None:
    dead_letters(broker.broker_addr, "dg3", "DlqSince", ["old1", "old2"])
    listed = json.loads(admin(broker, "dlq", "list", "--group", "dg3", "--json").stdout)
    since = listed[0]["newest"] + 1
    time.sleep(0.01)  # store times are in ms: the next dead letter is stored after `since`
    dead_letters(broker.broker_addr, "dg3", "DlqSince", ["new"])
    out = admin(broker, "dlq", "resend", "--group", "dg3", "--since", str(since))
    assert out.returncode == 0, out.stderr
    assert "resent 1 dead letter(s) of group dg3: 1 to DlqSince" in out.stdout
    assert "passed over 2 dead letter(s) stored before --since" in out.stdout
    assert "resent 0" in admin(broker, "dlq", "resend", "--group", "dg3").stdout
    assert sorted(r["body"] for r in read_all(broker, "DlqSince", 4)) == [
        "new",
        "new",
        "old1",
        "old2",
    ]


def test_a_write_only_dlq_as_apache_creates_it_is_refused_with_the_fix(broker: Any) -> None:
    dead_letters(broker.broker_addr, "dg4", "DlqPerm", ["x"])
    assert (
        admin(broker, "topic", "create", "%DLQ%dg4", "--queues", "1", "--perm", "2").returncode == 0
    )
    refused = admin(broker, "dlq", "list", "--group", "dg4")
    assert refused.returncode == 1
    assert "topic %DLQ%dg4 is not readable" in refused.stderr
    assert "rmqk admin topic create %DLQ%dg4 --queues 1 --perm 6" in refused.stderr
    fixed = admin(broker, "topic", "create", "%DLQ%dg4", "--queues", "1", "--perm", "6")
    assert fixed.returncode == 0, fixed.stderr
    listed = admin(broker, "dlq", "list", "--group", "dg4", "--json")
    assert [(r["topic"], r["count"]) for r in json.loads(listed.stdout)] == [("DlqPerm", 1)]


def test_a_dead_letter_without_retry_topic_stops_a_resend_without_to_topic(broker: Any) -> None:
    dead_letters(broker.broker_addr, "dg5", "DlqNoTopic", ["first"])

    async def orphan() -> None:
        client = await RawClient.connect(broker.broker_addr)
        try:
            sent = await client.send_message("%DLQ%dg5", b"orphan")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        finally:
            await client.close()

    asyncio.run(orphan())
    out = admin(broker, "dlq", "resend", "--group", "dg5")
    assert out.returncode == 1
    assert "has no RETRY_TOPIC property" in out.stderr
    assert "1 were resent before it" in out.stderr
    # The first was recorded; the orphan goes where --to-topic says.
    rest = admin(broker, "dlq", "resend", "--group", "dg5", "--to-topic", "DlqNoTopic")
    assert "resent 1 dead letter(s) of group dg5: 1 to DlqNoTopic" in rest.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("show", "--count", "0"), "argument --count: must be 1 or more, got 0"),
        (("resend", "--since", "soon"), "argument --since: --since must be epoch milliseconds"),
    ],
)
def test_bad_values_are_usage_errors(args: tuple[str, ...], error: str) -> None:
    out = rmqk("admin", "dlq", *args, "--group", "g", "--namesrv", "127.0.0.1:1")
    assert out.returncode == 2
    assert error in out.stderr


def test_a_failed_send_is_not_recorded_and_the_next_resend_sends_it(broker: Any) -> None:
    dead_letters(broker.broker_addr, "dg6", "DlqFail", ["only"])
    failed = admin(broker, "dlq", "resend", "--group", "dg6", "--to-topic", "bad topic!")
    assert failed.returncode == 1
    assert "sending the dead letter at offset 0 of %DLQ%dg6 to bad topic! failed" in failed.stderr
    assert "0 were resent before it" in failed.stderr
    again = admin(broker, "dlq", "resend", "--group", "dg6")
    assert "resent 1 dead letter(s) of group dg6: 1 to DlqFail" in again.stdout
