"""What the soak runs share: the long versions of the fault tests (tests/test_faults_*.py).

The scenarios themselves live in ``tests/test_faults_support.py``, so the test
suite and the soaks run the same code at different sizes. Each soak prints one
result line per scenario and appends a JSON record (through ``bench.harness``)
to ``bench/results/soak.jsonl``; docs/reliability.md quotes the figures.
A soak exits 1 when a scenario lost a message or broke one of its bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness import REPO_ROOT, Result, TargetCheck, emit, recording_arguments

TESTS = REPO_ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

SOAK_RESULTS = REPO_ROOT / "bench" / "results" / "soak.jsonl"

__all__ = ["SOAK_RESULTS", "Outcome", "common_arguments", "record", "soak_main"]


class Outcome:
    """One scenario's figures, the bounds they must respect, and whether they did.

    A result that counts ``lost`` messages fails on any: no soak may lose one.
    """

    def __init__(
        self,
        scenario: str,
        result: Any,
        *,
        parameters: dict[str, Any],
        targets: Sequence[TargetCheck] = (),
        failures: Sequence[str] = (),
    ) -> None:
        self.scenario = scenario
        self.result = result
        self.parameters = parameters
        self.targets = list(targets)
        lost = getattr(result, "lost", 0)
        self.failures = [f"{lost} lost"] if lost else []
        self.failures += [f for f in failures if f]

    @property
    def ok(self) -> bool:
        return not self.failures and all(t.met for t in self.targets)


def common_arguments(parser: argparse.ArgumentParser) -> None:
    recording_arguments(parser, SOAK_RESULTS)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the brokers' data and logs here"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: check that the soak runs at all"
    )


def record(outcome: Outcome, args: argparse.Namespace, argv: Sequence[str]) -> None:
    figures = outcome.result.as_dict()
    result = Result(
        scenario=outcome.scenario,
        summary=", ".join(f"{k}={_short(v)}" for k, v in figures.items() if _scalar(v)),
        parameters=outcome.parameters,
        figures=figures,
        targets=outcome.targets,
        notes="; ".join(outcome.failures),
    )
    emit(
        result,
        common={"soak": True},
        results_file=None if args.no_record else args.results,
        command=["python", *argv],
    )
    for failure in outcome.failures:
        print(f"{outcome.scenario}: FAILED: {failure}", flush=True)


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool)


def _short(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def soak_main(
    prog: str,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace, Path], Awaitable[list[Outcome]]],
    argv: Sequence[str] | None = None,
) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    common_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rmqk").setLevel(args.log_level)
    command = [prog.replace("python ", ""), *(argv if argv is not None else sys.argv[1:])]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rmqk-soak-") as tmp:
        workdir = args.workdir or Path(tmp)
        outcomes = asyncio.run(run(args, workdir))
    for outcome in outcomes:
        record(outcome, args, command)
    failed = [o.scenario for o in outcomes if not o.ok]
    verdict = f"; failed: {', '.join(failed)}" if failed else ""
    held = len(outcomes) - len(failed)
    elapsed = time.monotonic() - started
    print(f"{prog}: {held}/{len(outcomes)} scenarios held in {elapsed:.0f} s{verdict}", flush=True)
    return 1 if failed else 0
