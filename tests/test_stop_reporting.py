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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic
from test_faults_support import produce_ids, wait_until

from rmqk.app.config import Config, load_config
from rmqk.app.runtime import ComposedConsumer, StopTally, run_config
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.listener import FailureLog
from rmqk.model.message import MessageExt
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
    # Named as a config names a function: module:function.
    assert f"listener {__name__}:_bad_order of group g-bad raised ValueError" in first.getMessage()
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
    assert final[0].startswith(
        "rmqk: stopped orders: 300 consumed, 0 failed, offsets advanced by 300 on "
    ), final[0]
    assert " queues this run, ran " in final[0], final[0]


# -- composed consumers: what the stop line and the failure lines say (issue 28 #5) --------


def _consumed(consumers: Sequence[ComposedConsumer], field: str = "consumed_ok_total") -> int:
    return sum(getattr(t, field) for c in consumers for t in c.consumer.stats.topics.values())


async def _run_until(
    config: Config, done: Callable[[Sequence[ComposedConsumer]], bool]
) -> tuple[list[StopTally], list[ComposedConsumer]]:
    """Run ``config`` in this loop until ``done``, stop it; the stop tallies."""
    import asyncio

    stop = asyncio.Event()
    running: list[ComposedConsumer] = []
    tallies: list[StopTally] = []
    task = asyncio.ensure_future(
        run_config(
            config,
            stop,
            on_started=running.extend,
            on_stopped=lambda cs: tallies.extend(c.tally() for c in cs),
        )
    )
    try:
        await wait_until(lambda: task.done() or (bool(running) and done(running)), 60, "run")
    finally:
        stop.set()
        await task
    return tallies, running


def _config(tmp_path: Path, namesrv: str, topic: str, group: str, sink: str) -> Config:
    path = tmp_path / f"{group}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [consumers.orders]
            group = "{group}"
            namesrv_addr = "{namesrv}"
            subscription = {{ {topic} = "*" }}
            consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
            suspend_current_queue_time_millis = 10
            """
        )
        + sink
    )
    return load_config(path)


async def test_the_stop_line_says_what_this_run_moved_not_the_offsets_sum(
    broker: Any, tmp_path: Path
) -> None:
    await create_topic(broker, "Moved", 4)
    # Batches of 25 go round the topic's queues: every one of the four gets messages.
    await produce_ids(broker.namesrv_addr, "Moved", range(300), batch=25)
    out = tmp_path / "out.jsonl"
    config = _config(
        tmp_path, broker.namesrv_addr, "Moved", "g-moved",
        f'sink = "jsonl"\nsink_options = {{ path = "{out}" }}\n',
    )  # fmt: skip
    (first,), _ = await _run_until(config, lambda cs: _consumed(cs) >= 300)
    # Four topic queues moved; the group's %RETRY% queue is committed but had nothing.
    assert first.line().startswith(
        "orders: 300 consumed, 0 failed, offsets advanced by 300 on 4 of 5 queues this run, ran "
    ), first.line()

    # The second run counts only its own messages, not the offsets the first one left.
    await produce_ids(broker.namesrv_addr, "Moved", range(300, 400), batch=25)
    (second,), _ = await _run_until(config, lambda cs: _consumed(cs) >= 100)
    assert second.line().startswith(
        "orders: 100 consumed, 0 failed, offsets advanced by 100 on 4 of 5 queues this run, ran "
    ), second.line()
    assert len(out.read_text().splitlines()) == 400


@pytest.mark.broker_options(delay_levels="100ms " * 18)
async def test_repeated_failures_name_the_function_the_config_names(
    broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER_LOG)
    package = tmp_path / "shop_orders_28"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(
        "def handle_batch(queue, messages):\n"
        "    if any(m.reconsume_times == 0 for m in messages):\n"
        "        raise ValueError('order has no customer')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    await create_topic(broker, "Named", 2)
    await produce_ids(broker.namesrv_addr, "Named", range(12), batch=1)
    config = _config(
        tmp_path, broker.namesrv_addr, "Named", "g-named",
        'sink = "python"\nsink_options = { function = "shop_orders_28.handlers:handle_batch" }\n',
    )  # fmt: skip
    (tally,), consumers = await _run_until(config, lambda cs: _consumed(cs) >= 12)
    # Each message moved its own queue once and, failed and sent back, the %RETRY% queue once.
    assert tally.line().startswith(
        "orders: 12 consumed, 12 failed, offsets advanced by 24 on 3 of 3 queues this run, "
    ), tally.line()

    records = [r for r in caplog.records if r.name == LISTENER_LOG]
    named = "listener shop_orders_28.handlers:handle_batch of group g-named raised ValueError"
    (first,) = [r for r in records if r.exc_info]
    assert first.getMessage().startswith(named), first.getMessage()
    repeats = [r.getMessage() for r in records if "more times" in r.getMessage()]
    assert repeats, [r.getMessage() for r in records]
    for message in repeats:
        assert message.startswith(f"{named} "), message
        assert "ComposedConsumer" not in message and "deliver" not in message
    counted = sum(int(m.split(" more times")[0].rsplit(" ", 1)[1]) for m in repeats)
    assert counted == _consumed(consumers, "consumed_failed_total") - 1


def test_a_sink_without_a_function_is_named_by_its_sink() -> None:
    from rmqk.app.runtime import sink_listener_name

    config = load_config_text(
        'group = "g"\nnamesrv_addr = "127.0.0.1:9876"\nsubscription = { T = "*" }\n'
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
    )
    assert sink_listener_name(config.consumers[0]) == "sink jsonl"


def load_config_text(table: str) -> Config:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.toml"
        path.write_text("[consumers.c]\n" + table)
        return load_config(path)
