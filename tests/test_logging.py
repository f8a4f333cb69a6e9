"""Structured logging: fields from the call, the queue and the task; text and JSON output."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqk.app.logsetup import (
    bind_log_context,
    configure_logging,
    current_log_context,
    log_context,
    reset_log_context,
)
from rmqk.model import MessageQueue

ROOT = Path(__file__).resolve().parent.parent

# Modules that are commands: printing is their job.
PRINTING_MODULES = {
    "kernel/app/commands.py",
    "kernel/app/cli.py",
    "kernel/app/produce_tool.py",
    "kernel/hookcalls.py",  # RMQK_TRACE_PLUGINS prints hook calls, as datasette does
    "plugins/admin/admin_cli.py",  # the rmqk admin command
    "plugins/admin/dlq.py",  # rmqk admin dlq
    "plugins/admin/reset_offset.py",  # rmqk admin consumer reset-offset
    "plugins/broker/cli.py",
    "plugins/spark/demo.py",
    "plugins/status/__init__.py",
    "plugins/trace/admin.py",  # rmqk admin trace
    "kernel/app/supervisor.py",  # rmqk run --processes: the group's summary line and tally
}


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = configure_logging("DEBUG", "json", out)
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger("rmqk").setLevel(logging.NOTSET)


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_records_carry_fields_from_extra_queue_and_context(stream: io.StringIO) -> None:
    log = logging.getLogger("rmqk.test.component")
    mq = MessageQueue("Orders", "broker-a", 3)
    with log_context(group="g1", consumer="orders"):
        log.warning("pull of %s failed", mq)
        log.info("explicit", extra={"topic": "Other", "client_id": "c1"})
    log.error("outside")
    first, second, third = records(stream)
    assert first["logger"] == "rmqk.test.component"
    assert first["level"] == "WARNING"
    assert first["message"] == f"pull of {mq} failed"
    assert {k: first[k] for k in ("group", "consumer", "topic", "broker", "queue")} == {
        "group": "g1",
        "consumer": "orders",
        "topic": "Orders",
        "broker": "broker-a",
        "queue": 3,
    }
    assert second["topic"] == "Other" and second["client_id"] == "c1" and second["group"] == "g1"
    assert "broker" not in second
    assert "group" not in third
    assert str(first["ts"]).endswith("Z")


def test_exceptions_are_one_json_field(stream: io.StringIO) -> None:
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("rmqk.test").exception("it failed")
    (record,) = records(stream)
    assert record["message"] == "it failed"
    assert "ValueError: bad value" in str(record["exception"])


def test_text_format_shows_fields_in_brackets() -> None:
    out = io.StringIO()
    handler = configure_logging("INFO", "text", out)
    try:
        with log_context(group="g2"):
            logging.getLogger("rmqk.test").info("hello %s", MessageQueue("T", "b", 0))
        logging.getLogger("rmqk.test").info("plain")
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = out.getvalue().splitlines()
    assert " INFO rmqk.test [group=g2 topic=T broker=b queue=0]: hello MessageQueue [" in first
    assert second.endswith(" INFO rmqk.test: plain")


def test_levels_apply_to_rmqk_and_reconfiguring_replaces_the_handler() -> None:
    out1, out2 = io.StringIO(), io.StringIO()
    configure_logging("DEBUG", "json", out1)
    handler = configure_logging("INFO", "json", out2)
    try:
        logging.getLogger("rmqk.x").debug("hidden")
        logging.getLogger("rmqk.x").info("shown")
        # Other libraries stay at WARNING, so DEBUG shows rmqk's own detail only.
        logging.getLogger("py4j.java_gateway").info("noise")
        logging.getLogger("py4j.java_gateway").warning("loud")
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger("rmqk").setLevel(logging.NOTSET)
    assert out1.getvalue() == ""
    assert [r["message"] for r in records(out2)] == ["shown", "loud"]
    marked = [h for h in logging.getLogger().handlers if getattr(h, "_rmqk_handler", False)]
    assert marked == []


def test_bad_level_format_or_field_is_refused() -> None:
    with pytest.raises(ValueError, match="log level 'LOUD'"):
        configure_logging("LOUD")
    with pytest.raises(ValueError, match="log format 'xml'"):
        configure_logging("INFO", "xml")
    with pytest.raises(ValueError, match="unknown log field"):
        bind_log_context(colour="red")


async def test_tasks_created_in_a_context_keep_its_fields(stream: io.StringIO) -> None:
    seen: list[object] = []

    async def worker() -> None:
        await asyncio.sleep(0.01)
        seen.append(current_log_context().get("group"))
        logging.getLogger("rmqk.test.worker").warning("from the worker")

    token = bind_log_context(group="g3", consumer="c")
    task = asyncio.get_running_loop().create_task(worker())
    reset_log_context(token)
    assert current_log_context() == {}
    await task
    assert seen == ["g3"]
    (record,) = records(stream)
    assert record["group"] == "g3" and record["consumer"] == "c"


def _python_files() -> list[Path]:
    return sorted([*(ROOT / "kernel").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])


def test_nothing_but_the_commands_prints() -> None:
    offenders = []
    for path in _python_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in PRINTING_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == [], "log instead of printing outside the CLI"


def test_every_logger_is_a_component_logger_under_rmqk() -> None:
    names = []
    for path in _python_files():
        if path.name == "logsetup.py":
            continue  # configures the root handler: the one place that may touch the root
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
            ):
                assert node.args, f"{path}:{node.lineno}: the root logger"
                arg = node.args[0]
                if isinstance(arg, ast.Name) and arg.id == "__name__":
                    continue  # rmqk.* or rmqk.plugins.*, by the package layout
                assert isinstance(arg, ast.Constant), f"{path}:{node.lineno}"
                names.append(str(arg.value))
    assert names
    bad = [n for n in names if n != "rmqk" and not n.startswith("rmqk.")]
    assert bad == []


def test_cli_writes_json_records_to_stderr() -> None:
    # A name server that is not there: the transport logs a warning for it.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqk.cli",
            "status",
            "--namesrv",
            "127.0.0.1:1",
            "--group",
            "g",
            "--log-format",
            "json",
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert logged, result.stderr
    assert all(r["logger"].startswith("rmqk.") and r["level"] == "WARNING" for r in logged)
    assert "problems:" in result.stdout
