"""``rmqk admin consumer reset-offset`` and AdminClient's reset, over TCP to an embedded broker."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_broker_cli import _commit, _produce, _run

from rmqk.plugins.admin.admin_client import AdminClient
from rmqk.plugins.admin.reset_offset import reset_offset

pytestmark = pytest.mark.timeout(120)


def _stored(namesrv: str, group: str, topic: str) -> dict[int, int]:
    async def go() -> dict[int, int]:
        async with AdminClient(namesrv) as client:
            rows = await client.consumer_progress(group, topic)
        return {r.queue_id: r.consumer_offset for r in rows if r.topic == topic}

    return asyncio.run(go())


def _reset(broker_thread, *argv: str, capsys) -> tuple[int, str, str]:
    return _run(
        capsys,
        "admin", "consumer", "reset-offset", "-n", broker_thread.namesrv_addr, *argv,
    )  # fmt: skip


def _setup(broker_thread, group: str, topic: str) -> None:
    _produce(broker_thread.broker_addr, topic, 6, queue_id=0)
    _produce(broker_thread.broker_addr, topic, 4, queue_id=1)
    for q in range(4):
        _commit(broker_thread.broker_addr, group, topic, q, 0)
    _commit(broker_thread.broker_addr, group, topic, 0, 6)
    _commit(broker_thread.broker_addr, group, topic, 1, 4)


def test_stopped_group_to_earliest_and_latest_writes_the_stored_offsets(broker_thread, capsys):
    _setup(broker_thread, "rg1", "ResetA")
    code, out, err = _reset(
        broker_thread, "--group", "rg1", "--topic", "ResetA", "--to", "earliest", "--json",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    rows = {r["queue_id"]: (r["before"], r["after"]) for r in json.loads(out)}
    assert rows[0] == (6, 0) and rows[1] == (4, 0)
    assert _stored(broker_thread.namesrv_addr, "rg1", "ResetA")[0] == 0
    code, out, err = _reset(
        broker_thread, "--group", "rg1", "--topic", "ResetA", "--to", "latest", capsys=capsys
    )
    assert code == 0, err
    assert out.splitlines()[0] == "offsets reset"
    assert _stored(broker_thread.namesrv_addr, "rg1", "ResetA") == {0: 6, 1: 4, 2: 0, 3: 0}


def test_dry_run_changes_nothing_and_prints_before_and_after(broker_thread, capsys):
    _setup(broker_thread, "rg2", "ResetB")
    code, out, err = _reset(
        broker_thread, "--group", "rg2", "--topic", "ResetB", "--to", "earliest", "--dry-run",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "DRY RUN: nothing changed"
    assert lines[1].split() == ["BROKER", "QUEUE", "BEFORE", "AFTER"]
    assert lines[2].split()[1:] == ["0", "6", "0"]
    assert _stored(broker_thread.namesrv_addr, "rg2", "ResetB") == {0: 6, 1: 4, 2: 0, 3: 0}


def test_timestamp_in_the_middle(broker_thread, capsys):
    import time

    _produce(broker_thread.broker_addr, "ResetC", 3, queue_id=0)
    # 4.9.8 picks the message stored nearest the time: far from the first half, at the second.
    time.sleep(0.5)
    middle = int(time.time() * 1000)
    _produce(broker_thread.broker_addr, "ResetC", 3, queue_id=0)
    for q in range(1, 4):  # Apache's broker wants an offset on every write queue
        _commit(broker_thread.broker_addr, "rg3", "ResetC", q, 0)
    _commit(broker_thread.broker_addr, "rg3", "ResetC", 0, 6)

    async def go() -> list[tuple[int, int, int]]:
        async with AdminClient(broker_thread.namesrv_addr) as client:
            rows = await reset_offset(client, "rg3", "ResetC", timestamp=middle)
        return [(r.queue_id, r.before, r.after) for r in rows]

    assert (0, 6, 3) in asyncio.run(go())
    assert _stored(broker_thread.namesrv_addr, "rg3", "ResetC")[0] == 3


def test_offset_on_one_queue(broker_thread, capsys):
    _setup(broker_thread, "rg4", "ResetD")
    code, _, err = _reset(
        broker_thread, "--group", "rg4", "--topic", "ResetD", "--offset", "2", "--queue", "0",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert _stored(broker_thread.namesrv_addr, "rg4", "ResetD") == {0: 2, 1: 4, 2: 0, 3: 0}


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("--to", "earliest", "--timestamp", "0"),
        ("--offset", "3"),
        ("--queue", "1", "--to", "latest"),
    ],
)
def test_not_exactly_one_way_is_a_usage_error(broker_thread, capsys, argv):
    _setup(broker_thread, "rg5", "ResetE")
    code, _, err = _reset(
        broker_thread, "--group", "rg5", "--topic", "ResetE", *argv, capsys=capsys
    )
    assert code == 2
    assert "exactly one of --timestamp, --to, --offset N --queue Q" in err
    assert _stored(broker_thread.namesrv_addr, "rg5", "ResetE") == {0: 6, 1: 4, 2: 0, 3: 0}


def test_running_push_and_async_push_consumers_both_rewind(broker_thread, capsys, monkeypatch):
    """Two client kinds of one group, running: the broker pushes 220 to each, each rewinds."""
    from engine_support import create_topic, held_queues, produce

    from rmqk.engine.consumer import AsyncPushConsumer
    from rmqk.engine.sync import PushConsumer, run_in_loop

    # Java waits 10 s between dropping the queues and applying the offsets.
    monkeypatch.setattr(AsyncPushConsumer, "reset_offset_pause_ms", 200)
    asyncio.run(create_topic(broker_thread, "ResetRun", 4))
    bodies = [f"r{i}".encode() for i in range(100)]
    got_sync: list[bytes] = []
    got_async: list[bytes] = []
    options = {
        "namesrv_addr": broker_thread.namesrv_addr,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    }
    sync = PushConsumer("rg-run", instance_name="sync-one", **options)
    sync.subscribe("ResetRun")
    sync.register_listener(lambda msgs: got_sync.extend(m.body for m in msgs))
    other = AsyncPushConsumer("rg-run", instance_name="async-one", **options)
    other.subscribe("ResetRun")
    other.register_listener(lambda msgs: got_async.extend(m.body for m in msgs))
    sync.start()
    run_in_loop(other.start())
    try:
        # Balanced before anything is sent: a queue moving mid-pass re-delivers (at least once).
        _wait(
            lambda: (
                len(held_queues(sync.inner, "ResetRun")) == 2
                and len(held_queues(other, "ResetRun")) == 2
            ),
            "both members holding two queues each",
        )
        asyncio.run(produce(broker_thread.namesrv_addr, "ResetRun", bodies))
        _wait(lambda: len(got_sync) + len(got_async) >= 100, "the first pass")
        assert sorted(got_sync + got_async) == sorted(bodies)
        run_in_loop(sync.inner.persist_consumer_offset())
        run_in_loop(other.persist_consumer_offset())
        first_sync, first_async = len(got_sync), len(got_async)
        code, out, err = _reset(
            broker_thread, "--group", "rg-run", "--topic", "ResetRun", "--to", "earliest",
            "--json", capsys=capsys,
        )  # fmt: skip
        assert code == 0, err
        assert all(r["after"] == 0 for r in json.loads(out))
        _wait(lambda: len(got_sync) + len(got_async) >= 200, "the rewound second pass")
        assert len(got_sync) > first_sync and len(got_async) > first_async
        # A written offset the running members would overwrite is refused, not half done.
        code, _, err = _reset(
            broker_thread, "--group", "rg-run", "--topic", "ResetRun", "--offset", "5",
            "--queue", "0", capsys=capsys,
        )  # fmt: skip
        assert code == 1
        assert "has members online" in err
    finally:
        sync.shutdown()
        run_in_loop(other.shutdown())
    assert sorted(got_sync + got_async) == sorted(bodies * 2)


def _wait(predicate, what: str) -> None:
    import time

    for _ in range(600):
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_operations_guide_example_runs(broker_thread, tmp_path):
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    section = page.split("## Resetting a group's offsets", 1)[1].split("\n## ", 1)[0]
    (shell,) = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    (python_code,) = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    _setup(broker_thread, "order-analytics", "Orders")
    n = broker_thread.namesrv_addr
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euc", shell.replace("127.0.0.1:9876", n)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("DRY RUN: nothing changed") == 1
    # The 2020-01-01 reset is before every message: the first offsets; then queue 0 to 1.
    assert _stored(n, "order-analytics", "Orders") == {0: 1, 1: 0, 2: 0, 3: 0}
    _commit(broker_thread.broker_addr, "order-analytics", "Orders", 1, 4)
    script = tmp_path / "reset.py"
    script.write_text(python_code.replace("127.0.0.1:9876", n))
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert ran.returncode == 0, ran.stderr
    assert "broker-a 1 4 0" in ran.stdout.splitlines()
    assert _stored(n, "order-analytics", "Orders") == {0: 0, 1: 0, 2: 0, 3: 0}


def test_a_member_gets_the_push_apache_sends(broker_thread):
    """RESET_CONSUMER_CLIENT_OFFSET as Apache's Broker2Client builds it: topic, group,
    timestamp on the header (isForce left false), ResetOffsetBody with each queue's offset."""
    from test_broker_support import RawClient

    from rmqk.wire.bodies import decode_reset_offset
    from rmqk.wire.protocol import RequestCode

    _setup(broker_thread, "rg-raw", "ResetRaw")

    async def go() -> tuple[object, list[object]]:
        member = await RawClient.connect(broker_thread.broker_addr)
        try:
            await member.heartbeat("raw-member", "rg-raw", {"ResetRaw": "*"})
            async with AdminClient(broker_thread.namesrv_addr) as admin:
                rows = await admin.reset_offset("rg-raw", "ResetRaw", to="earliest")
            for _ in range(10):
                push = await member.next_inbound()
                if push.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
                    return push, rows
            raise AssertionError("no RESET_CONSUMER_CLIENT_OFFSET reached the member")
        finally:
            await member.close()

    push, rows = asyncio.run(go())
    assert push.ext_fields == {
        "topic": "ResetRaw",
        "group": "rg-raw",
        "timestamp": "0",
        "isForce": "false",
    }
    offsets = {mq.queue_id: o for mq, o in decode_reset_offset(push.body).items()}
    assert offsets == {0: 0, 1: 0, 2: 0, 3: 0}
    assert [(r.queue_id, r.before, r.after) for r in rows] == [
        (0, 6, 0), (1, 4, 0), (2, 0, 0), (3, 0, 0)
    ]  # fmt: skip


def test_timestamps_are_epoch_milliseconds_or_iso_8601_local_without_a_zone():
    import datetime

    from rmqk.model.errors import RmqkError
    from rmqk.plugins.admin.reset_offset import parse_timestamp

    assert parse_timestamp("1700000000123") == 1700000000123
    assert parse_timestamp("2020-01-01T00:00:00+00:00") == 1577836800000
    local = datetime.datetime(2020, 1, 1, 8, 30).timestamp()  # naive: the local zone
    assert parse_timestamp("2020-01-01T08:30:00") == int(local * 1000)
    with pytest.raises(RmqkError, match="neither epoch milliseconds nor ISO 8601"):
        parse_timestamp("yesterday")
    with pytest.raises(RmqkError, match=">= 0"):
        parse_timestamp("-5")
