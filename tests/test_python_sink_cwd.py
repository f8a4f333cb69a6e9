"""The python sink imports the user's module from the current directory, as ``python -m``
would, when run through the installed ``rmqk`` command (the migration guide's layout)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqk import Message, Producer
from rmqk.plugins.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(180)

RMQK = Path(sys.executable).parent / "rmqk"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Any]:
    with EmbeddedBroker.run_in_thread(tmp_path / "broker", namesrv_port=0, broker_port=0) as h:
        yield h


@pytest.mark.skipif(not RMQK.exists(), reason="the rmqk console script is not installed here")
def test_run_imports_the_handler_module_from_the_working_directory(
    broker: Any, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "orders").mkdir(parents=True)
    (project / "orders" / "__init__.py").write_text("")
    (project / "orders" / "handlers.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path

            def handle_batch(queue, messages):
                with Path("seen.txt").open("a") as f:
                    for m in messages:
                        f.write(m.body.decode() + "\\n")
            """
        )
    )
    (project / "consumers.toml").write_text(
        textwrap.dedent(
            f"""
            [consumers.orders]
            group = "orders-python"
            namesrv_addr = "{broker.namesrv_addr}"
            subscription = {{ Orders = "*" }}
            consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
            sink = "python"
            sink_options = {{ function = "orders.handlers:handle_batch" }}
            """
        )
    )
    producer = Producer("cwd-producer", namesrv_addr=broker.namesrv_addr)
    producer.start()
    try:
        for i in range(20):
            producer.send(Message("Orders", f"m{i}".encode()))
    finally:
        producer.shutdown()

    env_without_path = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    check = subprocess.run(
        [str(RMQK), "check", "consumers.toml"], cwd=project, env=env_without_path,
        capture_output=True, text=True,
    )
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(
        [str(RMQK), "run", "consumers.toml"], cwd=project, env=env_without_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen = project / "seen.txt"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if seen.exists() and len(seen.read_text().splitlines()) >= 20:
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err
    assert sorted(seen.read_text().split()) == sorted(f"m{i}" for i in range(20)), err
