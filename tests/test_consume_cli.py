"""``rmqk consume``: a topic's messages printed one a line, over TCP from the embedded broker."""

from __future__ import annotations

import base64
import json
import signal
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from cli_support import module_broker, produce, rmqk, start_rmqk

pytestmark = pytest.mark.timeout(180)

broker = module_broker()

LINES = [
    '{"body": "one", "tags": "A", "keys": "k1", "properties": {"p": "1"}}',
    '{"body": "two", "tags": "B", "keys": "k2"}',
    '{"body": "three\\nlines", "tags": "A", "keys": "k3"}',
]


def _produce(namesrv: str, topic: str) -> None:
    sent = produce(namesrv, topic, "--stdin", input="\n".join(LINES) + "\n")
    assert sent.returncode == 0, sent.stderr


def consume(namesrv: str, topic: str, *options: str) -> Any:
    return rmqk("consume", "--namesrv", namesrv, "--topic", topic, *options)


def test_json_from_earliest_with_count_uses_message_ext_names(broker: Any) -> None:
    _produce(broker.namesrv_addr, "ConsoleJson")
    out = consume(
        broker.namesrv_addr, "ConsoleJson", "--from", "earliest", "--count", "3", "--format", "json"
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert sorted(r["body"] for r in rows) == ["one", "three\nlines", "two"]
    one = next(r for r in rows if r["body"] == "one")
    assert set(one) == {
        "topic",
        "queue_id",
        "queue_offset",
        "msg_id",
        "tags",
        "keys",
        "properties",
        "body",
    }
    assert (one["topic"], one["tags"], one["keys"]) == ("ConsoleJson", "A", "k1")
    assert one["properties"]["p"] == "1"


def test_tags_filter_and_text_format_keeps_one_line_per_message(broker: Any) -> None:
    _produce(broker.namesrv_addr, "ConsoleTags")
    out = consume(
        broker.namesrv_addr, "ConsoleTags", "--from", "earliest", "--count", "2", "--tags", "A"
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["one", "three\\nlines"]


@pytest.mark.parametrize("form", ["epoch-ms", "iso-8601"])
def test_from_timestamp_starts_at_the_first_message_stored_since(broker: Any, form: str) -> None:
    topic = f"ConsoleTime{form.replace('-', '')}"
    _produce(broker.namesrv_addr, topic)
    # Store times are in ms: step past the first batch's before taking the time.
    time.sleep(0.01)
    since = int(time.time() * 1000)
    time.sleep(0.01)
    later = produce(
        broker.namesrv_addr, topic, "--stdin", input='{"body": "late1"}\n{"body": "late2"}\n'
    )
    assert later.returncode == 0, later.stderr
    value = str(since)
    if form == "iso-8601":
        value = datetime.fromtimestamp(since / 1000, tz=UTC).isoformat(timespec="milliseconds")
    out = consume(broker.namesrv_addr, topic, "--from", value, "--count", "2")
    assert out.returncode == 0, out.stderr
    # Had it started earlier, an older message would take one of the two places.
    assert sorted(out.stdout.splitlines()) == ["late1", "late2"]


def test_without_group_nothing_is_registered_with_the_broker(broker: Any) -> None:
    _produce(broker.namesrv_addr, "ConsoleAnon")
    out = consume(broker.namesrv_addr, "ConsoleAnon", "--from", "earliest", "--count", "3")
    assert out.returncode == 0, out.stderr
    store = broker.broker.store
    # A heartbeat of a group makes its retry topic; none came, so there is none.
    assert store.topics.get("%RETRY%rmqk-console") is None
    grouped = consume(
        broker.namesrv_addr,
        "ConsoleAnon",
        "--from",
        "earliest",
        "--count",
        "1",
        "--group",
        "console-anon-g",
    )
    assert grouped.returncode == 0, grouped.stderr
    assert store.topics.get("%RETRY%console-anon-g") is not None


def test_group_commits_what_it_printed(broker: Any) -> None:
    _produce(broker.namesrv_addr, "ConsoleGroup")
    first = consume(
        broker.namesrv_addr,
        "ConsoleGroup",
        "--from",
        "earliest",
        "--count",
        "2",
        "--group",
        "console-g",
    )
    assert first.returncode == 0, first.stderr
    second = consume(
        broker.namesrv_addr,
        "ConsoleGroup",
        "--from",
        "earliest",
        "--count",
        "1",
        "--group",
        "console-g",
    )
    assert second.returncode == 0, second.stderr
    got = first.stdout.splitlines() + second.stdout.splitlines()
    assert sorted(got) == ["one", "three\\nlines", "two"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (("--count", "0"), "argument --count: must be 1 or more, got 0"),
        (("--from", "yesterday"), "argument --from: must be earliest, latest"),
        (("--tags", "A", "--sql", "a > 1"), "argument --sql: not allowed with argument --tags"),
    ],
)
def test_bad_values_are_usage_errors_before_connecting(
    options: tuple[str, ...], error: str
) -> None:
    out = consume("127.0.0.1:1", "T", *options)
    assert out.returncode == 2
    assert f"rmqk consume: error: {error}" in out.stderr


def test_ctrl_c_stops_cleanly_after_printing_what_arrived(broker: Any) -> None:
    _produce(broker.namesrv_addr, "ConsoleInt")
    proc = start_rmqk(
        "consume", "--namesrv", broker.namesrv_addr, "--topic", "ConsoleInt", "--from", "earliest"
    )
    assert proc.stdout is not None
    # The three messages arrive; then no --count: it would wait for more until stopped.
    seen = sorted(proc.stdout.readline().rstrip("\n") for _ in range(3))
    assert seen == ["one", "three\\nlines", "two"]
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "Traceback" not in err, err


def test_bodies_that_are_not_utf8_as_the_docs_say() -> None:
    from rmqk.app.consume_tool import message_text
    from rmqk.console.commandline import message_json
    from rmqk.model.message import MessageExt

    bad = MessageExt(topic="T", body=b"a\xff\\b\r", properties={"UNIQ_KEY": "X"})
    assert message_text(bad) == "a\ufffd\\\\b\\r"
    row = json.loads(message_json(bad))
    assert row["body_encoding"] == "base64"
    assert base64.b64decode(row["body"]) == b"a\xff\\b\r"
    assert "body_encoding" not in json.loads(message_json(MessageExt(topic="T", body=b"ok")))


def test_sql_filter_on_a_broker_that_filters_and_refusal_on_one_that_does_not(
    broker: Any, broker_thread_factory: Any
) -> None:
    lines = (
        '{"body": "hit", "properties": {"a": "2"}}\n{"body": "miss", "properties": {"a": "0"}}\n'
    )
    # The module's broker has property filtering off, as Apache's default.
    assert produce(broker.namesrv_addr, "ConsoleSql", "--stdin", input=lines).returncode == 0
    refused = consume(broker.namesrv_addr, "ConsoleSql", "--from", "earliest", "--sql", "a > 1")
    assert refused.returncode == 1
    assert "refused the subscription to 'ConsoleSql' by 'a > 1'" in refused.stderr
    filtering = broker_thread_factory(enable_property_filter=True)
    assert produce(filtering.namesrv_addr, "ConsoleSql", "--stdin", input=lines).returncode == 0
    # Two lines wanted, one matches: --count 1 exits after "hit"; "miss" never shows.
    out = consume(
        filtering.namesrv_addr, "ConsoleSql", "--from", "earliest", "--count", "1", "--sql", "a > 1"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["hit"]
