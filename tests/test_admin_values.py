"""`rmqk admin` refuses values a broker call would store or act on wrongly, before dialing."""

from __future__ import annotations

import pytest

from rmqk.app.cli import main

# Nothing listens there: an error about connecting would mean the value was not checked first.
NAMESRV = ["-n", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["topic", "create", "T", "--queues", "0"], "--queues must be 1 or more, got 0"),
        (
            ["topic", "create", "T", "--read-queues", "-1"],
            "--read-queues must be 1 or more, got -1",
        ),
        (
            ["topic", "create", "T", "--write-queues", "0"],
            "--write-queues must be 1 or more, got 0",
        ),
        (["topic", "create", "T", "--perm", "99"], "--perm must be 2 (W), 4 (R) or 6 (RW), got 99"),
        (["topic", "create", "T", "--perm", "0"], "--perm must be 2 (W), 4 (R) or 6 (RW), got 0"),
        (
            ["message", "--key", "k", "--topic", "T", "--max-num", "0"],
            "--max-num must be 1 or more, got 0",
        ),
        (["topic", "list", "--timeout", "-5"], "--timeout must be more than 0 seconds, got -5"),
    ],
)
def test_bad_values_are_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    code = main(["admin", *argv, *NAMESRV])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == f"rmqk: error: {error}"
