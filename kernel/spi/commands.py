"""The contract of an ``rmqk`` sub-command, as a plugin registers one.

A plugin's ``rmqk_register_commands(register)`` calls ``register(name, Command(...))``;
the command line (:mod:`rmqk.app.cli`) builds its parser from every registration.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

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
