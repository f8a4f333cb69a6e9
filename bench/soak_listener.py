"""Soak: listener exceptions, returned failures and consume timeouts at scale.

    python -m bench.soak_listener              # 20,000 messages
    python -m bench.soak_listener --quick

The long version of tests/test_faults_listener.py: retry and DLQ counts must be
exact, whatever the size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.soak_support import Outcome, soak_main

HELP = "listener failures: exact retry and DLQ counts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--total", type=int, default=20_000)
    parser.add_argument("--max-reconsume-times", type=int, default=3)


async def run(args: argparse.Namespace, workdir: Path) -> list[Outcome]:
    from test_faults_support import listener_failure_scenario

    if args.quick:
        args.total = 300
    params = {"total": args.total, "max_reconsume_times": args.max_reconsume_times}
    r = await listener_failure_scenario(workdir / "listener", **params, timeout=600.0)
    failures = []
    if r.deliveries_by_kind != r.expected_deliveries_by_kind:
        failures.append(f"deliveries {r.deliveries_by_kind} != {r.expected_deliveries_by_kind}")
    if r.retry_topic_messages != r.expected_retry_topic_messages:
        failures.append(f"retry {r.retry_topic_messages} != {r.expected_retry_topic_messages}")
    if r.dlq_messages != r.expected_dlq_messages:
        failures.append(f"DLQ {r.dlq_messages} != {r.expected_dlq_messages}")
    if not r.reconsume_times_ok:
        failures.append("reconsume_times out of sequence")
    return [Outcome("soak-listener", r, parameters=params, failures=failures)]


def main(argv: list[str] | None = None) -> int:
    return soak_main("python -m bench.soak_listener", __doc__ or HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
