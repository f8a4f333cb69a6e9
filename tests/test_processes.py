"""``processes = N``: a consumer as N supervised worker processes, over real TCP.

Each test runs ``rmqk run`` as a user does against the embedded broker: the
workers share the group's queues, a worker killed with -9 comes back, SIGINT
stops them all with everything committed.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import module_broker, produce, rmqk, start_rmqk

from rmqk.supervisor import Supervisor, SupervisorSettings, worker_identities
from rmqk.worker import WorkerJob
from rmqk.workers import WorkerIdentity, set_current_worker, worker_path

pytestmark = pytest.mark.timeout(240)

broker = module_broker()


def _consumer(name: str, ns: str, topic: str, sink: str, processes: int = 2) -> str:
    return (
        f"[consumers.{name}]\n"
        f'group = "g-{name}"\n'
        f'namesrv_addr = "{ns}"\n'
        f'subscription = {{ {topic} = "*" }}\n'
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        f"processes = {processes}\n"
        f"{sink}\n"
    )


def _until(what: Callable[[], bool], seconds: float = 60, why: str = "") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting: {why}")


def _members(ns: str, group: str) -> list[dict[str, Any]]:
    result = rmqk("status", "--namesrv", ns, "--group", group, "--json")
    if result.returncode != 0:
        return []
    clients: list[dict[str, Any]] = json.loads(result.stdout)[0]["clients"]
    return clients


def _workers(pid: int) -> list[int]:
    """The supervisor's worker processes (spawned interpreters), by pid."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _jsonl(tmp_path: Path) -> list[tuple[int, int]]:
    out = []
    for file in sorted(tmp_path.glob("out*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            out.append((record["queue_id"], record["queue_offset"]))
    return out


def _split_evenly(ns: str, group: str, topic: str) -> bool:
    """Two members, each holding two of the topic's four queues (and maybe the retry queue)."""
    members = _members(ns, group)
    return len(members) == 2 and all(
        len([q for q in m["queues"] if q["topic"] == topic]) == 2 for m in members
    )


def test_two_workers_split_the_queues_and_consume_each_message_once(
    broker: Any, tmp_path: Path
) -> None:
    ns = broker.namesrv_addr
    # The topic exists but holds nothing while the two workers join: a queue that moves
    # between members mid-consumption may be delivered twice (at-least-once, as in Java),
    # and this test is about the split itself, which must then deliver each message once.
    create = rmqk("admin", "topic", "create", "ProcTopic", "--namesrv", ns, "--queues", "4")
    assert create.returncode == 0, create.stderr
    config = tmp_path / "c.toml"
    sink = f'sink = "jsonl"\nsink_options = {{ path = "{tmp_path / "out.jsonl"}" }}'
    config.write_text(_consumer("split", ns, "ProcTopic", sink))
    assert rmqk("check", str(config)).returncode == 0
    proc = start_rmqk("run", str(config))
    try:
        _until(
            lambda: _split_evenly(ns, "g-split", "ProcTopic"),
            why="two members with two queues each",
        )
        assert len(_workers(proc.pid)) == 2
        assert produce(ns, "ProcTopic", "--count", "2100", "--batch", "50").returncode == 0
        _until(lambda: len(_jsonl(tmp_path)) >= 2100, why="2,100 records")
        time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    records = _jsonl(tmp_path)
    assert len(records) == 2100 and len(set(records)) == 2100
    # Each worker wrote its own file, and each took its share of the queues.
    files = sorted(p.name for p in tmp_path.glob("out*.jsonl"))
    assert files == ["out.w0.jsonl", "out.w1.jsonl"]
    assert all((tmp_path / f).stat().st_size > 0 for f in files)
    assert "rmqk: split: 2,100 consumed, 0 failed, by 2 worker processes (0 restarts)" in err

    # Every worker committed its offsets when it stopped: a second run delivers nothing.
    proc = start_rmqk("run", str(config), "--processes", "2")
    _until(lambda: _split_evenly(ns, "g-split", "ProcTopic"), why="the second run's members")
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert len(_jsonl(tmp_path)) == 2100


def test_a_worker_killed_with_9_is_restarted_and_the_sqlite_sink_stays_exactly_once(
    broker: Any, tmp_path: Path
) -> None:
    ns = broker.namesrv_addr
    db = tmp_path / "out.db"
    assert produce(ns, "KillTopic", "--count", "1000", "--batch", "50").returncode == 0
    config = tmp_path / "c.toml"
    config.write_text(
        _consumer("kill", ns, "KillTopic", f'sink = "sqlite"\nsink_options = {{ path = "{db}" }}')
    )

    def rows() -> list[tuple[int, int]]:
        if not db.exists():
            return []
        with sqlite3.connect(db, timeout=30) as conn:
            try:
                return conn.execute("SELECT queue_id, queue_offset FROM messages").fetchall()
            except sqlite3.OperationalError:
                return []

    proc = start_rmqk("run", str(config), "--log-level", "INFO")
    try:
        _until(lambda: _split_evenly(ns, "g-kill", "KillTopic"), why="two members")
        victim = _workers(proc.pid)[0]
        sent = subprocess.Popen(
            [*_produce_args(ns, "KillTopic", "6000")], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.3)
        subprocess.run(["kill", "-9", str(victim)], check=True)
        assert sent.wait(timeout=60) == 0
        _until(
            lambda: len(_workers(proc.pid)) == 2 and victim not in _workers(proc.pid),
            why="the killed worker restarted",
        )
        _until(lambda: len(rows()) >= 7000, seconds=120, why="7,000 rows")
        time.sleep(2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "restarting it in 1 s" in err
    assert "by 2 worker processes (1 restart)" in err
    found = rows()
    # The sink commits offsets with its rows: redelivery after the kill writes nothing twice.
    assert len(found) == 7000 and len(set(found)) == 7000


def _produce_args(ns: str, topic: str, count: str) -> list[str]:
    import sys

    return [
        *(sys.executable, "-m", "rmqk.cli", "produce", "--namesrv", ns, "--topic", topic),
        *("--count", count, "--batch", "20"),
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "processes: processes Out of range [1, 1024], got 0"),
        ('"2"', 'processes: must be an integer, got string "2"'),
        ("1.5", "processes: must be an integer"),
    ],
)
def test_a_bad_processes_value_is_refused_naming_the_key(
    tmp_path: Path, value: str, message: str
) -> None:
    config = tmp_path / "c.toml"
    sink = 'sink = "jsonl"\nsink_options = { path = "o.jsonl" }'
    text = _consumer("bad", "127.0.0.1:9876", "T", sink)
    config.write_text(text.replace("processes = 2", f"processes = {value}"))
    for command in ("check", "run"):
        result = rmqk(command, str(config))
        assert result.returncode == 1
        assert f"[consumers.bad] {message}" in result.stderr
        assert "Traceback" not in result.stderr


def test_processes_flag_and_broadcasting_are_checked(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    text = _consumer("b", "127.0.0.1:9876", "T", 'sink = "jsonl"\nsink_options = { path = "o" }', 1)
    config.write_text(text)
    result = rmqk("run", str(config), "--processes", "0")
    assert result.returncode == 1 and "--processes must be an integer >= 1, got 0" in result.stderr
    config.write_text(text + 'message_model = "BROADCASTING"\n')
    result = rmqk("run", str(config), "--processes", "2")
    assert result.returncode == 1
    assert "[consumers.b] processes: --processes 2: a BROADCASTING consumer" in result.stderr
    config.write_text(
        text.replace("processes = 1", "processes = 3") + 'message_model = "BROADCASTING"\n'
    )
    assert 'must be 1 with message_model = "BROADCASTING"' in rmqk("check", str(config)).stderr


def test_a_worker_that_keeps_dying_at_start_is_given_up_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "gone.toml")
    jobs = [WorkerJob(missing, identity) for identity in worker_identities([("x", 1)])]
    settings = SupervisorSettings(restart_delay=0.05, give_up_after=3, stop_timeout=10)
    began = time.monotonic()
    assert Supervisor(jobs, settings).run() == 1
    assert time.monotonic() - began < 60
    err = capsys.readouterr().err
    assert "worker x#0 died 3 times in a row within 10 s of its start; giving up" in err
    assert "cannot read the file" in err


def test_worker_identities_and_paths() -> None:
    ids = worker_identities([("a", 2), ("b", 1)])
    assert [(i.label, i.slot, i.count) for i in ids] == [
        ("a#0", 0, 2),
        ("a#1", 1, 2),
        ("b#0", 2, 1),
    ]
    assert worker_path("out/x.jsonl") == "out/x.jsonl"
    set_current_worker(WorkerIdentity("a", 1, 2, 1))
    try:
        assert worker_path("out/x.jsonl") == "out/x.w1.jsonl"
    finally:
        set_current_worker(None)
