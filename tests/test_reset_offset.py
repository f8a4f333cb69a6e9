"""``rmqk admin consumer reset-offset`` and AdminClient's reset, over TCP to an embedded broker."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_broker_cli import _commit, _produce, _run

from rmqk.plugins.broker.admin_client import AdminClient
from rmqk.plugins.broker.reset_offset import reset_offset

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
