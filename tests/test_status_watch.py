"""`rmqk status --watch` in a pseudo-terminal: redraws with a lag sparkline, 0 on Ctrl-C."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from rmqk.plugins.broker import EmbeddedBroker

    with EmbeddedBroker.run_in_thread(
        tmp_path_factory.mktemp("broker"), namesrv_port=0, broker_port=0
    ) as handle:
        yield handle


def _read_for(fd: int, seconds: float, frames: int = 0) -> bytes:
    """What the terminal shows within ``seconds``, or once ``frames`` redraws arrived."""
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (frames and out.count(b"\x1b[H\x1b[J") >= frames):
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    return out


def test_watch_draws_the_lag_sparkline_and_ends_cleanly_on_sigint(
    broker: Any, tmp_path: Path
) -> None:
    produced = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "produce", "--namesrv", broker.namesrv_addr,
         "--topic", "WatchT", "--count", "50"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    config = tmp_path / "watch.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [consumers.watched]
            group = "g-watch"
            namesrv_addr = "{broker.namesrv_addr}"
            subscription = {{ WatchT = "*" }}
            consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
            sink = "jsonl"
            sink_options = {{ path = "{tmp_path / "out.jsonl"}" }}
            """
        )
    )
    consumer = subprocess.Popen(
        [sys.executable, "-m", "rmqk.cli", "run", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    main, child = pty.openpty()
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "100", "LINES": "40"}
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "status", str(config), "--watch", "0.5"],
            stdin=child, stdout=child, stderr=child, env=env, close_fds=True,
        )  # fmt: skip
        os.close(child)
        # About 2 s at 0.5 s a redraw; longer on a loaded machine.
        screen = _read_for(main, 30, frames=4)
        watcher.send_signal(signal.SIGINT)
        screen += _read_for(main, 5)
        assert watcher.wait(timeout=15) == 0
    finally:
        os.close(main)
        consumer.send_signal(signal.SIGTERM)
        consumer.wait(timeout=30)
    text = screen.decode("utf-8", "replace")
    frames = text.split("\x1b[H\x1b[J")
    assert len(frames) >= 3, text  # redrawn, not scrolled
    assert "rmqk status, every 0.5 s" in frames[-1]
    (lag,) = [
        line for line in frames[-1].splitlines() if line.startswith("[consumers.watched] lag ")
    ]
    # One sparkline cell per redraw so far, block characters on a UTF-8 terminal.
    spark = lag.split(" lag ", 1)[1].split(" now ", 1)[0]
    assert len(spark) >= 2 and set(spark) <= set("▁▂▃▄▅▆▇█"), lag
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    longest = max(frames[-1].replace("\r", "").splitlines(), key=len)
    assert len(longest) <= 100, longest
