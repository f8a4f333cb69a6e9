"""The contract of an ``rmqk`` sub-command, as a plugin registers one.

A plugin's ``rmqk_register_commands(register)`` calls ``register(name, Command(...))``;
the command line (:mod:`rmqk.app.cli`) builds its parser from every registration.
"""

from __future__ import annotations

import argparse
import importlib
import warnings
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["Command"]


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


def __getattr__(name: str) -> Any:
    # The helpers sub-commands share moved to rmqk.console.commandline (not a contract).
    module = importlib.import_module("rmqk.console.commandline")
    if name not in module.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"rmqk.spi.commands.{name} moved to {module.__name__}", DeprecationWarning, 2)
    return getattr(module, name)
