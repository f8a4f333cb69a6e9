"""Soak: a slow listener with a backlog of a million messages; memory stays bounded.

    python -m bench.soak_memory                # 1,000,000 x 1 KiB, 60 s slow
    python -m bench.soak_memory --quick

The long version of tests/test_faults_memory.py. The consumer runs in a child
process with the default flow control; its resident memory (VmHWM, the peak)
must stay under ``--ceiling-mb``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.harness import at_most
from bench.soak_support import Outcome, soak_main

HELP = "slow listener, million-message backlog: peak RSS under the ceiling"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--slow-s", type=float, default=60.0)
    parser.add_argument("--ceiling-mb", type=float, default=80.0)


async def run(args: argparse.Namespace, workdir: Path) -> list[Outcome]:
    from test_faults_support import memory_scenario

    if args.quick:
        args.backlog, args.slow_s = 10_000, 2.0
    params = {
        "backlog": args.backlog,
        "size": args.size,
        "slow_s": args.slow_s,
        "ceiling_mb": args.ceiling_mb,
    }
    r = await memory_scenario(workdir / "memory", **params, timeout=1800.0)
    return [
        Outcome(
            "soak-memory",
            r,
            parameters=params,
            targets=[at_most("rss_peak_mb", r.rss_peak_mb, args.ceiling_mb, " MB")],
        )
    ]


def main(argv: list[str] | None = None) -> int:
    return soak_main("python -m bench.soak_memory", __doc__ or HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
