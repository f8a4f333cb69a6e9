"""``rmqk broker`` and ``rmqk admin`` against embedded brokers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import pytest
from cli_support import start_rmqk
from test_broker_support import RawClient

from rmqk.app.cli import main
from rmqk.wire.protocol import RequestCode

pytestmark = pytest.mark.timeout(90)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _produce(addr: str, topic: str, count: int, queue_id: int = 0) -> list[str]:
    async def go() -> list[str]:
        client = await RawClient.connect(addr)
        try:
            ids = []
            for i in range(count):
                sent = await client.send_message(
                    topic, f"body-{i}".encode(), tags="T", queue_id=queue_id
                )
                ids.append(sent.ext_fields["msgId"])
            return ids
        finally:
            await client.close()

    return asyncio.run(go())


def _commit(addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    async def go() -> None:
        client = await RawClient.connect(addr)
        try:
            await client.call(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": queue_id,
                    "commitOffset": offset,
                },
            )
        finally:
            await client.close()

    asyncio.run(go())


def test_topic_create_and_list(broker_thread, capsys):
    ns = broker_thread.namesrv_addr
    code, out, _ = _run(capsys, "admin", "topic", "create", "Orders", "--queues", "3", "-n", ns)
    assert code == 0
    assert out.splitlines()[0].split() == ["TOPIC", "BROKER", "READ", "WRITE", "PERM", "ORDER"]
    assert out.splitlines()[1].split() == [
        "Orders",
        broker_thread.broker_addr,
        "3",
        "3",
        "RW-",
        "False",
    ]

    code, out, _ = _run(capsys, "admin", "topic", "list", "-n", ns, "--json")
    assert code == 0
    rows = {row["topic"]: row for row in json.loads(out)}
    assert rows["Orders"] == {
        "topic": "Orders",
        "broker_name": "broker-a",
        "read_queue_nums": 3,
        "write_queue_nums": 3,
        "perm": 6,
        "order": False,
    }
    assert rows["TBW102"]["perm"] == 7

    code, out, _ = _run(capsys, "admin", "topic", "list", "-n", ns)
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "BROKER", "READ", "WRITE", "PERM"]
    assert ["Orders", "broker-a", "3", "3", "RW-"] in [line.split() for line in lines[1:]]


def test_consumer_progress(broker_thread, capsys):
    _produce(broker_thread.broker_addr, "Progress", 5, queue_id=1)
    _commit(broker_thread.broker_addr, "pg1", "Progress", 1, 2)
    code, out, _ = _run(
        capsys, "admin", "consumer", "progress", "pg1", "-n", broker_thread.namesrv_addr, "--json"
    )
    assert code == 0
    report = json.loads(out)
    queues = {q["queue_id"]: q for q in report["queues"] if q["topic"] == "Progress"}
    assert set(queues) == {0, 1, 2, 3}
    assert (queues[1]["broker_offset"], queues[1]["consumer_offset"], queues[1]["diff"]) == (
        5,
        2,
        3,
    )
    assert queues[1]["last_timestamp"] > 0
    assert report["diffTotal"] == 3

    code, out, _ = _run(
        capsys, "admin", "consumer", "progress", "pg1", "-n", broker_thread.namesrv_addr
    )
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "TOPIC",
        "BROKER",
        "QID",
        "BROKER OFFSET",
        "CONSUMER OFFSET",
        "DIFF",
        "LAST TIME",
    ]
    assert lines[2].split()[:6] == ["Progress", "broker-a", "1", "5", "2", "3"]
    assert lines[-1] == "diff total: 3"


def test_message_by_offset_id(broker_thread, capsys):
    ids = _produce(broker_thread.broker_addr, "Viewed", 2)
    code, out, _ = _run(
        capsys, "admin", "message", ids[1], "-n", broker_thread.namesrv_addr, "--json"
    )
    assert code == 0
    info = json.loads(out)
    assert info["topic"] == "Viewed"
    assert info["body"] == "body-1"
    assert info["tags"] == "T"
    assert info["queueOffset"] == 1
    assert info["storeHost"] == broker_thread.broker_addr
    assert info["properties"]["CLUSTER"] == "DefaultCluster"

    code, out, _ = _run(capsys, "admin", "message", ids[0], "-n", broker_thread.namesrv_addr)
    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert fields["Topic"].strip() == "Viewed"
    assert fields["Message Body"].strip() == "body-0"

    code, _, err = _run(capsys, "admin", "message", "nothex", "-n", broker_thread.namesrv_addr)
    assert code == 1
    assert "is not an offset message id" in err


def test_admin_reports_an_unreachable_name_server(capsys):
    code, _, err = _run(capsys, "admin", "topic", "list", "-n", "127.0.0.1:1", "--timeout", "1")
    assert code == 1
    assert err.startswith("rmqk: error: connect to 127.0.0.1:1 failed")


def test_broker_command_picks_free_ports_and_stops_on_sigint(tmp_path, capsys):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = start_rmqk(
        "broker", "--port", "0", "--data", str(tmp_path / "d"), "--delay-levels", "1s 2s",
        "--flush", "sync", env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while len(lines) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        namesrv = re.search(r"name server listening on (\S+)", lines[0]).group(1)
        broker = re.search(
            r"broker broker-a \(cluster DefaultCluster\) listening on (\S+)", lines[1]
        ).group(1)
        assert not namesrv.endswith(":9876")
        code, out, _ = _run(capsys, "admin", "topic", "create", "FromCli", "-n", namesrv, "--json")
        assert code == 0
        assert json.loads(out)[0]["broker"] == broker
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "rmqk broker: stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_broker_help_lists_every_broker_conf_key_it_reads(capsys):
    # A newcomer read four keys in --help while the reader takes ten (and refuses others).
    from rmqk.plugins.broker.config_file import BROKER_CONF_KEYS

    with pytest.raises(SystemExit):
        main(["broker", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert len(BROKER_CONF_KEYS) >= 10
    for key in BROKER_CONF_KEYS:
        assert key in text, key
