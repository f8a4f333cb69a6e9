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
