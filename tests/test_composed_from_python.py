"""docs/operations.md "A consumer file from Python": the snippet, run as written.

The snippet runs in a fresh interpreter in a folder holding its ``consumers.toml``
(a jsonl consumer of an embedded broker's topic, over real TCP): after it has run,
the sink holds every produced message once and the group's offsets are committed,
so a second run consumes nothing again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import jsonl_consumer, module_broker, produce

broker = module_broker()

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def _snippet() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    (block,) = [b for b in blocks if "rmqk.ComposedConsumer(" in b]
    return block


@pytest.mark.timeout(180)
def test_the_snippet_runs_a_consumer_file_from_python(broker: object, tmp_path: Path) -> None:
    namesrv = broker.namesrv_addr  # type: ignore[attr-defined]
    out = tmp_path / "orders.jsonl"
    (tmp_path / "consumers.toml").write_text(
        jsonl_consumer("orders", "from-python", namesrv, "FromPython", out)
    )
    (tmp_path / "snippet.py").write_text(_snippet())
    produced = produce(namesrv, "FromPython", "--count", "60")
    assert produced.returncode == 0, produced.stderr
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
    bodies = [json.loads(line)["body"] for line in out.read_text().splitlines()]
    assert len(bodies) == 60 and len(set(bodies)) == 60  # each once: the second run read nothing
