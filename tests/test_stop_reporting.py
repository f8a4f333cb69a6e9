"""What a user reads when a listener fails (issue 15 #14) and when ``rmqk run`` stops (#13).

* A listener exception is logged once per kind with its traceback; repeats are
  counted, in a line now and then and one at shutdown.
* After Ctrl-C on a terminal the live summary line is erased and one final line
  per consumer says what it did.
"""

from __future__ import annotations

import logging
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from engine_support import create_topic
from test_faults_support import produce_ids, wait_until

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.listener import FailureLog
from rmqk.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

LISTENER_LOG = "rmqk.engine.listener"


def _bad_order(msgs: list[MessageExt]) -> None:
    # First deliveries fail; their retries succeed.
    if any(m.reconsume_times == 0 for m in msgs):
        raise ValueError("order has no customer")


@pytest.mark.parametrize("service", ["concurrent", "orderly"])
async def test_a_listener_failure_is_logged_once_with_its_traceback_then_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, service: str
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER_LOG)
    async with EmbeddedBroker(
        tmp_path / "broker", namesrv_port=0, broker_port=0, delay_levels="100ms " * 18
    ) as broker:
        await create_topic(broker, "Bad", 1)
        await produce_ids(broker.namesrv_addr, "Bad", range(12))
        consumer = AsyncPushConsumer(
            "g-bad",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_service=service,
            suspend_current_queue_time_millis=10,
        )
        consumer.subscribe("Bad")
        consumer.register_listener(_bad_order)
        await consumer.start()
        try:
            await wait_until(lambda: _ok(consumer) >= 12, 60, "every message consumed on retry")
        finally:
            await consumer.shutdown()

    records = [r for r in caplog.records if r.name == LISTENER_LOG]
    with_traceback = [r for r in records if r.exc_info]
    assert len(with_traceback) == 1, [r.getMessage() for r in records]
    first = with_traceback[0]
    assert first.exc_info is not None and first.exc_info[0] is ValueError
    assert "_bad_order" in first.getMessage() and "g-bad" in first.getMessage()
    assert "_bad_order" in caplog.text.split("Traceback", 1)[1]  # the frame that raised
    # Every later failure is counted, and the count reaches the log by shutdown.
    repeats = [r.getMessage() for r in records if "more times" in r.getMessage()]
    assert repeats, [r.getMessage() for r in records]
    counted = sum(int(m.split(" more times")[0].rsplit(" ", 1)[1]) for m in repeats)
    failures = sum(t.consumed_failed_total for t in consumer.stats.topics.values())
    assert counted == failures - 1


def _ok(consumer: AsyncPushConsumer) -> int:
    return sum(t.consumed_ok_total for t in consumer.stats.topics.values())


def test_repeats_are_summed_up_once_an_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LISTENER_LOG)
    failures = FailureLog("g", "mod.listener", interval=0.2)
    for _ in range(5):
        failures.report(KeyError("k"))
    failures.report(TypeError("t"))
    time.sleep(0.25)
    failures.report(KeyError("k"))  # due: 5 repeats since the first
    failures.report(KeyError("k"))
    failures.flush()
    messages = [r.getMessage() for r in caplog.records]
    assert sum(1 for r in caplog.records if r.exc_info) == 2  # one KeyError, one TypeError
    assert [m for m in messages if "more times" in m] == [
        "listener mod.listener of group g raised KeyError 5 more times like the one logged "
        "with its traceback",
        "listener mod.listener of group g raised KeyError 1 more times like the one logged "
        "with its traceback",
    ]


def test_run_on_a_terminal_ends_with_a_final_tally(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with EmbeddedBroker.run_in_thread(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        import asyncio

        asyncio.run(produce_ids(b.namesrv_addr, "Tally", range(300)))
        config = tmp_path / "tally.toml"
        config.write_text(
            textwrap.dedent(
                f"""
                [consumers.orders]
                group = "g-tally"
                namesrv_addr = "{b.namesrv_addr}"
                subscription = {{ Tally = "*" }}
                consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
                sink = "jsonl"
                sink_options = {{ path = "{out}" }}
                """
            )
        )
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "run", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            env={**os.environ, "COLUMNS": "200"},
        )
        os.close(slave)
        shown = bytearray()

        def read(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                ready, _, _ = select.select([master], [], [], 0.1)
                if ready:
                    try:
                        shown.extend(os.read(master, 65536))
                    except OSError:
                        return

        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                read(0.5)
                if out.exists() and len(out.read_text().splitlines()) >= 300:
                    break
            read(1.5)  # at least one summary line drawn
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            read(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
    text = shown.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "consumed (" in text, text  # the live line was drawn
    after_erase = text.rsplit("\x1b[K", 1)[1]
    final = [line for line in after_erase.splitlines() if line.startswith("rmqk: stopped")]
    assert len(final) == 1, text
    assert final[0].startswith("rmqk: stopped orders: 300 consumed, 0 failed, offsets committed")
    assert "(sum 300)" in final[0], final[0]
