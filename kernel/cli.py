"""The ``rmqk`` command line.

The kernel owns ``plugins``, ``check``, ``run``, ``produce`` and ``bench`` (which
runs the benchmarks of a source checkout); every other
sub-command (``broker``, ``admin``, ``status``, ``demo``, ...) is registered by a
plugin through ``rmqk_register_commands``, so the kernel imports nothing from
plugins.

Every command takes ``--log-level``, ``--log-format`` and ``--debug`` (before or
after its name). An error is one line on stderr, ``rmqk: error: ...``, and exit
status 1; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, cast

import attrs

from rmqk import __version__
from rmqk.aioutil import wait_event
from rmqk.errors import ConfigError, RmqkError
from rmqk.logsetup import FORMATS, LEVELS, configure_logging

__all__ = ["Command", "SummaryLine", "build_parser", "main"]

log = logging.getLogger("rmqk.cli")


@attrs.frozen
class Command:
    """One ``rmqk`` sub-command.

    ``add_arguments(parser)`` declares its options; ``run(args)`` does the work
    and returns the exit status. ``examples`` are shown at the end of ``--help``.
    """

    help: str
    run: Callable[[argparse.Namespace], int]
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    description: str | None = None
    examples: tuple[str, ...] = ()


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
        origin = (
            f"{p['distribution']} {p['version']}"
            if p["distribution"]
            else "(not from a distribution)"
        )
        print(f"  {p['name']}  [{origin}]  {p['module']}")
        for hook in p["hooks"]:
            print(f"      {hook}")
    print("Registered names:")
    for kind, entries in kinds.items():
        names = ", ".join(f"{e['name']} ({e['plugin']})" for e in entries) or "(none)"
        print(f"  {kind}: {names}")
    return 0


def _cmd_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="+", help="TOML config file(s) composing consumers")
    parser.add_argument(
        "--json", action="store_true", help="print the resolved composition as JSON"
    )


def _cmd_check(args: argparse.Namespace) -> int:
    from rmqk.config import announce_config, describe_config, load_config

    status = 0
    for path in args.config:
        try:
            config = load_config(path)
            # Plugins validate their own tables (e.g. [acl]) when they receive the config.
            announce_config(config)
        except RmqkError as exc:
            print(str(exc), file=sys.stderr)
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


class SummaryLine:
    """One line on a terminal, redrawn every ``interval`` seconds, saying how each consumer does.

    ``orders: 8 queues, 12,345 consumed (1,234/s), 0 failed, 32 cached, lag 1,200``.
    Log records written to the same terminal first clear the line (see :meth:`stream`).
    """

    def __init__(
        self,
        consumers: Sequence[Any],
        out: IO[str],
        interval: float = 1.0,
        lag_interval: float = 5.0,
    ) -> None:
        self.consumers = list(consumers)
        self.out = out
        self.interval = interval
        self.lag_interval = lag_interval
        self._shown = False
        self._last: dict[str, tuple[float, int]] = {}
        self._max_offsets: dict[str, dict[Any, int]] = {}

    def render(self, now: float | None = None) -> str:
        from rmqk.progress import snapshot

        now = time.monotonic() if now is None else now
        parts = []
        for composed in self.consumers:
            name = composed.spec.name
            progress = snapshot(composed.consumer, self._max_offsets.get(name))
            done = progress.consumed_ok
            then, before = self._last.get(name, (now, done))
            rate = (done - before) / (now - then) if now > then else 0.0
            self._last[name] = (now, done)
            lag = progress.lag
            parts.append(
                f"{name}: {len(progress.queues)} queues, {done:,} consumed ({rate:,.0f}/s), "
                f"{progress.consumed_failed:,} failed, {progress.cached_messages:,} cached, "
                f"lag {'?' if lag is None else f'{lag:,}'}"
            )
        return " | ".join(parts)

    def draw(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        if len(text) > width:
            text = text[: max(width - 3, 0)] + "..."
        self.out.write("\r\x1b[K" + text)
        self.out.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._shown = False

    def _queues_changed(self) -> bool:
        for composed in self.consumers:
            held = set(composed.consumer.rebalance.process_queue_table)
            if held != set(self._max_offsets.get(composed.spec.name, ())):
                return True
        return False

    async def refresh_lag(self) -> None:
        from rmqk.progress import fetch_max_offsets

        for composed in self.consumers:
            self._max_offsets[composed.spec.name] = await fetch_max_offsets(composed.consumer)

    async def run(self, stop: asyncio.Event) -> None:
        next_lag = 0.0
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() >= next_lag or self._queues_changed():
                        await self.refresh_lag()
                        next_lag = time.monotonic() + self.lag_interval
                    self.draw(self.render())
                except Exception:
                    # The summary is a convenience: it must never take the consumers down.
                    log.debug("summary line failed", exc_info=True)
                await wait_event(stop, self.interval)
        finally:
            self.clear()

    def stream(self) -> IO[str]:
        """A stream for log records that clears the summary line before each record."""
        summary = self

        class _Clearing:
            def write(self, text: str) -> int:
                summary.clear()
                return summary.out.write(text)

            def flush(self) -> None:
                summary.out.flush()

        return cast(IO[str], _Clearing())


def _cmd_run(args: argparse.Namespace) -> int:
    from rmqk.config import load_config
    from rmqk.runtime import install_stop_signals, run_config

    config = load_config(args.config)
    on_terminal = args.summary and sys.stderr.isatty()

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        tasks: list[asyncio.Task[None]] = []

        def started(consumers: Sequence[Any]) -> None:
            log.info("running %d consumer(s) from %s", len(consumers), args.config)
            if not on_terminal:
                return
            print(
                f"rmqk: running {len(consumers)} consumer(s) from {args.config}; Ctrl-C stops",
                file=sys.stderr,
            )
            summary = SummaryLine(consumers, sys.stderr)
            if _log_handler is not None:
                _log_handler.setStream(summary.stream())
            tasks.append(asyncio.get_running_loop().create_task(summary.run(stop)))

        try:
            await run_config(config, stop, args.consumer, started)
        finally:
            stop.set()
            for task in tasks:
                await task
            if _log_handler is not None:
                _log_handler.setStream(sys.stderr)

    asyncio.run(main())
    return 0


def _cmd_produce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namesrv", required=True, help="name server address(es), ';'-separated")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--count", type=int, default=1000, help="messages to generate (default 1000)"
    )
    parser.add_argument(
        "--size", type=int, default=100, help="body size in bytes for generated messages"
    )
    parser.add_argument("--tags", default="", help="comma-separated tags, used round robin")
    parser.add_argument("--group", default="rmqk-produce", help="producer group")
    parser.add_argument(
        "--stdin",
        action="store_true",
        help='read JSON lines from stdin: {"body": ..., "tags": ..., "keys": ..., '
        '"properties": {...}}',
    )
    parser.add_argument(
        "--batch", type=int, default=1, help="messages per send (batch send when > 1)"
    )


def _cmd_produce(args: argparse.Namespace) -> int:
    import asyncio

    from rmqk.engine.produce_tool import produce

    return asyncio.run(produce(args))


BUILTIN_COMMANDS: dict[str, Command] = {
    "plugins": Command(
        help="list installed plugins, their hooks and the names they register",
        run=_cmd_plugins,
        add_arguments=_cmd_plugins_args,
        examples=("rmqk plugins", "rmqk plugins --json | jq '.registered.sink'"),
    ),
    "check": Command(
        help="validate config files and print the consumers they compose",
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
    "bench": Command(
        help="run a benchmark scenario of a source checkout (same as python -m bench)",
        description=(
            "Runs the scenarios in bench/ of an rmqk source checkout: ceiling, consume, "
            "latency, memory, rebalance, broker, spark-sink, spark-source. Run it from the "
            "repository root (or below it); 'rmqk bench SCENARIO --help' lists a scenario's "
            "options. Results are printed and appended to bench/results/results.jsonl."
        ),
        run=lambda args: _run_bench(args.bench_args),
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


def _run_bench(argv: Sequence[str]) -> int:
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


def _all_commands() -> dict[str, Command]:
    from rmqk.pluginmanager import registries

    commands = dict(BUILTIN_COMMANDS)
    for entry in registries().commands:
        if entry.name in commands:
            raise RmqkError(
                f"command {entry.name!r} of plugin {entry.plugin!r} clashes with a built-in command"
            )
        commands[entry.name] = entry.factory
    return commands


def _common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Logging and error options; sub-commands accept them too, after their name."""
    default: Any = argparse.SUPPRESS
    level_default = os.environ.get("RMQK_LOG_LEVEL", "WARNING").upper()
    format_default = os.environ.get("RMQK_LOG_FORMAT", "text").lower()
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default=level_default if top else default,
        help=f"level of rmqk's log records on stderr (default: {level_default}; "
        "env RMQK_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=format_default if top else default,
        help="log records as text or as one JSON object per line, with fields such as group, "
        f"topic, broker and queue (default: {format_default}; env RMQK_LOG_FORMAT)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else default,
        help="show the traceback when a command fails",
    )


def build_parser(commands: dict[str, Command] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmqk",
        description="rmqk: a plugin-based consumer kernel for Apache RocketMQ 4.x",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  rmqk broker --port 0 --data /tmp/rmqk\n"
        "  rmqk check examples/jsonl.toml\n"
        "  rmqk run examples/jsonl.toml --log-level INFO\n"
        "  rmqk status examples/jsonl.toml\n"
        "  rmqk plugins\n"
        "\n'rmqk COMMAND --help' describes a command.",
    )
    parser.add_argument("--version", action="version", version=f"rmqk {__version__}")
    _common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in sorted((commands if commands is not None else _all_commands()).items()):
        epilog = None
        if command.examples:
            epilog = "examples:\n" + "\n".join(f"  {e}" for e in command.examples)
        p = sub.add_parser(
            name,
            help=command.help,
            description=command.description or command.help,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(p)
        _common_options(p.add_argument_group("logging and errors"), top=False)  # type: ignore[arg-type]
        p.set_defaults(_command=command)
    return parser


# The handler configure_logging installed, so `rmqk run` can keep log records off its
# summary line.
_log_handler: logging.StreamHandler[Any] | None = None


def _error_line(exc: BaseException) -> str:
    if isinstance(exc, ConfigError) and len(exc.problems) == 1:
        return f"rmqk: error: {exc.problems[0]}"
    if isinstance(exc, RmqkError):
        return f"rmqk: error: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"rmqk: error: {exc.strerror}{where} (--debug shows the traceback)"
    text = str(exc) or "(no message)"
    return f"rmqk: error: {type(exc).__name__}: {text} (--debug shows the traceback)"


def _import_from_working_directory() -> None:
    """Let configs name modules of the current directory, as ``python -m`` does.

    A console script's ``sys.path[0]`` is its own ``bin`` folder, so without this
    ``function = "orders.handlers:handle_batch"`` would import only with PYTHONPATH set.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def main(argv: Sequence[str] | None = None) -> int:
    global _log_handler
    args_list = list(argv) if argv is not None else sys.argv[1:]
    debug = "--debug" in args_list
    _import_from_working_directory()
    if args_list[:1] == ["bench"]:
        # The scenarios own their options (and their --help): hand them everything.
        try:
            return _run_bench(args_list[1:])
        except RmqkError as exc:
            print(_error_line(exc), file=sys.stderr)
            return 1
    try:
        parser = build_parser()
        args = parser.parse_args(args_list)
        debug = bool(args.debug)
        handler = configure_logging(args.log_level, args.log_format)
        _log_handler = cast("logging.StreamHandler[Any]", handler)
        command: Command | None = getattr(args, "_command", None)
        if command is None:
            parser.print_help()
            return 2
        return command.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`rmqk status | head`): nothing left to say to it.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
    except Exception as exc:
        if debug:
            raise
        print(_error_line(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
