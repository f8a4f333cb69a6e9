"""Soak: consumers joining and leaving a loaded group for many cycles.

    python -m bench.soak_group                 # 200 cycles, concurrent and orderly
    python -m bench.soak_group --quick

The long version of tests/test_faults_group.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.harness import at_most
from bench.soak_support import Outcome, soak_main

HELP = "members join and leave a loaded group; nothing lost, orderly stays exclusive"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--cycle-s", type=float, default=1.0)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--max-members", type=int, default=5)
    parser.add_argument("--send-rate", type=float, default=500.0)
    parser.add_argument("--modes", nargs="+", choices=["concurrent", "orderly"],
                        default=["concurrent", "orderly"])  # fmt: skip


async def run(args: argparse.Namespace, workdir: Path) -> list[Outcome]:
    from test_faults_support import group_churn_scenario

    if args.quick:
        args.cycles, args.cycle_s = 4, 0.5
    outcomes = []
    for mode in args.modes:
        params = {
            "cycles": args.cycles,
            "cycle_s": args.cycle_s,
            "queues": args.queues,
            "max_members": args.max_members,
            "send_rate": args.send_rate,
        }
        r = await group_churn_scenario(
            workdir / mode, orderly=mode == "orderly", **params, timeout=300.0
        )
        targets = []
        if mode == "orderly":
            targets = [
                at_most("exclusivity_violations", r.exclusivity_violations, 0),
                at_most("order_violations", r.order_violations, 0),
            ]
        outcomes.append(
            Outcome(
                f"soak-group-{mode}",
                r,
                parameters={"mode": mode, **params},
                targets=targets,
            )
        )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    return soak_main("python -m bench.soak_group", __doc__ or HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
