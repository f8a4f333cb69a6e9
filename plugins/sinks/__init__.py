"""The small sinks, ``jsonl`` (append to a file), ``python`` (call a function) and
``sqlite`` (a database table, exactly once), and the group-commit base
(:mod:`rmqk.plugins.sinks.groupcommit`) the sinks that write rows share."""

from __future__ import annotations

from rmqk.plugins.sinks.jsonl import JsonlSink
from rmqk.plugins.sinks.python import PythonSink
from rmqk.plugins.sinks.sqlite import SqliteSink
from rmqk.spi.hookspecs import Register, hookimpl


@hookimpl
def rmqk_register_sinks(register: Register) -> None:
    register("jsonl", JsonlSink)
    register("python", PythonSink)
    register("sqlite", SqliteSink)
