"""``rmqk produce --stdin`` with a bad line: what was sent is said exactly, so a retry
resumes without duplicating anything."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from cli_support import module_broker
from cli_support import produce as cli_produce

from rmqk import LitePullConsumer

pytestmark = pytest.mark.timeout(180)


broker = module_broker()


def produce(namesrv: str, topic: str, stdin: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli_produce(namesrv, topic, "--stdin", *extra, input=stdin)


def bodies(namesrv: str, topic: str, expect: int) -> list[str]:
    consumer = LitePullConsumer(f"read-{topic}", namesrv_addr=namesrv)
    consumer.start()
    try:
        consumer.assign(consumer.fetch_message_queues(topic))
        consumer.seek_to_beginning(*consumer.assignment())
        got: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got += [m.body.decode() for m in consumer.poll(200)]
            if len(got) >= expect:
                # Keep polling briefly: anything beyond the expected count is a duplicate.
                got += [m.body.decode() for m in consumer.poll(500)]
                break
        return sorted(got)
    finally:
        consumer.shutdown()


LINES = ['{"body": "one"}', '{"body": "two"}', "{oops", '{"body": "four"}']


@pytest.mark.parametrize("batch", ["1", "10"])
def test_bad_line_reports_exactly_what_was_sent_and_resume_does_not_duplicate(
    broker: Any, batch: str
) -> None:
    topic = f"StdinBad{batch}"
    first = produce(broker.namesrv_addr, topic, "\n".join(LINES) + "\n", "--batch", batch)
    assert first.returncode != 0
    assert "rmqk: error: stdin line 3: not JSON" in first.stderr, first.stderr
    assert "lines 1-2 were sent (2 message(s)), nothing after them" in first.stderr
    assert "tail -n +3" in first.stderr
    assert bodies(broker.namesrv_addr, topic, 2) == ["one", "two"]

    # The retry the message suggests: the fixed input from line 3 on.
    fixed = ['{"body": "three"}', LINES[3]]
    second = produce(broker.namesrv_addr, topic, "\n".join(fixed) + "\n", "--batch", batch)
    assert second.returncode == 0, second.stderr
    assert bodies(broker.namesrv_addr, topic, 4) == ["four", "one", "three", "two"]


def test_bad_first_line_sends_nothing(broker: Any) -> None:
    result = produce(broker.namesrv_addr, "StdinBadFirst", '["no body"]\n{"body": "x"}\n')
    assert result.returncode != 0
    assert 'stdin line 1: expected an object with a "body"; nothing was sent' in result.stderr


def tags_by_body(namesrv: str, topic: str, expect: int) -> dict[str, str | None]:
    consumer = LitePullConsumer(f"tags-{topic}", namesrv_addr=namesrv)
    consumer.start()
    try:
        consumer.assign(consumer.fetch_message_queues(topic))
        consumer.seek_to_beginning(*consumer.assignment())
        got: dict[str, str | None] = {}
        deadline = time.monotonic() + 10
        while len(got) < expect and time.monotonic() < deadline:
            got.update((m.body.decode(), m.tags) for m in consumer.poll(200))
        return got
    finally:
        consumer.shutdown()


def test_stdin_lines_without_tags_take_tags_round_robin(broker: Any) -> None:
    # The Nth message's tag is tags[N % len(tags)], as for generated ones; its own wins.
    lines = ['{"body": "a"}', '{"body": "b", "tags": "Own"}', '{"body": "c"}', '{"body": "d"}']
    result = produce(broker.namesrv_addr, "StdinTags", "\n".join(lines) + "\n", "--tags", "X,Y")
    assert result.returncode == 0, result.stderr
    assert tags_by_body(broker.namesrv_addr, "StdinTags", 4) == {
        "a": "X",
        "b": "Own",
        "c": "X",
        "d": "Y",
    }


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (["--stdin", "--count", "5"], "--count describe generated messages; --stdin reads"),
        (
            ["--stdin", "--count", "1000", "--size", "100"],
            "--count and --size describe generated messages; --stdin reads",
        ),
        (["--stdin", "--size", "7"], "--size describe generated messages"),
        (["--batch", "0"], "--batch must be 1 or more, got 0"),
        (["--stdin", "--batch", "-3"], "--batch must be 1 or more, got -3"),
        (["--count", "-1"], "--count must be 0 or more, got -1"),
    ],
)
def test_options_that_would_be_ignored_are_refused_before_connecting(
    options: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmqk.app.cli import main

    # An address nothing listens on: the refusal must come before any connection.
    status = main(["produce", "--namesrv", "127.0.0.1:1", "--topic", "T", *options])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith(f"rmqk: error: {error}"), err
