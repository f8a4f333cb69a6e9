"""The CLI as a person meets it: help with examples, one-line errors, the live summary line."""

from __future__ import annotations

import argparse
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import jsonl_consumer, module_broker, rmqk, start_rmqk
from cli_support import produce as cli_produce

from rmqk.app import cli
from rmqk.app.cli import Command, build_parser, main
from rmqk.model.errors import ClientError

pytestmark = pytest.mark.timeout(120)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_help_ends_with_examples() -> None:
    commands = subcommands()
    assert {"plugins", "check", "run", "produce", "status", "broker"} <= set(commands)
    for name, parser in commands.items():
        text = parser.format_help()
        assert "\nexamples:\n  rmqk " in text, f"rmqk {name} --help has no examples"
        assert "--log-level" in text and "--debug" in text
    top = build_parser().format_help()
    assert "examples:\n  rmqk " in top


def test_logging_options_are_accepted_after_the_command() -> None:
    args = build_parser().parse_args(
        ["check", "x.toml", "--log-level", "info", "--log-format", "json", "--debug"]
    )
    assert (args.log_level, args.log_format, args.debug) == ("INFO", "json", True)
    args = build_parser().parse_args(["--log-level", "DEBUG", "check", "x.toml"])
    assert (args.log_level, args.log_format, args.debug) == ("DEBUG", "text", False)


def test_a_missing_config_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = rmqk("run", str(missing))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rmqk: error: ") and str(missing) in lines[0]
    assert "cannot read the file" in lines[0]
    debug = rmqk("run", str(missing), "--debug")
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr
    assert "ConfigError" in debug.stderr


def test_unexpected_errors_are_one_line_naming_the_type(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise KeyError("partition 7")

    def refused(args: argparse.Namespace) -> int:
        raise ClientError("the broker refused: no permission")

    commands = {
        **cli._all_commands(),
        "boom": Command(help="fails", run=boom, examples=("rmqk boom",)),
        "refused": Command(help="fails", run=refused, examples=("rmqk refused",)),
    }
    monkeypatch.setattr(cli, "_all_commands", lambda: commands)
    assert main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err == "rmqk: error: KeyError: 'partition 7' (--debug shows the traceback)\n"
    assert main(["refused"]) == 1
    assert capsys.readouterr().err == "rmqk: error: the broker refused: no permission\n"
    with pytest.raises(KeyError):
        main(["boom", "--debug"])


def test_no_command_prints_help() -> None:
    result = rmqk()
    assert result.returncode == 2
    assert "usage: rmqk" in result.stdout and "examples:" in result.stdout


# -- the summary line of `rmqk run` --------------------------------------------------


broker = module_broker()


def write_config(path: Path, namesrv: str, group: str, topic: str, out: Path) -> Path:
    path.write_text(jsonl_consumer("summary", group, namesrv, topic, out))
    return path


def produce(namesrv: str, topic: str, count: int) -> None:
    result = cli_produce(namesrv, topic, "--count", str(count))
    assert result.returncode == 0, result.stderr


def read_until(fd: int, done: Any, timeout: float) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(data):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    return data


def test_run_shows_a_live_summary_on_a_terminal(broker: Any, tmp_path: Path) -> None:
    produce(broker.namesrv_addr, "SummaryTty", 120)
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.toml", broker.namesrv_addr, "g-summary-tty", "SummaryTty", out
    )
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqk.cli", "run", str(config)],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(secondary)
    try:
        # Four queues of the topic, and the group's retry queue once its route exists.
        line = re.compile(
            rb"\r\x1b\[Ksummary: [45] queues, 120 consumed \([0-9,]+/s\), "
            rb"0 failed, 0 cached, lag 0"
        )
        screen = read_until(primary, lambda d: line.search(d) is not None, 45)
    finally:
        proc.send_signal(signal.SIGINT)
        rest = read_until(primary, lambda d: False, 5)
        proc.wait(timeout=30)
        os.close(primary)
    text = screen.decode()
    assert "rmqk: running 1 consumer(s)" in text
    assert line.search(screen), text[-500:]
    # The line is cleared when the consumer stops, so the shell prompt starts clean.
    assert (screen + rest).endswith(b"\r\x1b[K") or proc.returncode == 0
    assert proc.returncode == 0
    assert len(out.read_text().splitlines()) == 120


def test_run_draws_no_summary_line_off_a_terminal(broker: Any, tmp_path: Path) -> None:
    produce(broker.namesrv_addr, "SummaryPipe", 50)
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.toml", broker.namesrv_addr, "g-summary-pipe", "SummaryPipe", out
    )
    proc = start_rmqk("run", str(config))
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if out.exists() and len(out.read_text().splitlines()) >= 50:
                break
            time.sleep(0.2)
        time.sleep(1.5)  # a summary line would have been drawn by now
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert len(out.read_text().splitlines()) == 50
    # No summary line off a terminal; only the start and stop lines a service's log
    # needs to show it is alive (issue 28 #4; tests/test_quiet_run.py has the details).
    assert stdout == "" and "\r" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 2, stderr
    assert "running 1 consumer(s)" in lines[0] and "consumer stopped" in lines[1], stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["admin", "topic", "list", "--log-level", "DEBUG"],
        ["admin", "--log-level", "DEBUG", "topic", "list"],
        ["admin", "topic", "--log-level", "DEBUG", "list"],
        ["--log-level", "DEBUG", "admin", "topic", "list"],
        ["admin", "message", "--log-level", "DEBUG", "--log-format", "json", "ID"],
    ],
)
def test_logging_options_go_after_any_command_name_even_nested_ones(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RMQK_LOG_LEVEL", raising=False)
    monkeypatch.delenv("RMQK_LOG_FORMAT", raising=False)
    args = build_parser().parse_args(argv)
    # A nested parser must not reset what an outer one parsed to its default.
    assert args.log_level == "DEBUG"
    assert args.log_format == ("json" if "--log-format" in argv else "text")
    assert args.debug is False
