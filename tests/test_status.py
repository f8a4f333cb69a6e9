"""`rmqk status`: a group's members, queues, offsets and lag, read from a real broker."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import jsonl_consumer, module_broker, produce, rmqk, start_rmqk

from rmqk.model import MessageQueue
from rmqk.plugins.status.collect import QueueStatus, parse_running_info

pytestmark = pytest.mark.timeout(120)


def test_running_info_is_read_as_rmqk_and_java_write_it() -> None:
    ours = json.dumps(
        {
            "properties": {"PROP_CONSUMEORDERLY": "false", "PROP_CONSUMER_START_TIMESTAMP": "5"},
            "subscriptionSet": [{"topic": "Orders"}, {"topic": "%RETRY%g"}],
            "mqTable": {"Orders@broker-a@3": {"cachedMsgCount": 7, "locked": False}},
            "statusTable": {"Orders": {"consumeOKTPS": 1.5, "pullTPS": 2.0}},
        }
    ).encode()
    info = parse_running_info(ours)
    assert info.queues == {
        MessageQueue("Orders", "broker-a", 3): {"cachedMsgCount": 7, "locked": False}
    }
    assert info.topics == ("%RETRY%g", "Orders")
    # fastjson writes a TreeMap<MessageQueue, ...> with the objects themselves as keys.
    java = (
        b'{"mqTable":{{"brokerName":"broker-b","queueId":1,"topic":"Orders"}:'
        b'{"cachedMsgCount":2,"locked":true}},"properties":{"PROP_CONSUMEORDERLY":"true"},'
        b'"subscriptionSet":[{"topic":"Orders"}]}'
    )
    info = parse_running_info(java)
    assert list(info.queues) == [MessageQueue("Orders", "broker-b", 1)]
    assert info.queues[MessageQueue("Orders", "broker-b", 1)]["locked"] is True
    assert info.properties["PROP_CONSUMEORDERLY"] == "true"


def test_queue_lag_and_state() -> None:
    mq = MessageQueue("T", "b", 0)
    assert QueueStatus(mq, 100, 40).lag == 60
    assert QueueStatus(mq, 100, None).lag == 100  # a group that never committed
    assert QueueStatus(mq, None, 40).lag is None
    assert QueueStatus(mq, 1, 1).state == "unassigned"
    assert QueueStatus(mq, 1, 1, owner="c", locked=True).state == "locked"


broker = module_broker()


def test_status_of_a_running_consumer_and_of_an_idle_group(broker: Any, tmp_path: Path) -> None:
    count = 100
    produced = produce(broker.namesrv_addr, "StatusT", "--count", str(count))
    assert produced.returncode == 0, produced.stderr
    out = tmp_path / "out.jsonl"
    config = tmp_path / "status.toml"
    config.write_text(jsonl_consumer("watched", "g-status", broker.namesrv_addr, "StatusT", out))
    # Before anyone consumes: offsets from the broker, nobody online, exit status 1.
    idle = rmqk(
        "status",
        "--namesrv",
        broker.namesrv_addr,
        "--group",
        "g-status",
        "--topic",
        "StatusT",
        "--json",
    )
    assert idle.returncode == 1
    (group,) = json.loads(idle.stdout)
    assert group["clients"] == []
    assert group["lag"] == count
    assert [q["state"] for q in group["queues"]] == ["unassigned"] * 4
    assert "no consumer of group g-status is online" in group["problems"]

    proc = start_rmqk("run", str(config))
    try:
        deadline = time.monotonic() + 45
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            result = rmqk("status", str(config), "--json")
            consumed = len(out.read_text().splitlines()) if out.exists() else 0
            if result.returncode == 0 and consumed == count:
                (status,) = json.loads(result.stdout)
                if all(q["owner"] for q in status["queues"]):
                    break
            time.sleep(0.3)
        assert status, result.stdout + result.stderr
        assert status["name"] == "watched" and status["group"] == "g-status"
        (client,) = status["clients"]
        assert client["state"] == "RUNNING" and client["orderly"] is False
        held = {(q["topic"], q["queue"]) for q in client["queues"]}
        # The retry topic's queue may come with a later rebalance, once its route exists.
        assert held - {("%RETRY%g-status", 0)} == {("StatusT", i) for i in range(4)}
        queues = status["queues"]
        assert [(q["topic"], q["queue"]) for q in queues] == [("StatusT", i) for i in range(4)]
        assert sum(q["broker_offset"] for q in queues) == count
        # The broker learns committed offsets with pulls and every few seconds.
        assert all(0 <= (q["consumer_offset"] or 0) <= q["broker_offset"] for q in queues)
        assert all(q["owner"] == client["client_id"] and q["state"] == "consuming" for q in queues)
        # Read from the client's running info (acknowledgements may still be on their way).
        assert all(0 <= q["cached_messages"] <= count for q in queues)
        assert status["problems"] == []

        text = rmqk("status", str(config))
        assert text.returncode == 0, text.stderr
        assert "[consumers.watched] group g-status: 1 of 1 consumer(s) answering" in text.stdout
        assert client["client_id"] in text.stdout
        assert "broker offset  consumer offset  lag" in text.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
    # A clean stop commits every offset: nothing left behind, and nobody online.
    after = rmqk("status", str(config), "--json")
    assert after.returncode == 1
    (status,) = json.loads(after.stdout)
    assert status["clients"] == [] and status["lag"] == 0
    assert [q["consumer_offset"] for q in status["queues"]] == [
        q["broker_offset"] for q in status["queues"]
    ]
    assert len(out.read_text().splitlines()) == count


def test_status_says_what_is_wrong_in_one_place(tmp_path: Path) -> None:
    result = rmqk("status", "--namesrv", "127.0.0.1:1", "--group", "g", "--timeout", "1")
    assert result.returncode == 1
    assert "route of %RETRY%g: cannot connect to 127.0.0.1:1" in result.stdout
    # Nothing could be asked: no "no consumer online, lag 0" as if the cluster had said so.
    assert result.stdout.startswith("group g: the cluster could not be reached\n"), result.stdout
    assert "is online is unknown: no broker could be asked" in result.stdout
    assert "lag 0" not in result.stdout and "no consumer of group g is online" not in result.stdout
    as_json = rmqk(
        "status", "--namesrv", "127.0.0.1:1", "--group", "g", "--timeout", "1", "--json"
    )
    (group,) = json.loads(as_json.stdout)
    assert (group["unreachable"], group["lag"]) == (True, None)
    usage = rmqk("status")
    assert usage.returncode == 1
    assert usage.stderr.strip() == (
        "rmqk: error: give a config file, or --namesrv ADDR and --group GROUP"
    )


def test_options_status_would_ignore_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(jsonl_consumer("c", "g", "127.0.0.1:1", "T", tmp_path / "o.jsonl"))
    cases = [
        (
            [str(config), "--transport", "bogus"],
            "--transport goes without CONFIG; a config names it per consumer",
        ),
        (
            ["--namesrv", "127.0.0.1:1", "--group", "g", "--timeout", "-5"],
            "--timeout must be more than 0 seconds, got -5",
        ),
        ([str(config), "--timeout", "0"], "--timeout must be more than 0 seconds, got 0"),
    ]
    for options, error in cases:
        result = rmqk("status", *options)
        assert result.returncode == 1, (options, result.stdout)
        assert result.stderr.strip() == f"rmqk: error: {error}", options
