"""``processes = N``: a consumer as N supervised worker processes, over real TCP.

Each test runs ``rmqk run`` as a user does against the embedded broker: the
workers share the group's queues, a worker killed with -9 comes back, SIGINT
stops them all with everything committed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from cli_support import module_broker, produce, rmqk, start_rmqk

from rmqk.app.supervisor import Supervisor, SupervisorSettings, worker_identities
from rmqk.app.worker import WorkerJob, _Pipe, _wait_for_go
from rmqk.app.worker_messages import WorkerReady
from rmqk.spi.workers import WorkerIdentity, set_current_worker, worker_path

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


def test_four_workers_starting_on_a_backlog_deliver_almost_nothing_twice(
    broker: Any, tmp_path: Path
) -> None:
    """Each worker's first rebalance already sees all four: no queue moves after it.

    Before workers registered ahead of the go, the first to rebalance took the
    queues of a smaller group and handed them over a moment later: up to a tenth
    of a backlog was delivered twice. A queue can still move if a worker is slow
    past the start-together timeout, which a loaded test machine should not reach;
    the bound leaves room for a stray rebalance, far below what the race gave.
    """
    ns = broker.namesrv_addr
    create = rmqk("admin", "topic", "create", "Backlog", "--namesrv", ns, "--queues", "16")
    assert create.returncode == 0, create.stderr
    total = 20_000
    assert produce(ns, "Backlog", "--count", str(total), "--batch", "200").returncode == 0
    config = tmp_path / "c.toml"
    sink = f'sink = "jsonl"\nsink_options = {{ path = "{tmp_path / "out.jsonl"}" }}'
    config.write_text(_consumer("backlog", ns, "Backlog", sink, processes=4))
    proc = start_rmqk("run", str(config))
    try:
        _until(lambda: len(set(_jsonl(tmp_path))) >= total, 120, why=f"{total:,} records")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    records = _jsonl(tmp_path)
    assert len(set(records)) == total
    twice = len(records) - total
    assert twice <= total // 200, f"{twice:,} of {total:,} delivered twice"


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


async def test_worker_instance_names_as_operations_md_states(tmp_path: Path) -> None:
    """The default instance name becomes <pid>#<nanotime> in each worker; a name the
    file sets gets -w<i> appended: N distinct client ids either way."""
    from rmqk.app.config import load_config
    from rmqk.app.worker import worker_config
    from rmqk.engine.startup import client_for
    from rmqk.model import MessageModel

    path = tmp_path / "c.toml"
    path.write_text(
        '[consumers.plain]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\nprocesses = 2\n'
        'subscription = { T = "*" }\n'
        '[consumers.named]\ngroup = "h"\nnamesrv_addr = "127.0.0.1:1"\nprocesses = 2\n'
        'subscription = { T = "*" }\ninstance_name = "orders"\n'
    )
    config = load_config(path)
    names = {
        (ident.consumer, ident.index): worker_config(config, ident).consumers[0].options
        for ident in worker_identities([("plain", 2), ("named", 2)])
    }
    assert names[("named", 0)].instance_name == "orders-w0"
    assert names[("named", 1)].instance_name == "orders-w1"
    assert names[("plain", 0)].instance_name == names[("plain", 1)].instance_name == "DEFAULT"
    # What a worker's consumer then names itself: ip@<pid>#<nanotime>, as Java's
    # changeInstanceNameToPID. (A worker is its own process, so its pid differs.)
    # Made, never started (its id, unique to this call, keys it in the table).
    client = client_for(names[("plain", 0)], MessageModel.CLUSTERING, ("127.0.0.1:1",))
    instance = client.client_id.split("@", 1)[1]
    pid, _, nanos = instance.partition("#")
    assert pid == str(os.getpid()) and nanos.isdigit(), client.client_id


class _FakeProcess:
    """Stands in for a spawned worker: alive until ``exitcode`` is set."""

    def __init__(self, target: Any, args: Any, name: str, daemon: bool) -> None:
        self.pid = 1000 + len(_FakeContext.started)
        self.exitcode: int | None = None
        self.sentinel = -1

    def start(self) -> None:
        _FakeContext.started.append(self)


class _FakeContext:
    """Real pipes, fake processes: the supervisor's side of the start-together handshake."""

    started: list[_FakeProcess] = []
    worker_ends: list[Any] = []

    def Pipe(self, duplex: bool) -> tuple[Any, Any]:
        ours, theirs = multiprocessing.Pipe(duplex=duplex)
        self.worker_ends.append(theirs)
        # The supervisor closes the end it hands to the child; the fake child keeps a copy.
        return ours, Connection(os.dup(theirs.fileno()))

    Process = _FakeProcess


def _supervisor(count: int, timeout: float = 30.0) -> tuple[Supervisor, list[Any]]:
    _FakeContext.started, _FakeContext.worker_ends = [], []
    jobs = [WorkerJob("c.toml", identity) for identity in worker_identities([("x", count)])]
    supervisor = Supervisor(jobs, SupervisorSettings(start_together_timeout=timeout))
    supervisor._context = _FakeContext()
    for slot in supervisor.slots:
        supervisor._launch(slot)
    return supervisor, _FakeContext.worker_ends


def _told_to_go(end: Any) -> bool:
    return bool(end.poll(0.2)) and end.recv_bytes() == b"go"


def test_the_first_workers_start_together_and_a_restarted_one_at_once() -> None:
    supervisor, ends = _supervisor(3)
    a, b, c = supervisor.slots
    supervisor._receive(a, WorkerReady(1))
    supervisor._receive(b, WorkerReady(2))
    supervisor._release()
    # One sibling is still starting: nobody consumes yet.
    assert not any(end.poll(0.1) for end in ends)
    c.process.exitcode = 1  # it died before it was ready: the others need not wait for it
    supervisor._release()
    assert _told_to_go(ends[0]) and _told_to_go(ends[1])
    assert not ends[2].poll(0.1)
    # Its replacement joins a group that is already running: it starts at once.
    supervisor._exited(c)
    supervisor._launch(c)
    assert _told_to_go(ends[3])
    supervisor._release()
    assert not any(ends[i].poll(0.1) for i in (0, 1, 3))  # each told once


def test_workers_do_not_wait_past_the_timeout_for_a_slow_sibling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor, ends = _supervisor(2, timeout=0.0)
    supervisor._receive(supervisor.slots[0], WorkerReady(1))
    with caplog.at_level(logging.WARNING, logger="rmqk.supervisor"):
        supervisor._release()
    assert _told_to_go(ends[0]) and _told_to_go(ends[1])
    assert "worker x#1 not ready 0 s after launch; starting the others" in caplog.text


def test_a_worker_reports_ready_then_waits_for_the_go_or_a_stop() -> None:
    async def wait(go: bool) -> tuple[bool, object]:
        ours, supervisor_end = multiprocessing.Pipe(duplex=True)
        stop = asyncio.Event()
        waiting = asyncio.ensure_future(_wait_for_go(_Pipe(ours), stop))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        if go:
            supervisor_end.send_bytes(b"go")
        else:
            stop.set()
        return await asyncio.wait_for(waiting, 10), supervisor_end.recv()

    started, message = asyncio.run(wait(go=True))
    assert started and isinstance(message, WorkerReady)
    started, message = asyncio.run(wait(go=False))
    assert not started and isinstance(message, WorkerReady)
