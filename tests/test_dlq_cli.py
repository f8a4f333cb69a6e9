"""``rmqk admin dlq list|show|resend`` over TCP against the embedded broker.

Dead letters are made as a broker makes them: a message consumed from its topic is
sent back (CONSUMER_SEND_MSG_BACK) with delay level -1, which sends it to ``%DLQ%G``
with RETRY_TOPIC and ORIGIN_MESSAGE_ID set.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from cli_support import module_broker, rmqk
from test_broker_support import RawClient, messages_of

from rmqk import PushConsumer
from rmqk.protocol import RequestCode, ResponseCode

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
