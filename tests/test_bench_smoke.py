"""Every benchmark scenario runs from the repository root with one command, at tiny sizes.

These check that ``python -m bench <scenario>`` runs end to end against the
embedded broker (in its own process) and appends a well-formed JSON record; they
say nothing about speed. Target checks in the records may be met or missed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import Result, at_least, at_most, emit, percentile  # noqa: E402

EXIT_PENDING = 3

SCENARIOS: list[tuple[str, list[str]]] = [
    ("ceiling", ["-n", "2000", "--repeat", "1"]),
    ("consume", ["-n", "2000"]),
    (
        "latency",
        ["--rate", "200", "--duration", "1.5", "--warmup", "0.2", "--listener", "async"],
    ),
    ("memory", ["-n", "5000", "--duration", "2", "--listener-delay-ms", "1"]),
    ("rebalance", ["--rounds", "1", "--queues", "4"]),
    ("broker", ["-n", "2000", "--single", "200"]),
    ("processes", ["-n", "2000", "--workers", "1,2", "--queues", "4"]),
]

SPARK_SCENARIOS: list[tuple[str, list[str]]] = [
    ("spark-sink", ["-n", "2000", "--warmup-messages", "0"]),
    ("spark-source", ["-n", "2000", "--warmup-messages", "0"]),
]

# Figures each scenario must record (beyond the common keys).
EXPECTED_FIGURES: dict[str, list[str]] = {
    "ceiling": ["pull_msgs_per_s", "messages_per_pass"],
    "consume": [
        "ceiling_msgs_per_s",
        "b1_sync_msgs_per_s",
        "b1_async_msgs_per_s",
        "b32_sync_msgs_per_s",
        "b32_async_msgs_per_s",
        "b32_async_ratio",
    ],
    "latency": ["p50_ms", "p99_ms", "p999_ms", "samples"],
    "memory": ["peak_rss_mb", "baseline_rss_mb", "consumed"],
    "rebalance": ["join_median_s", "leave_median_s", "join_s", "leave_s"],
    "broker": ["send_batch_msgs_per_s", "send_single_msgs_per_s", "pull_msgs_per_s"],
    "processes": [
        "w1_msgs_per_s",
        "w1_cpu_us_per_msg",
        "w2_msgs_per_s",
        "w2_cpu_us_per_msg",
        "cores",
        # One worker on the two-worker run's share of the queues (2 of 4).
        "w2_share_cpu_us_per_msg",
        "w2_vs_share",
        "w2_share_vs_w1",
    ],
    "spark-sink": ["sink_rows_per_s", "consume_msgs_per_s", "rows_on_disk"],
    "spark-source": ["source_rows_per_s", "rows_on_disk"],
}


def run_bench(scenario: str, args: list[str], results: Path, timeout: float) -> tuple[int, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env["PYTHONPATH"]) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", scenario, *args, "--results", str(results)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode not in (0, EXIT_PENDING):
        pytest.fail(
            f"python -m bench {scenario} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    return proc.returncode, proc.stdout


def check_record(scenario: str, stdout: str, results: Path) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith(f"{scenario}: ")]
    assert len(lines) == 1, f"expected one result line, got:\n{stdout}"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == 1
    record: dict[str, Any] = records[0]
    assert record["scenario"] == scenario
    assert record["summary"] == lines[0]
    for key in ("parameters", "figures", "targets", "machine", "date", "commit", "command"):
        assert key in record, key
    assert record["parameters"]["broker"] == "process"
    assert record["machine"]["cpus"] and record["machine"]["python"]
    assert record["command"][:4] == ["python", "-m", "bench", scenario]
    for name in EXPECTED_FIGURES[scenario]:
        value = record["figures"][name]
        values = value if isinstance(value, list) else [value]
        assert values and all(isinstance(v, int | float) and v > 0 for v in values), (name, value)
    for target in record["targets"]:
        assert target["kind"] in ("at_least", "at_most")
        assert target["ratio_to_target"] > 0
        assert target["met"] == (target["ratio_to_target"] >= 1.0)
    return record


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("scenario", "args"), SCENARIOS, ids=[s for s, _ in SCENARIOS])
def test_scenario_runs(scenario: str, args: list[str], tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    code, stdout = run_bench(scenario, args, results, timeout=110)
    assert code == 0, stdout
    record = check_record(scenario, stdout, results)
    if scenario == "ceiling":
        assert record["figures"]["messages_per_pass"] == 2000
    if scenario == "rebalance":
        assert len(record["figures"]["join_s"]) == 1
    if scenario == "processes":
        figures = record["figures"]
        for n in (1, 2):
            # User and system CPU are the split of the CPU per message, not extra time.
            parts = figures[f"w{n}_user_us_per_msg"] + figures[f"w{n}_sys_us_per_msg"]
            assert parts == pytest.approx(figures[f"w{n}_cpu_us_per_msg"], abs=0.01)
            assert figures[f"w{n}_duplicates"] >= 0
        assert figures["w2_vs_share"] == pytest.approx(
            figures["w2_cpu_us_per_msg"] / figures["w2_share_cpu_us_per_msg"], rel=0.01
        )
        assert "1 worker on 2 queues" in record["summary"]
    if scenario == "memory":
        assert isinstance(record["figures"]["rss_growth_mb"], int | float)
        assert record["figures"]["peak_rss_mb"] >= record["figures"]["baseline_rss_mb"]


@pytest.mark.spark
@pytest.mark.timeout(400)
@pytest.mark.parametrize(("scenario", "args"), SPARK_SCENARIOS, ids=[s for s, _ in SPARK_SCENARIOS])
def test_spark_scenario_runs(scenario: str, args: list[str], tmp_path: Path) -> None:
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyspark and pyarrow are not installed")
    results = tmp_path / "results.jsonl"
    code, stdout = run_bench(scenario, args, results, timeout=380)
    if code == EXIT_PENDING:
        pytest.skip(stdout.strip())
    record = check_record(scenario, stdout, results)
    assert record["figures"]["rows_on_disk"] >= 2000


def test_target_ratio_is_oriented_so_one_means_met() -> None:
    assert at_least("x", 0.7, 0.7).met
    assert at_least("x", 0.35, 0.7).ratio == pytest.approx(0.5)
    assert not at_least("x", 0.35, 0.7).met
    assert at_most("p99", 2.5, 5.0).ratio == pytest.approx(2.0)
    assert not at_most("p99", 10.0, 5.0).met


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 0.5) == 500.0
    assert percentile(values, 0.99) == 990.0
    assert percentile(values, 0.999) == 999.0
    assert percentile([3.0], 0.999) == 3.0


def test_emit_prints_one_line_and_appends_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r" / "results.jsonl"
    result = Result(
        "demo",
        "12 msg/s",
        parameters={"n": 1},
        figures={"rate": 12.0},
        targets=[at_least("rate/ceiling", 0.5, 0.7)],
    )
    for _ in range(2):
        emit(result, common={"broker": "process"}, results_file=results, command=["x"])
    out = capsys.readouterr().out.splitlines()
    assert out == [result.line(), result.line()]
    assert "MISSED" in out[0]
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == 2
    assert records[0]["parameters"] == {"broker": "process", "n": 1}
    assert records[0]["targets"][0]["ratio_to_target"] == pytest.approx(0.5 / 0.7, rel=1e-3)
    assert set(records[0]["commit"]) == {"sha", "dirty"}


@pytest.mark.timeout(120)
def test_rmqk_bench_finds_the_checkout_from_below_its_root(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqk.cli",
            "bench",
            "rebalance",
            *("--rounds", "1"),
            *("--queues", "4", "--results", str(results)),
        ],
        cwd=ROOT / "docs",
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_record("rebalance", proc.stdout, results)


def test_rmqk_bench_outside_a_checkout_says_where_to_run_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "bench", "consume"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "source checkout" in proc.stderr and str(tmp_path) in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line, no traceback


@pytest.mark.timeout(180)
def run_module(module: str, *args: str) -> str:
    """``python -m module args`` from the repository root; its stdout, once it exited 0."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_consume_cpu_compares_plain_and_async_listeners_on_java_shaped_messages() -> None:
    """Issue 29's scenario, tiny: every variant on both shapes, and the ratio lines."""
    stdout = run_module(
        *("bench.consume_cpu", "-n", "300", "--rounds", "1", "--batch", "32,1"),
        *("--listener", "sync,async", "--shape", "java,rmqk"),
    )
    lines = stdout.splitlines()
    for shape in ("java", "rmqk"):
        for batch in (32, 1):
            for kind in ("sync", "async"):
                assert any(
                    line.startswith(f"b{batch}_{kind}_{shape} (") and "min" in line
                    for line in lines
                ), (shape, batch, kind, stdout)
            (ratio,) = [
                line
                for line in lines
                if line.startswith(f"{shape} messages, batch {batch}: plain def / async def")
            ]
            assert float(ratio.split("CPU a message ")[1].split("x")[0]) > 0


def test_demo_phase_alternates_the_demos_sink_and_bare_consume() -> None:
    """The demo's ratio with its spread, tiny: each round lands every row and says both rates."""
    stdout = run_module("bench.demo_phase", "-n", "2000", "--rounds", "2")
    lines = stdout.splitlines()
    rounds = [line for line in lines if line.startswith("round ")]
    assert [r.split(":")[0] for r in rounds] == ["round 1", "round 2"], stdout
    for line in rounds:
        ratio = float(line.rsplit("end to end / bare ", 1)[1])
        assert ratio > 0 and "flushes" in line and "msg/s" in line, line
    (summary,) = [line for line in lines if line.startswith("demo end to end / bare consume")]
    assert "2,000 messages, 2 rounds: median" in summary, summary


async def test_java_shaped_fill_writes_the_properties_java_writes(tmp_path: Path) -> None:
    from bench.load import fill_topic
    from rmqk import AsyncLitePullConsumer
    from rmqk.plugins.broker import EmbeddedBroker

    async with EmbeddedBroker(tmp_path, namesrv_port=0, broker_port=0) as broker:
        await fill_topic(broker.namesrv_addr, "JavaShaped", 5, 100, java_shaped=True)
        consumer = AsyncLitePullConsumer(
            "java-shape-check",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe("JavaShaped", "*")
        await consumer.start()
        got = []
        try:
            for _ in range(40):
                got += await consumer.poll(500)
                if len(got) >= 5:
                    break
        finally:
            await consumer.close()
    assert len(got) == 5
    for msg in got:
        assert msg.properties["TAGS"] == "TagA"
        assert "WAIT" not in msg.properties  # sent, and dropped on store as Apache does
        assert msg.properties["KEYS"].startswith("KEY")
        assert {"UNIQ_KEY", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET"} <= set(msg.properties)
    assert len({m.properties["KEYS"] for m in got}) == 5
