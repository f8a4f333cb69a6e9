"""The ``rmqk`` command line.

The kernel owns ``plugins`` and ``check``; every other sub-command (``broker``,
``admin``, ``run``, ``produce``, ``demo``, ...) is registered by a plugin through
``rmqk_register_commands``, so the kernel imports nothing from plugins.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

from rmqk import __version__
from rmqk.errors import RmqkError

__all__ = ["Command", "main"]


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


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from rmqk.config import load_config
    from rmqk.runtime import install_stop_signals, run_config

    config = load_config(args.config)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)

        def started(consumers: Sequence[object]) -> None:
            print(
                f"rmqk: running {len(consumers)} consumer(s) from {args.config}; Ctrl-C stops",
                file=sys.stderr,
            )

        await run_config(config, stop, args.consumer, started)

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
        examples=("rmqk plugins", "rmqk plugins --json"),
    ),
    "check": Command(
        help="validate config files and print the consumers they compose",
        run=_cmd_check,
        add_arguments=_cmd_check_args,
        examples=("rmqk check examples/demo.toml", "rmqk check --json consumers.toml"),
    ),
    "run": Command(
        help="run the consumers a config file composes until SIGINT/SIGTERM",
        run=_cmd_run,
        add_arguments=_cmd_run_args,
        examples=("rmqk run examples/jsonl.toml", "rmqk run consumers.toml --consumer orders"),
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
}


def _all_commands() -> dict[str, Command]:
    from rmqk.pluginmanager import registries

    commands = dict(BUILTIN_COMMANDS)
    for entry in registries().commands:
        if entry.name in commands:
            raise RmqkError(
                f"command {entry.name!r} of plugin {entry.plugin!r} clashes with a built-in command"
            )
        commands[entry.name] = cast(Command, entry.factory)
    return commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmqk",
        description="rmqk: a plugin-based consumer kernel for Apache RocketMQ 4.x",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  rmqk demo\n  rmqk check examples/demo.toml\n  rmqk plugins",
    )
    parser.add_argument("--version", action="version", version=f"rmqk {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default: WARNING)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in sorted(_all_commands().items()):
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
        p.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=getattr(logging, args.log_level),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        command: Command | None = getattr(args, "_command", None)
        if command is None:
            parser.print_help()
            return 2
        return command.run(args)
    except KeyboardInterrupt:
        return 130
    except RmqkError as exc:
        if debug:
            raise
        print(f"rmqk: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
