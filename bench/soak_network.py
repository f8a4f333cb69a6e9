"""Soak: resets, half-open connections, blackholes and a slow link, round after round.

    python -m bench.soak_network               # every fault kind, many rounds each
    python -m bench.soak_network --kinds reset --rounds 100
    python -m bench.soak_network --quick

The long version of tests/test_faults_network.py. ``--heartbeat-ms`` defaults to
Java's 30 s, which is what bounds the detection of a silent (half-open or
blackholed) connection; the tests use 1 s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.soak_support import Outcome, soak_main

HELP = "network faults between consumer and broker through the fault proxy"
KINDS = ("reset", "half_open", "blackhole", "slow")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fault-s", type=float, default=5.0, help="blackhole and slow length")
    parser.add_argument("--gap-s", type=float, default=1.0)
    parser.add_argument("--total", type=int, default=20_000, help="initial backlog")
    parser.add_argument("--heartbeat-ms", type=int, default=30_000)


async def run(args: argparse.Namespace, workdir: Path) -> list[Outcome]:
    from test_faults_support import network_scenario

    if args.quick:
        args.rounds, args.fault_s, args.gap_s, args.total = 1, 1.0, 0.2, 1500
        args.heartbeat_ms = 1000
    outcomes = []
    for kind in args.kinds:
        params = {
            "rounds": args.rounds,
            "fault_s": args.fault_s,
            "gap_s": args.gap_s,
            "total": args.total,
            "heartbeat_ms": args.heartbeat_ms,
        }
        r = await network_scenario(
            workdir / kind,
            kind,
            **params,
            resume_timeout=max(60.0, 3 * args.heartbeat_ms / 1000),
            timeout=600.0,
        )
        outcomes.append(
            Outcome(
                f"soak-network-{kind}",
                r,
                parameters={"kind": kind, **params},
            )
        )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    return soak_main("python -m bench.soak_network", __doc__ or HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
