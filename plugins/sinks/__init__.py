"""The small sinks, ``jsonl`` (append to a file), ``python`` (call a function) and
``sqlite`` (a database table, exactly once), and the group-commit base
(:mod:`rmqk.plugins.sinks.groupcommit`) the sinks that write rows share."""

from __future__ import annotations

from rmqk.plugins.sinks.jsonl import JSONL_SINK
from rmqk.plugins.sinks.python import PYTHON_SINK
from rmqk.plugins.sinks.sqlite import SQLITE_SINK
from rmqk.spi.hookspecs import Register, hookimpl


@hookimpl
def rmqk_register_sinks(register: Register) -> None:
    register(JSONL_SINK)
    register(PYTHON_SINK)
    register(SQLITE_SINK)
