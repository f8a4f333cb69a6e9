"""Soak: kill -9 consumer processes and the broker process, many times.

    python -m bench.soak_kill                  # 10 consumer kills, 5 broker kills
    python -m bench.soak_kill --quick

The long version of tests/test_faults_kill.py. The broker kills use Java's
default 30 s heartbeat unless ``--heartbeat-ms`` says otherwise: a restarted
broker has forgotten its consumers until their next heartbeat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.harness import at_most
from bench.soak_support import Outcome, soak_main

HELP = "kill -9 consumers and the broker mid-consumption, restart, count"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--consumer-total", type=int, default=200_000)
    parser.add_argument("--consumer-kills", type=int, default=10)
    parser.add_argument("--broker-before", type=int, default=100_000)
    parser.add_argument("--broker-after", type=int, default=20_000)
    parser.add_argument("--broker-kills", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=int, default=30_000)
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument("--skip-broker", action="store_true")
    parser.add_argument("--skip-consumer", action="store_true")


async def run(args: argparse.Namespace, workdir: Path) -> list[Outcome]:
    from test_faults_support import broker_kill_scenario, consumer_kill_scenario

    if args.quick:
        args.consumer_total, args.consumer_kills = 3000, 1
        args.broker_before, args.broker_after, args.broker_kills = 2000, 500, 1
        args.heartbeat_ms = 1000
    outcomes = []
    if not args.skip_consumer:
        params = {"total": args.consumer_total, "kills": args.consumer_kills, "queues": 4}
        r = await consumer_kill_scenario(
            workdir / "consumer", **params, timeout=max(300.0, args.consumer_total / 200)
        )
        outcomes.append(
            Outcome(
                "soak-kill-consumer",
                r,
                parameters=params,
                targets=[at_most("duplicates_vs_window", r.duplicates, r.duplicate_bound)],
            )
        )
    if not args.skip_broker:
        params = {
            "before": args.broker_before,
            "after": args.broker_after,
            "kills": args.broker_kills,
            "heartbeat_ms": args.heartbeat_ms,
            "flush": args.flush,
        }
        r = await broker_kill_scenario(
            workdir / "broker",
            **params,
            timeout=max(300.0, (args.broker_before + args.broker_after) / 200),
        )
        outcomes.append(
            Outcome(
                "soak-kill-broker",
                r,
                parameters=params,
                failures=[
                    f"{r.acked_missing_after_restart} acknowledged messages missing after restart"
                    if r.acked_missing_after_restart
                    else "",
                ],
            )
        )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    return soak_main("python -m bench.soak_kill", __doc__ or HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
