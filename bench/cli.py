"""The command line of the benchmarks: one sub-command per scenario.

``add_arguments`` and ``run`` have the shape of an ``rmqk.spi.commands.Command``, so the
same scenarios can be offered as ``rmqk bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
import time
from collections.abc import Sequence
from types import ModuleType

from bench import SCENARIOS
from bench.cluster import BROKER_MODES, Cluster
from bench.harness import RESULTS_FILE, emit, recording_arguments
from bench.sparkbench import Pending
from rmqk.model.errors import RmqkError

__all__ = ["EXIT_MISSED", "EXIT_PENDING", "add_arguments", "main", "run", "scenario_module"]

EXIT_PENDING = 3
EXIT_MISSED = 4


def scenario_module(name: str) -> ModuleType:
    if name not in SCENARIOS:
        raise RmqkError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")
    return importlib.import_module(f"bench.{name.replace('-', '_')}")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        default=None,
        metavar="HOST:PORT",
        help="run against this cluster instead of an embedded broker",
    )
    parser.add_argument(
        "--broker",
        choices=BROKER_MODES,
        default="process",
        help="embedded broker in a child process (default) or in a thread of this one",
    )
    recording_arguments(parser, RESULTS_FILE)
    parser.add_argument(
        "--fail-on-miss", action="store_true", help=f"exit {EXIT_MISSED} when a target is missed"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="scenario", metavar="SCENARIO")
    for name in SCENARIOS:
        module = scenario_module(name)
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(p)
        _common(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="rmqk benchmarks; each scenario prints one line and appends a JSON record.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def _common_parameters(args: argparse.Namespace, cluster: Cluster) -> dict[str, object]:
    return {"broker": cluster.mode, "namesrv": args.namesrv}


async def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    module = scenario_module(args.scenario)
    async with Cluster(args.namesrv, mode=args.broker) as cluster:
        result = await module.run(cluster, args)
    emit(
        result,
        common=_common_parameters(args, cluster),
        results_file=None if args.no_record else args.results,
        command=["python", "-m", "bench", *argv],
    )
    if args.fail_on_miss and any(not t.met for t in result.targets):
        return EXIT_MISSED
    return 0


def _own_argv() -> list[str]:
    """The arguments after ``python -m bench`` (or after ``rmqk bench``)."""
    argv = sys.argv[1:]
    return argv[1:] if argv[:1] == ["bench"] else argv


def run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    if not getattr(args, "scenario", None):
        print(f"choose a scenario: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rmqk").setLevel(args.log_level)
    started = time.monotonic()
    try:
        return asyncio.run(_run(args, list(argv) if argv is not None else _own_argv()))
    except Pending as exc:
        print(f"{args.scenario}: pending: {exc}", flush=True)
        return EXIT_PENDING
    except RmqkError as exc:
        elapsed = time.monotonic() - started
        print(f"{args.scenario}: error after {elapsed:.0f} s: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args, argv)
