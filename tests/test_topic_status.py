"""``rmqk admin topic status`` and AdminClient.topic_status: mqadmin topicStatus over TCP.

GET_TOPIC_STATS_INFO (202) as rocketmq-all-4.9.8's AdminBrokerProcessor answers it: one
TopicOffset per write queue (min and max offset clamped at 0, lastUpdateTimestamp the store
time of the message at max - 1, 0 for an empty queue), TOPIC_NOT_EXIST with
``topic[T] not exist`` for a topic the broker does not have.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_broker_support import RawClient

from rmqk.app.cli import main
from rmqk.plugins.admin.admin_client import AdminClient, TopicQueueStatus, decode_topic_stats
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(90)

# TopicStatsTable.encode() (fastjson 1.2.69, rocketmq-all-4.9.8): offsetTable a HashMap of
# one MessageQueue Orders/broker-a/0 to TopicOffset minOffset 0, maxOffset 3,
# lastUpdateTimestamp 1700000000500. One entry, so no hash order is involved.
TOPIC_STATS = (
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:'
    b'{"lastUpdateTimestamp":1700000000500,"maxOffset":3,"minOffset":0}}}'
)

# Messages per queue of the 4-queue topic; queue 2 is never written to.
SENT = {0: 5, 1: 3, 2: 0, 3: 1}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _fill(broker_thread: object, topic: str) -> dict[int, int]:
    """Create ``topic`` with 4 queues, send SENT; the store time of each queue's last message."""
    ns = broker_thread.namesrv_addr  # type: ignore[attr-defined]
    addr = broker_thread.broker_addr  # type: ignore[attr-defined]

    async def go() -> dict[int, int]:
        async with AdminClient(ns) as admin:
            await admin.create_topic(
                addr, topic, read_queues=4, write_queues=4, perm=6, order=False
            )
            client = await RawClient.connect(addr)
            last_ids: dict[int, str] = {}
            try:
                for qid, count in SENT.items():
                    for i in range(count):
                        sent = await client.send_message(topic, b"m%d" % i, queue_id=qid)
                        assert sent.code == ResponseCode.SUCCESS, sent.remark
                        last_ids[qid] = sent.ext_fields["msgId"]
            finally:
                await client.close()
            stamps = {}
            for qid, msg_id in last_ids.items():
                stamps[qid] = (await admin.view_message(msg_id)).store_timestamp
            # The name server learns the topic from the broker's registration.
            for _ in range(100):
                if await admin.route_brokers(topic):
                    break
                await asyncio.sleep(0.05)
            return stamps

    return asyncio.run(go())


def test_each_queue_shows_its_offsets_and_last_store_time(broker_thread, capsys):
    stamps = _fill(broker_thread, "StatusA")
    assert set(stamps) == {0, 1, 3} and all(s > 0 for s in stamps.values())
    ns = broker_thread.namesrv_addr

    code, out, err = _cli(capsys, "admin", "topic", "status", "StatusA", "-n", ns, "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["topic"] == "StatusA"
    assert answer["queues"] == [
        {
            "topic": "StatusA",
            "broker_name": "broker-a",
            "queue_id": qid,
            "min_offset": 0,
            "max_offset": SENT[qid],
            # The store time of the queue's last message; 0 for the empty queue 2.
            "last_update_timestamp": stamps.get(qid, 0),
        }
        for qid in range(4)
    ]

    # The table: mqadmin's columns, by broker then queue id, "-" for a queue never written.
    code, out, err = _cli(capsys, "admin", "topic", "status", "StatusA", "-n", ns)
    assert code == 0, err
    lines = out.splitlines()
    assert " ".join(lines[0].split()) == "BROKER QID MIN OFFSET MAX OFFSET LAST UPDATED"
    rows = [line.split()[:5] for line in lines[1:]]
    assert [r[:4] for r in rows] == [["broker-a", str(q), "0", str(SENT[q])] for q in range(4)]
    assert rows[2][4] == "-"
    assert all(rows[q][4] != "-" for q in (0, 1, 3))


def test_the_command_example_runs(broker_thread, capsys):
    from rmqk.plugins.admin.admin_cli import ADMIN_COMMAND

    (example,) = [e for e in ADMIN_COMMAND.examples if " topic status " in e]
    _fill(broker_thread, "Orders")
    argv = [*example.split()[1:], "-n", broker_thread.namesrv_addr]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    assert len(out.splitlines()) == 5  # the header and the four queues


def test_an_unknown_topic_is_an_error_naming_it(broker_thread, capsys):
    ns = broker_thread.namesrv_addr
    code, out, err = _cli(capsys, "admin", "topic", "status", "NoSuchTopic", "-n", ns)
    assert code == 1
    assert out == ""
    assert "'NoSuchTopic'" in err and "no route" in err


async def test_the_broker_answers_topic_not_exist_for_a_topic_it_lacks(
    broker: EmbeddedBroker,
) -> None:
    raw = await RawClient.connect(broker.broker_addr)
    try:
        answer = await raw.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Missing"})
    finally:
        await raw.close()
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert answer.remark == "topic[Missing] not exist"
    # The client says which topic and which broker, rather than showing no queues.
    async with AdminClient(broker.namesrv_addr) as admin:
        with pytest.raises(Exception, match=r"topic 'Missing' does not exist on the broker"):
            await admin.topic_stats(broker.broker_addr, "Missing")


async def test_the_body_is_the_bytes_fastjson_writes(broker: EmbeddedBroker) -> None:
    await broker.create_topic("Orders", queues=1)
    raw = await RawClient.connect(broker.broker_addr)
    try:
        for i in range(3):
            sent = await raw.send_message("Orders", b"x%d" % i, queue_id=0)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        answer = await raw.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Orders"})
    finally:
        await raw.close()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    stored = broker.store.store_time_at("Orders", 0, 2)
    assert stored > 0
    assert answer.body == TOPIC_STATS.replace(b"1700000000500", b"%d" % stored)


def test_the_client_reads_the_java_fixture() -> None:
    assert decode_topic_stats(TOPIC_STATS) == [
        TopicQueueStatus("Orders", "broker-a", 0, 0, 3, 1700000000500)
    ]


def test_the_docs_describe_the_command() -> None:
    docs = Path(__file__).resolve().parent.parent / "docs"
    migration = (docs / "migration-from-java.md").read_text()
    (row,) = [line for line in migration.splitlines() if line.startswith("| `topicStatus -t T`")]
    assert "`rmqk admin topic status T`" in row and "not in rmqk yet" not in row
    assert "`rmqk admin topic status T`" in (docs / "cli.md").read_text()


def test_namespace_names_the_topic_as_its_clients_do(broker_thread, capsys):
    _fill(broker_thread, "ns1%StatusN")
    ns = broker_thread.namesrv_addr
    argv = ("admin", "topic", "status", "StatusN", "--namespace", "ns1", "-n", ns, "--json")
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["topic"] == "ns1%StatusN"
    assert [q["max_offset"] for q in answer["queues"]] == [SENT[q] for q in range(4)]
