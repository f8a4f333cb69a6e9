"""What every scenario shares: its result, the record it appends, and the targets.

A scenario returns a :class:`Result`; :func:`emit` prints its one result line
and appends a JSON record to ``bench/results/results.jsonl`` (scenario,
parameters, figures, target checks, machine, date, git commit), so figures from
different runs and machines can be compared later.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "REPO_ROOT",
    "RESULTS_FILE",
    "Result",
    "TargetCheck",
    "at_least",
    "at_most",
    "emit",
    "git_commit",
    "machine_info",
    "percentile",
    "recording_arguments",
    "topic_arguments",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_FILE = REPO_ROOT / "bench" / "results" / "results.jsonl"


@attrs.frozen
class TargetCheck:
    """One target of the performance issue, checked against a figure of this run.

    ``ratio`` is oriented so that 1.0 or more means met, whichever way the
    target points: measured / target for "at least", target / measured for
    "under".
    """

    name: str
    measured: float
    target: float
    kind: str  # "at_least" or "at_most"
    unit: str = ""

    @property
    def ratio(self) -> float:
        if self.kind == "at_least":
            return self.measured / self.target if self.target else float("inf")
        return self.target / self.measured if self.measured else float("inf")

    @property
    def met(self) -> bool:
        return self.ratio >= 1.0

    def text(self) -> str:
        op = ">=" if self.kind == "at_least" else "<"
        verdict = "met" if self.met else "MISSED"
        return (
            f"{self.name} {_num(self.measured)}{self.unit} (target {op} {_num(self.target)}"
            f"{self.unit}: {self.ratio:.2f}x, {verdict})"
        )

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "target": self.target,
            "kind": self.kind,
            "unit": self.unit,
            "ratio_to_target": round(self.ratio, 4),
            "met": self.met,
        }


def recording_arguments(parser: argparse.ArgumentParser, results_file: Path) -> None:
    """``--results``, ``--no-record`` and ``--log-level``, as every bench command takes them."""
    shown = results_file.relative_to(REPO_ROOT)
    parser.add_argument(
        "--results",
        type=Path,
        default=results_file,
        metavar="FILE",
        help=f"JSON lines file the records are appended to (default: {shown})",
    )
    parser.add_argument("--no-record", action="store_true", help="print only, append nothing")
    parser.add_argument(
        "--log-level",
        default="ERROR",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="rmqk log level (default: ERROR)",
    )


def topic_arguments(
    parser: argparse.ArgumentParser, *, count_flag: str = "--messages", count: int = 200_000
) -> None:
    """The topic a scenario fills: how many messages, of what size, over how many queues."""
    parser.add_argument(count_flag, "-n", type=int, default=count, help=f"messages ({count})")
    parser.add_argument("--size", type=int, default=100, help="body bytes (100)")
    parser.add_argument("--queues", "-q", type=int, default=4, help="queues (4)")


def at_least(name: str, measured: float, target: float, unit: str = "") -> TargetCheck:
    return TargetCheck(name, measured, target, "at_least", unit)


def at_most(name: str, measured: float, target: float, unit: str = "") -> TargetCheck:
    return TargetCheck(name, measured, target, "at_most", unit)


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(value)


def _checks(value: Sequence[TargetCheck]) -> tuple[TargetCheck, ...]:
    return tuple(value)


@attrs.frozen
class Result:
    """What one scenario run measured.

    ``summary`` is the human part of the result line; ``figures`` are the
    numbers (name -> value) recorded as they are; ``parameters`` say what was run.
    """

    scenario: str
    summary: str
    parameters: Mapping[str, Any] = attrs.field(converter=_frozen_mapping)
    figures: Mapping[str, Any] = attrs.field(converter=_frozen_mapping)
    targets: tuple[TargetCheck, ...] = attrs.field(default=(), converter=_checks)
    notes: str = ""

    def line(self) -> str:
        text = f"{self.scenario}: {self.summary}"
        if self.targets:
            text += " | " + "; ".join(t.text() for t in self.targets)
        return text


def _num(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, nearest-rank."""
    if not sorted_values:
        return float("nan")
    rank = math.ceil(q * len(sorted_values))
    index = min(len(sorted_values) - 1, max(0, rank - 1))
    return float(sorted_values[index])


def git_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit of the tree that ran, and whether it had local changes."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "mem_total_mb": _mem_total_mb(),
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def emit(
    result: Result,
    *,
    common: Mapping[str, Any],
    results_file: Path | None = RESULTS_FILE,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Print the result line and append the JSON record; returns the record."""
    record: dict[str, Any] = {
        "scenario": result.scenario,
        "parameters": {**common, **result.parameters},
        "figures": dict(result.figures),
        "targets": [t.record() for t in result.targets],
        "summary": result.line(),
        "notes": result.notes,
        "machine": machine_info(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": list(command) if command is not None else sys.argv,
    }
    print(result.line(), flush=True)
    if results_file is not None:
        results_file.parent.mkdir(parents=True, exist_ok=True)
        with results_file.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return record
