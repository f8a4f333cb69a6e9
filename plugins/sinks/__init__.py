"""The small sinks: ``jsonl`` (append to a file) and ``python`` (call a function)."""

from __future__ import annotations

from rmqk.hookspecs import Register, hookimpl
from rmqk.plugins.sinks.jsonl import JsonlSink
from rmqk.plugins.sinks.python import PythonSink


@hookimpl
def rmqk_register_sinks(register: Register) -> None:
    register("jsonl", JsonlSink)
    register("python", PythonSink)
