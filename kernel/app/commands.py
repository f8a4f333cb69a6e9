"""The commands the kernel owns: ``plugins``, ``check``, ``run``, ``produce`` and ``bench``.

They reach the CLI the way plugin commands do, through ``rmqk_register_commands``:
this module is an essential plugin the plugin manager always registers (after
the entry points, so ``RMQK_DISABLED_PLUGINS`` cannot drop it; naming it there
is an error, as pytest refuses to disable its essential plugins). Its hook
implementation runs last, so a plugin that takes one of these names is told
that it clashes with a built-in command.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import pluggy

from rmqk.app.cli import Command, announce, log_handler
from rmqk.model.errors import PluginError, RmqkError
from rmqk.spi.hookspecs import Register, hookimpl

__all__ = [
    "BUILTIN_COMMANDS",
    "PLUGIN_NAME",
    "find_bench_dir",
    "load_config_beside_modules",
    "register_essential",
    "rmqk_register_commands",
    "run_bench",
]

log = logging.getLogger("rmqk.cli")

# The name this module is registered under with the plugin manager.
PLUGIN_NAME = "rmqk-builtins"


def _cmd_plugins_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _cmd_plugins(args: argparse.Namespace) -> int:
    import json

    from rmqk.pluginmanager import get_plugin_manager, plugin_distribution, registries

    pm = get_plugin_manager()
    regs = registries()
    plugins: list[dict[str, Any]] = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        dist = plugin_distribution(name)
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        plugins.append(
            {
                "name": name,
                "distribution": dist.distribution if dist else None,
                "version": dist.version if dist else None,
                "module": getattr(plugin, "__name__", repr(plugin)),
                "hooks": hooks,
            }
        )
    kinds = {reg.kind: [{"name": e.name, "plugin": e.plugin} for e in reg] for reg in regs.all()}
    if args.json:
        print(json.dumps({"plugins": plugins, "registered": kinds}, indent=2))
        return 0
    print("Plugins:")
    for p in plugins:
        origin = f"{p['distribution']} {p['version']}" if p["distribution"] else "(built into rmqk)"
        print(f"  {p['name']}  [{origin}]  {p['module']}")
        for hook in p["hooks"]:
            print(f"      {hook}")
    print("Registered names:")
    width = shutil.get_terminal_size((100, 24)).columns
    for kind, entries in kinds.items():
        names = ", ".join(f"{e['name']} ({e['plugin']})" for e in entries) or "(none)"
        # Wrapped between names, never inside one, to the terminal's width.
        print(
            textwrap.fill(
                names,
                width=max(width, 40),
                initial_indent=f"  {kind}: ",
                subsequent_indent="      ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return 0


def _cmd_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="+", help="TOML config file(s) composing consumers")
    parser.add_argument(
        "--json", action="store_true", help="print the resolved composition as JSON"
    )


def _cmd_check(args: argparse.Namespace) -> int:
    from rmqk.app.cli import error_line
    from rmqk.app.config import describe_config
    from rmqk.app.preflight import check_file

    status = 0
    for path in args.config:
        try:
            # What `rmqk run` builds before connecting, built here the same way, for
            # every table, those with problems of their own too, so every problem of the
            # file is said at once; nothing the plugins configured outlives the check.
            config = load_config_beside_modules(path, load=check_file)
        except RmqkError as exc:
            print(error_line(exc), file=sys.stderr)
            status = 1
            continue
        print(describe_config(config, as_json=args.json))
    return status


def _cmd_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML config file composing consumers")
    parser.add_argument(
        "--consumer",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this consumer table (repeatable; default: all)",
    )
    parser.add_argument(
        "--no-summary",
        dest="summary",
        action="store_false",
        help="no live summary line, even on a terminal",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="run every consumer as N worker processes of its group (overrides processes "
        "in the config; default: the config's, 1)",
    )


def load_config_beside_modules(path: str, load: Callable[[str], Any] | None = None) -> Any:
    """Load a config whose python sink may name modules kept in the config's own folder.

    The folder goes at the end of ``sys.path``: the working directory (put first
    by the CLI, as ``python -m`` does) and installed packages win over it, so a
    ``handlers.py`` beside ``consumers.toml`` is found from any working directory
    without shadowing anything.
    """
    from pathlib import Path

    from rmqk.app.config import load_config

    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    return (load or load_config)(path)


def _cmd_run(args: argparse.Namespace) -> int:
    from rmqk.app.runtime import StopTally, install_stop_signals, run_config
    from rmqk.app.summary_line import SummaryLine
    from rmqk.app.supervisor import process_counts, run_supervised

    config = load_config_beside_modules(args.config)
    handler = log_handler()
    on_terminal = args.summary and sys.stderr.isatty()
    counts = process_counts(config, args.consumer, args.processes)
    if any(count > 1 for _, count in counts):
        return run_supervised(config, counts, args, handler, on_terminal)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        tasks: list[asyncio.Task[None]] = []

        def started(consumers: Sequence[Any]) -> None:
            if not on_terminal:
                # No summary line to show it runs: the log says so, at any level.
                announce(log, "running %d consumer(s) from %s", len(consumers), args.config)
                return
            log.info("running %d consumer(s) from %s", len(consumers), args.config)
            print(
                f"rmqk: running {len(consumers)} consumer(s) from {args.config}; Ctrl-C stops",
                file=sys.stderr,
            )
            summary = SummaryLine(consumers, sys.stderr)
            if handler is not None:
                handler.setStream(summary.stream())
            tasks.append(asyncio.get_running_loop().create_task(summary.run(stop)))

        def stopped(consumers: Sequence[Any]) -> None:
            tallies.extend(composed.tally() for composed in consumers)

        tallies: list[StopTally] = []
        try:
            await run_config(config, stop, args.consumer, started, stopped)
        finally:
            stop.set()
            for task in tasks:
                await task
            if handler is not None:
                handler.setStream(sys.stderr)
            # The summary line is gone by now: say once, for good, what each consumer did.
            for tally in tallies:
                if on_terminal:
                    log.info("consumer stopped: %s", tally.line())
                    print(f"rmqk: stopped {tally.line()}", file=sys.stderr)
                else:
                    announce(log, "consumer stopped: %s", tally.line())

    asyncio.run(main())
    return 0


def _cmd_produce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namesrv", required=True, help="name server address(es), ';'-separated")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        # None, not the default, so --stdin can refuse a --count the user gave.
        "--count",
        type=int,
        default=None,
        help="messages to generate (default 1000; not with --stdin)",
    )
    parser.add_argument(
        "--size",
        type=int,
        default=None,
        help="body size in bytes for generated messages (default 100; not with --stdin)",
    )
    parser.add_argument(
        "--tags",
        default="",
        help="comma-separated tags, used round robin (with --stdin: for lines without tags)",
    )
    parser.add_argument("--group", default="rmqk-produce", help="producer group")
    parser.add_argument(
        "--namespace",
        default=None,
        help="wrap topic and group in this namespace (ns%%Topic), as a Java producer with one",
    )
    parser.add_argument(
        "--stdin",
        action="store_true",
        help='read JSON lines from stdin: {"body": ..., "tags": ..., "keys": ..., '
        '"properties": {...}}',
    )
    parser.add_argument(
        "--batch", type=int, default=1, help="messages per send, 1 or more (batch send when > 1)"
    )


def _cmd_produce(args: argparse.Namespace) -> int:
    from rmqk.app.produce_tool import produce

    return asyncio.run(produce(args))


def _cmd_consume_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namesrv", required=True, help="name server address(es), ';'-separated")
    parser.add_argument("--topic", required=True)
    from rmqk.app.consume_tool import from_arg
    from rmqk.console.commandline import add_tls_arguments, positive_int

    select = parser.add_mutually_exclusive_group()
    select.add_argument("--tags", default=None, help='tag expression, e.g. "TagA || TagB"')
    select.add_argument("--sql", default=None, help="SQL92 filter expression (not with --tags)")
    parser.add_argument(
        "--from",
        dest="from_",
        type=from_arg,
        default="latest",
        help="earliest, latest (default) or a store time: epoch ms or ISO 8601; with --group "
        "only for a group that has committed nothing yet",
    )
    parser.add_argument(
        "--count", type=positive_int, default=None, help="exit after N messages (1 or more)"
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the body as UTF-8 (bad bytes as U+FFFD); json: MessageExt's attributes, "
        'body base64 with "body_encoding": "base64" when not UTF-8',
    )
    parser.add_argument(
        "--group",
        default=None,
        help="consume as a member of this group, committing offsets (without it: nothing is "
        "registered or committed)",
    )
    add_tls_arguments(parser)


def _cmd_consume(args: argparse.Namespace) -> int:
    from rmqk.app.consume_tool import consume

    return asyncio.run(consume(args))


BUILTIN_COMMANDS: dict[str, Command] = {
    "plugins": Command(
        help="list installed plugins, their hooks and the names they register",
        run=_cmd_plugins,
        add_arguments=_cmd_plugins_args,
        examples=("rmqk plugins", "rmqk plugins --json | jq '.registered.sink'"),
    ),
    "check": Command(
        help="validate config files as rmqk run does (short of connecting) and print the "
        "consumers they compose, as TOML",
        run=_cmd_check,
        add_arguments=_cmd_check_args,
        examples=(
            "rmqk check examples/jsonl.toml",
            "rmqk check --json consumers.toml",
            "rmqk check examples/*.toml",
        ),
    ),
    "run": Command(
        help="run the consumers a config file composes until SIGINT/SIGTERM",
        run=_cmd_run,
        add_arguments=_cmd_run_args,
        examples=(
            "rmqk run examples/jsonl.toml",
            "rmqk run consumers.toml --consumer orders --log-level INFO",
            "rmqk run consumers.toml --processes 4",
            "rmqk run consumers.toml --log-format json 2> consumer.log",
        ),
    ),
    "produce": Command(
        help="send test messages (generated, or JSON lines from stdin)",
        run=_cmd_produce,
        add_arguments=_cmd_produce_args,
        examples=(
            "rmqk produce --namesrv 127.0.0.1:9876 --topic Orders --count 10000 --tags TagA,TagB",
            "cat events.jsonl | rmqk produce --namesrv 127.0.0.1:9876 --topic Orders --stdin",
        ),
    ),
    "consume": Command(
        help="print a topic's messages one a line as they arrive (kafka-console-consumer)",
        run=_cmd_consume,
        add_arguments=_cmd_consume_args,
        examples=(
            "rmqk consume --namesrv 127.0.0.1:9876 --topic Orders --from earliest --count 10",
            "rmqk consume --namesrv 127.0.0.1:9876 --topic Orders --tags TagA --format json",
        ),
    ),
    "bench": Command(
        help="run a benchmark scenario of a source checkout (same as python -m bench)",
        description=(
            "Runs the scenarios in bench/ of an rmqk source checkout: ceiling, consume, "
            "latency, memory, rebalance, broker, processes, spark-sink, spark-source. Run it "
            "from the repository root (or below it); 'rmqk bench SCENARIO --help' lists a "
            "scenario's options. Results are printed and appended to bench/results/results.jsonl."
        ),
        run=lambda args: run_bench(args.bench_args),
        add_arguments=lambda parser: _bench_args(parser),
        examples=(
            "rmqk bench consume -n 200000 --size 100 -q 4",
            "rmqk bench latency --rate 1000 --duration 30 --listener async",
            "rmqk bench ceiling --namesrv 10.0.0.5:9876",
        ),
    ),
}


def _bench_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="SCENARIO [options]")


def find_bench_dir(start: str | os.PathLike[str] | None = None) -> str | None:
    """The source checkout holding bench/cli.py: ``start`` (default: cwd) or a parent."""
    from pathlib import Path

    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "bench" / "cli.py").is_file() and (folder / "pyproject.toml").is_file():
            return str(folder)
    return None


def run_bench(argv: Sequence[str]) -> int:
    root = find_bench_dir()
    if root is None:
        raise RmqkError(
            f"rmqk bench runs the benchmarks in bench/ of an rmqk source checkout, and "
            f"{os.getcwd()} is not inside one: run it from the repository's directory"
        )
    if root not in sys.path:
        sys.path.insert(0, root)
    from importlib import import_module

    bench_cli = import_module("bench.cli")
    status: int = bench_cli.main(list(argv))
    return status


def register_essential(pm: pluggy.PluginManager) -> None:
    """Register the built-in commands with ``pm``; they cannot be blocked."""
    if pm.is_blocked(PLUGIN_NAME):
        raise PluginError(
            f"plugin {PLUGIN_NAME!r} holds rmqk's built-in commands and cannot be disabled "
            "(remove it from RMQK_DISABLED_PLUGINS)"
        )
    pm.register(sys.modules[__name__], name=PLUGIN_NAME)


@hookimpl(trylast=True)
def rmqk_register_commands(register: Register) -> None:
    for name, command in BUILTIN_COMMANDS.items():
        try:
            register(name, command)
        except PluginError as exc:
            raise PluginError(f"command {name!r} clashes with a built-in command ({exc})") from None
