"""A WARNING means a person must act; a healthy run says it is alive and nothing more
(issue 28 #3 and #4).

* A backlog worked through under flow control (the thresholds doing their job) logs
  no WARNING: the notice is INFO, still once in 1,000 times as Java logs it.
* A clean Ctrl-C of ``rmqk run`` with ``processes = 2`` logs no WARNING: pulls that
  the stop itself ends are not faults.
* With stderr not a terminal (a service's log), ``rmqk run`` at the default level
  still prints that it started and that it stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import module_broker, produce, rmqk
from engine_support import create_topic, held_queues, push_consumer, wait_for
from engine_support import produce as produce_async

pytestmark = pytest.mark.timeout(240)

broker = module_broker()


def _until(what: Callable[[], bool], seconds: float = 60, why: str = "") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting: {why}")


def _jsonl_lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.glob("out*.jsonl"))


def _config(path: Path, ns: str, topic: str, out: Path, processes: int) -> Path:
    path.write_text(
        "[consumers.orders]\n"
        f'group = "g-quiet-{topic}"\n'
        f'namesrv_addr = "{ns}"\n'
        f'subscription = {{ {topic} = "*" }}\n'
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        # A small window: the backlog is worked through under flow control.
        "pull_threshold_for_queue = 64\n"
        "pull_batch_size = 32\n"
        f"processes = {processes}\n"
        'sink = "jsonl"\n'
        f'sink_options = {{ path = "{out}" }}\n'
    )
    return path


async def test_a_backlog_under_flow_control_logs_no_warning(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rmqk")
    await create_topic(broker, "Backlog", 2)
    sent = await produce_async(broker.namesrv_addr, "Backlog", (b"x%d" % i for i in range(600)))
    consumer = push_consumer(broker, "g-backlog", pull_threshold_for_queue=8, pull_batch_size=8)
    consumer.subscribe("Backlog", "*")
    seen: list[int] = []

    async def slow(messages: Any, context: Any) -> None:
        # Slower than the pulls: the queues fill to their threshold and are held back.
        await asyncio.sleep(0.01)
        seen.extend(m.queue_offset for m in messages)

    consumer.register_listener(slow)
    await consumer.start()
    try:
        await wait_for(lambda: len(seen) >= sent, 120, "the backlog consumed")
    finally:
        await consumer.shutdown()
    assert consumer.flow.events > 0, "the test must have run under flow control"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    notices = [r for r in caplog.records if "so do flow control" in r.getMessage()]
    # Still said, as Java says it: on the 1st time (and the 1001st...), at INFO.
    assert notices and all(r.levelno == logging.INFO for r in notices)
    assert len(notices) == 1 + (consumer.flow.times - 1) // 1000 + (
        1 + (consumer.flow.span_times - 1) // 1000 if consumer.flow.span_times else 0
    )


async def test_a_pull_ended_by_the_shutdown_is_not_a_warning(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The race a Ctrl-C of two workers hits now and then, made certain: a pull waiting
    at the broker when the client shuts down fails with its transport closed."""
    caplog.set_level(logging.DEBUG, logger="rmqk.engine")
    await create_topic(broker, "Idle", 1)
    consumer = push_consumer(broker, "g-idle")
    consumer.subscribe("Idle", "*")
    consumer.register_listener(lambda messages: None)
    await consumer.start()
    await wait_for(lambda: bool(held_queues(consumer, "Idle")), 30, "the queue held")
    mq = next(iter(held_queues(consumer, "Idle")))
    sub = consumer.rebalance.subscription_inner["Idle"]
    # Nothing to read at offset 0: the broker holds the pull until the shutdown ends it.
    pending = asyncio.ensure_future(consumer.pull_api.pull(mq, sub, 0))
    await asyncio.sleep(0.5)
    assert not pending.done()
    await consumer.shutdown()
    delay = await pending
    assert isinstance(delay, int)
    records = [r for r in caplog.records if r.name.startswith("rmqk.engine")]
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    ended = [r for r in records if "ended by the client's shutdown" in r.getMessage()]
    assert len(ended) == 1 and ended[0].levelno == logging.DEBUG
    assert "the transport is closed" in ended[0].getMessage()


def _ctrl_c(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What a terminal's Ctrl-C does: SIGINT to every process of the foreground group."""
    os.killpg(proc.pid, signal.SIGINT)
    return proc.communicate(timeout=120)


def test_ctrl_c_of_two_worker_processes_logs_no_warning(broker: Any, tmp_path: Path) -> None:
    ns = broker.namesrv_addr
    create = rmqk("admin", "topic", "create", "QuietTwo", "--namesrv", ns, "--queues", "4")
    assert create.returncode == 0, create.stderr
    assert produce(ns, "QuietTwo", "--count", "20000", "--batch", "200").returncode == 0
    config = _config(tmp_path / "c.toml", ns, "QuietTwo", tmp_path / "out.jsonl", 2)
    command = [sys.executable, "-m", "rmqk.cli", "run", str(config), "--log-level", "INFO"]
    logs = []
    # Stopped in the middle of the backlog (pulls in flight in both workers: their
    # members leaving makes each rebalance while it stops), five times, then at rest
    # (every pull waiting at the broker).
    for enough in (2000, 5000, 8000, 11000, 14000, 20000):
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _until(lambda: _jsonl_lines(tmp_path) >= enough, why=f"{enough} consumed")  # noqa: B023
            if enough == 20000:
                time.sleep(2)  # at rest: every pull suspended at the broker
        finally:
            _, err = _ctrl_c(proc)
        assert proc.returncode == 0, err
        assert "by 2 worker processes" in err, err
        logs.append(err)
    assert _jsonl_lines(tmp_path) >= 20000
    warnings = [line for err in logs for line in err.splitlines() if " WARNING " in line]
    assert warnings == [], logs


def _run_logged(config: Path, log: Path, folder: Path, count: int, *flags: str) -> str:
    """``rmqk run`` with stderr to a file (as a service manager runs it), stopped by
    Ctrl-C once ``count`` records are written; what it logged."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "run", str(config), *flags],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        try:
            _until(lambda: _jsonl_lines(folder) >= count, why="the messages consumed")
            # The start line is in the log while the service runs, not only at its end.
            _until(lambda: "running 1 consumer(s)" in log.read_text(), 30, why="start line")
        finally:
            out, _ = _ctrl_c(proc)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert out == ""
    return text


def test_start_and_stop_lines_with_stderr_not_a_terminal(broker: Any, tmp_path: Path) -> None:
    ns = broker.namesrv_addr
    assert produce(ns, "QuietOne", "--count", "100").returncode == 0
    config = _config(tmp_path / "c.toml", ns, "QuietOne", tmp_path / "out.jsonl", 1)
    lines = _run_logged(config, tmp_path / "rmqk.log", tmp_path, 100).splitlines()
    assert len(lines) == 2, lines
    assert f"INFO rmqk.cli: running 1 consumer(s) from {config}" in lines[0], lines
    assert "INFO rmqk.cli: consumer stopped: orders: 100 consumed" in lines[1], lines

    # JSON lines: the same two records, as JSON.
    text = _run_logged(config, tmp_path / "rmqk.json", tmp_path, 100, "--log-format", "json")
    records = [json.loads(line) for line in text.splitlines()]
    assert [(r["level"], r["message"].split(":")[0]) for r in records] == [
        ("INFO", f"running 1 consumer(s) from {config}"),
        ("INFO", "consumer stopped"),
    ]


def test_start_and_stop_lines_of_two_worker_processes(broker: Any, tmp_path: Path) -> None:
    ns = broker.namesrv_addr
    assert produce(ns, "QuietTwoLines", "--count", "100").returncode == 0
    config = _config(tmp_path / "c.toml", ns, "QuietTwoLines", tmp_path / "out.jsonl", 2)
    lines = _run_logged(config, tmp_path / "rmqk.log", tmp_path, 100).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith(
        f"INFO rmqk.supervisor: running 1 consumer(s) from {config} as 2 worker processes"
    ), lines
    assert lines[1].startswith("rmqk: orders: 100 consumed, 0 failed, by 2 worker processes")
