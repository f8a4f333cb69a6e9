"""The consumer snippets a new user copies from README.md and the PAGES below work as written.

Each fenced ``python`` block is run verbatim in a fresh interpreter, with only the name
server address pointed at an embedded broker on a free loopback port. A snippet that
starts a consumer must keep running after ``start()`` (as a Java consumer keeps its JVM
alive; the ``AsyncPushConsumer`` one while its ``main()`` awaits), consume exactly what its
subscription selects, and stop cleanly on Ctrl-C with its offsets committed, so that running
it again consumes nothing twice.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rmqk import Message, Producer

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "quickstart.md",
    ROOT / "docs" / "migration-from-java.md",
]
DEFAULT_NAMESRV = "127.0.0.1:9876"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)


def consumer_snippets() -> list[Any]:
    found = []
    for page in PAGES:
        for i, block in enumerate(python_blocks(page)):
            if "PushConsumer(" in block:
                found.append(pytest.param(block, id=f"{page.name}-{i}"))
    return found


def test_every_page_has_its_consumer_snippets() -> None:
    # If a page drops or renames a snippet, the test below must not silently run nothing.
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for block in python_blocks(page):
            if "PushConsumer(" in block:
                kind = "AsyncPushConsumer" if "AsyncPushConsumer(" in block else "PushConsumer"
                found.setdefault(page.name, []).append(kind)
    assert found == {
        "README.md": ["PushConsumer", "AsyncPushConsumer"],
        "quickstart.md": ["PushConsumer", "AsyncPushConsumer"],
        "migration-from-java.md": ["PushConsumer"],
    }


def _produce(namesrv: str, per_tag: int) -> None:
    producer = Producer("snippet-producer", namesrv_addr=namesrv)
    producer.start()
    try:
        for tag in ("TagA", "TagB", "TagC"):
            for i in range(per_tag):
                producer.send(Message("Orders", f"{tag}-{i}".encode(), tags=tag))
    finally:
        producer.shutdown()


# Printed by a line added after a blocking-API snippet: its start() has returned.
RETURNED = "snippet: start() returned"


class _Snippet:
    def __init__(self, code: str, namesrv: str, tmp_path: Path) -> None:
        assert DEFAULT_NAMESRV in code, "the snippet no longer names the default name server"
        script = tmp_path / "snippet.py"
        code = code.replace(DEFAULT_NAMESRV, namesrv)
        if _returns_from_start(code):
            code += f"\nprint({RETURNED!r})\n"
        script.write_text(code)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.lines: list[str] = []
        self._partial = ""

    def read_until(self, count: int, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while len(self.lines) < count and time.monotonic() < deadline:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                chunk = b""
            if chunk:
                self._partial += chunk.decode()
                *done, self._partial = self._partial.split("\n")
                self.lines.extend(done)
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        return self.lines

    def interrupt(self, timeout: float = 30.0) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"the snippet did not stop on Ctrl-C; stderr:\n{err!r}") from None
        return self.proc.returncode, err.decode()


def _returns_from_start(code: str) -> bool:
    # The PushConsumer snippets end with start(); the pages say it returns, and that
    # the process stays alive after the script's last line.
    return "AsyncPushConsumer(" not in code and bool(re.search(r"^consumer\.start\(\)", code, re.M))


@pytest.mark.parametrize("code", consumer_snippets())
def test_consumer_snippet_runs_as_written(code: str, broker_thread: Any, tmp_path: Path) -> None:
    per_tag = 10
    _produce(broker_thread.namesrv_addr, per_tag)

    first = _Snippet(code, broker_thread.namesrv_addr, tmp_path)
    returns = _returns_from_start(code)
    lines = first.read_until(2 * per_tag + returns, timeout=60)
    if returns:
        assert RETURNED in lines, lines
    # Still running after start() returned, and after everything was consumed.
    time.sleep(1.0)
    assert first.proc.poll() is None, first.proc.communicate()[1].decode()
    code_, err = first.interrupt()
    assert code_ == 0, err
    assert "Traceback" not in err, err

    printed = [line for line in lines if line.startswith("Orders ")]
    tags = sorted(line.split()[1] for line in printed)
    assert tags == ["TagA"] * per_tag + ["TagB"] * per_tag, lines
    assert len({line.split()[2] + line.split()[3] for line in printed}) == 2 * per_tag

    # Ctrl-C committed the offsets: a second run consumes nothing again.
    _produce_one_more = Producer("snippet-producer-2", namesrv_addr=broker_thread.namesrv_addr)
    _produce_one_more.start()
    try:
        _produce_one_more.send(Message("Orders", b"late", tags="TagA"))
    finally:
        _produce_one_more.shutdown()
    second = _Snippet(code, broker_thread.namesrv_addr, tmp_path)
    # The late message's line, not the start() marker before it: under load the
    # rebalance and first pull take longer than the pause below.
    second.read_until(1 + returns, timeout=60)
    time.sleep(1.5)
    code_, err = second.interrupt()
    assert code_ == 0, err
    again = [line for line in second.lines if line.startswith("Orders ")]
    assert len(again) == 1 and "late" in again[0], again
