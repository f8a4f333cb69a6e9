"""``rmqk demo``: its dataset, its config, and a full run in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rmqk.plugins.spark.demo import DEMO_TOML, order_events

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[1]


def test_embedded_config_is_the_example_file() -> None:
    assert (ROOT / "examples" / "demo.toml").read_text() == DEMO_TOML


def test_example_config_composes_a_spark_consumer() -> None:
    from rmqk.app.config import load_config

    spec = load_config(ROOT / "examples" / "demo.toml").consumers[0]
    assert spec.sink == "spark"
    assert spec.sink_options["exactly_once"] is True
    assert [s.topic for s in spec.subscriptions] == ["Orders"]
    assert "consume_thread_max" not in spec.from_file  # the window comes from the sink


def test_order_events_are_orders_in_their_natural_order() -> None:
    events = order_events(3000)
    assert len(events) == 3000
    assert events == order_events(3000)  # deterministic
    tags = Counter(e.tag for e in events)
    assert set(tags) == {"created", "paid", "shipped", "cancelled"}
    assert tags["created"] > tags["paid"] >= tags["shipped"] > tags["cancelled"] > 0
    flows: dict[str, list[str]] = {}
    for e in events:
        flows.setdefault(e.order_id, []).append(e.tag)
    complete = [f for f in flows.values() if len(f) > 1 and f != ["created", "paid"]]
    assert all(f in (["created", "paid", "shipped"], ["created", "cancelled"]) for f in complete)


def test_order_bodies_are_the_json_of_their_fields() -> None:
    # The bodies are formatted by hand for speed: they must stay what json.dumps makes.
    events = order_events(5000)
    for e in events:
        fields = json.loads(e.body)
        assert json.dumps(fields).encode() == e.body
        assert fields["event"] == e.tag and fields["order_id"] == e.order_id
    assert len({json.loads(e.body)["amount"] for e in events}) > 100


def _rmqk(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmqk.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_demo_refuses_an_output_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "old.parquet").write_text("x")
    result = _rmqk("demo", "--messages", "10", "--out", str(tmp_path))
    assert result.returncode == 1
    assert "is not empty" in result.stderr


@pytest.mark.spark
def test_demo_runs_and_checks_every_message(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    out = tmp_path / "out"
    result = _rmqk(
        "demo",
        "--messages",
        "20000",
        "--out",
        str(out),
        "--data",
        str(tmp_path / "broker"),
        timeout=540,
    )
    report = result.stdout
    assert result.returncode == 0, report + result.stderr[-3000:]
    assert "OK: every produced message landed exactly once" in report
    assert "rows per tag:" in report and "created" in report
    assert "per queue:" in report and "queue 7" in report
    assert "rows/s" in report
    for line in ("produced", "rows written", "distinct msg_id", "distinct offsets"):
        assert any(
            row.split()[-1] == "20,000"
            for row in report.splitlines()
            if row.strip().startswith(line)
        ), line
    assert any(p.name.startswith("tags=") for p in out.iterdir())
    # Spark's and the JVM's own output goes to spark.log, not to the person reading.
    assert "log4j" not in result.stderr and "NativeCodeLoader" not in result.stderr
    assert "starting Spark in the background; its output goes to" in report
    # Spark's start does not share the CPU with the consumer whose rate is reported.
    lines = report.splitlines()
    consumed = next(i for i, row in enumerate(lines) if row.startswith("consumed and wrote"))
    assert all(i < consumed for i, row in enumerate(lines) if row.startswith("Spark ready"))
