"""What a person reads in a terminal stays readable: wrapped to its width, no reST markup,
no address said three times (found by a newcomer's walk-through in tmux)."""

from __future__ import annotations

import os
import subprocess
import sys

from rmqk.app.cli import _readable
from rmqk.plugins.remoting.connection import _reason
from rmqk.plugins.status import _answering


def test_descriptions_lose_rest_literals_and_long_paragraphs_wrap() -> None:
    text = _readable("``rmqk demo``: the path.\n\n" + "word " * 60 + "\n\n1. kept\n2. as is")
    assert "``" not in text and text.startswith("`rmqk demo`: the path.")
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.endswith("1. kept\n2. as is")


def test_a_refused_connect_reads_as_its_reason() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9871)")
    assert _reason(refused) == "connection refused"
    assert _reason(TimeoutError("slow")) == "slow"


def test_a_group_with_no_member_says_so_plainly() -> None:
    assert _answering(0, 0) == "no consumer answering"
    assert _answering(1, 2) == "1 of 2 consumer(s) answering"


def test_rmqk_plugins_fits_the_terminal() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "plugins"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    registered = out.stdout.split("Registered names:", 1)[1]
    assert max(len(line) for line in registered.splitlines()) <= 80
    assert "(built into rmqk)" in out.stdout
