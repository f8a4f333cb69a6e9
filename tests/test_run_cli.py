"""``rmqk produce`` and ``rmqk run`` as a user runs them: real processes, real broker."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import jsonl_consumer, module_broker, produce, rmqk, start_rmqk

pytestmark = pytest.mark.timeout(180)


broker = module_broker()


def test_produce_then_run_delivers_every_message_to_jsonl(broker: Any, tmp_path: Path) -> None:
    produced = produce(
        broker.namesrv_addr, "CliTopic", "--count", "500", "--tags", "TagA,TagB", "--batch", "50"
    )
    assert produced.returncode == 0, produced.stderr
    assert "sent 500 messages to CliTopic" in produced.stdout

    out = tmp_path / "out.jsonl"
    config = tmp_path / "consumers.toml"
    config.write_text(
        jsonl_consumer(
            "cli",
            "g-cli",
            broker.namesrv_addr,
            "CliTopic",
            out,
            tags="TagA",
            consume_message_batch_max_size=16,
        )
    )
    assert rmqk("check", str(config)).returncode == 0
    proc = start_rmqk("run", str(config))
    try:
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while time.monotonic() < deadline:
            if out.exists():
                lines = out.read_text().splitlines()
                if len(lines) >= 250:
                    break
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # Only TagA was subscribed: the tags alternate, so exactly half arrive, each once.
    assert len(records) == 250
    assert {r["tags"] for r in records} == {"TagA"}
    assert len({(r["queue_id"], r["queue_offset"]) for r in records}) == 250

    # Offsets were committed at shutdown: a second run delivers nothing new.
    proc = start_rmqk("run", str(config))
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert len(out.read_text().splitlines()) == 250


def test_run_reports_a_bad_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        '[consumers.x]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\nsubscription = {}\n'
    )
    result = rmqk("run", str(config))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert str(config) in result.stderr


def test_run_names_the_consumer_and_sink_whose_file_cannot_be_opened(tmp_path: Path) -> None:
    config = tmp_path / "proc.toml"
    config.write_text(
        '[consumers.orders]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\n'
        'subscription = { T = "*" }\nsink = "jsonl"\n'
        'sink_options = { path = "/proc/rmqk/x.jsonl" }\n'
    )
    result = rmqk("run", str(config), "--no-summary")
    assert result.returncode == 1
    assert result.stderr == (
        f'rmqk: error: {config}: [consumers.orders] sink: sink "jsonl" failed to start: '
        "FileNotFoundError: No such file or directory: /proc/rmqk\n"
    )


def test_a_refused_start_closes_the_sink_without_an_error_about_its_flusher(
    broker: Any, tmp_path: Path
) -> None:
    """examples/broadcast-jsonl.toml against a broker without --enable-property-filter."""
    assert produce(broker.namesrv_addr, "SqlRefused", "--count", "1").returncode == 0
    out = tmp_path / "out" / "audit.jsonl"
    config = tmp_path / "audit.toml"
    config.write_text(
        f'[consumers.audit]\ngroup = "audit-trail"\nnamesrv_addr = "{broker.namesrv_addr}"\n'
        'message_model = "BROADCASTING"\n'
        'subscription = { SqlRefused = { expression = "amount > 1000", type = "SQL92" } }\n'
        f'sink = "jsonl"\nsink_options = {{ path = "{out}" }}\n'
    )
    result = rmqk("run", str(config), "--no-summary")
    assert result.returncode == 1
    assert "refused the subscription to 'SqlRefused'" in result.stderr, result.stderr
    assert "flusher" not in result.stderr and "ERROR" not in result.stderr, result.stderr


def test_produce_reads_json_lines_from_stdin(broker: Any) -> None:
    lines = "\n".join(
        json.dumps({"body": {"n": i}, "tags": "J", "keys": f"k{i}"}) for i in range(20)
    )
    result = produce(broker.namesrv_addr, "StdinTopic", "--stdin", input=lines, env={**os.environ})
    assert result.returncode == 0, result.stderr
    assert "sent 20 messages" in result.stdout
    bad = produce(broker.namesrv_addr, "StdinTopic", "--stdin", input="not json\n")
    assert bad.returncode == 1 and "stdin line 1: not JSON" in bad.stderr
