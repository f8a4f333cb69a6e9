"""The ``rmqk`` command line: the parser, the common options, errors and exit status.

Every sub-command is registered through ``rmqk_register_commands``: the kernel's
own (``plugins``, ``check``, ``run``, ``produce``, ``bench``) by its essential
plugin :mod:`rmqk.app.commands`, the others (``broker``, ``admin``,
``status``, ``demo``, ...) by plugins, so the kernel imports nothing from plugins.

Every command takes ``--log-level``, ``--log-format`` and ``--debug`` (before or
after its name, nested sub-commands' names included). An error is one line on
stderr, ``rmqk: error: ...``, and exit status 1; ``--debug`` shows the traceback
instead. A command line argparse cannot read prints the usage and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, cast

from rmqk import __version__
from rmqk.app.logsetup import FORMATS, LEVELS, configure_logging
from rmqk.model.errors import ConfigError, RmqkError
from rmqk.spi.commands import Command

__all__ = ["Command", "build_parser", "error_line", "log_handler", "main"]


def _all_commands() -> dict[str, Command]:
    from rmqk.pluginmanager import registries

    return {entry.name: entry.factory for entry in registries().commands}


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
            description=_readable(command.description or command.help),
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(p)
        _add_common_options_below(p)
        p.set_defaults(_command=command)
    return parser


def _add_common_options_below(parser: argparse.ArgumentParser) -> None:
    """The logging options on ``parser`` and every parser nested under it.

    So ``rmqk admin topic list --log-level DEBUG`` works as ``rmqk run X --log-level
    DEBUG`` does. Their defaults are SUPPRESS: a nested parser copies what it parsed
    over its parents' values, and must not reset one given earlier to a default.
    """
    _common_options(parser.add_argument_group("logging and errors"), top=False)  # type: ignore[arg-type]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for nested in dict.fromkeys(action.choices.values()):
                _add_common_options_below(nested)


def _readable(text: str) -> str:
    """A command's description for the terminal: reST literals as plain `x`, and each
    paragraph that is one long line wrapped; laid-out text (lists, examples) is kept."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    width = max(min(shutil.get_terminal_size((100, 24)).columns, 100) - 2, 40)
    paragraphs = []
    for para in text.split("\n\n"):
        single = "\n" not in para.strip()
        paragraphs.append(textwrap.fill(para.strip(), width) if single else para)
    return "\n\n".join(paragraphs)


# The handler configure_logging installed, so `rmqk run` can keep log records off its
# summary line.
_log_handler: logging.StreamHandler[Any] | None = None


def log_handler() -> logging.StreamHandler[Any] | None:
    """The stderr handler of rmqk's log records, once ``main`` configured logging."""
    return _log_handler


def announce(logger: logging.Logger, message: str, *args: object) -> None:
    """Log an INFO record of a long-running command's life (started, stopped) that
    shows at any ``--log-level``: a service's log must show it is alive, and the
    default level (WARNING) keeps everything else quiet. Formatted as every record
    is (text or JSON); without a configured handler, an ordinary INFO record."""
    handler = _log_handler
    if handler is None or logger.isEnabledFor(logging.INFO):
        logger.info(message, *args)
        return
    handler.handle(logger.makeRecord(logger.name, logging.INFO, "(rmqk)", 0, message, args, None))


def error_line(exc: BaseException) -> str:
    """How rmqk reports an error on stderr: one ``rmqk: error:`` line, or a list of problems."""
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
        from rmqk.app.commands import run_bench

        # The scenarios own their options (and their --help): hand them everything.
        try:
            return run_bench(args_list[1:])
        except RmqkError as exc:
            print(error_line(exc), file=sys.stderr)
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
        print(error_line(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    # `python -m rmqk.app.cli` runs this file as __main__, a second copy of the module:
    # the commands read the configured handler (log_handler, announce) from rmqk.app.cli.
    from rmqk.app.cli import main as _main

    sys.exit(_main())
