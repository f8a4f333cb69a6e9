"""What docs/operations.md, config-reference.md, reliability.md and concepts.md promise, run.

The pages' other promises have tests of their own; these are the ones nothing ran: the
config reference's snippet and the pages' TOML blocks as written, the tests the pages cite,
the warnings the operations page tells an operator to watch for, the environment variables
of the logging options, how long ``rmqk run`` waits for a write under way when stopped, how
the supervisor restarts a worker and what it does with one that does not stop, and
``ack_index``. Brokers are embedded ones on free loopback ports; the CLI runs in
subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import produce, rmqk, start_rmqk
from engine_support import create_topic, push_consumer, wait_for
from engine_support import produce as produce_async
from test_option_effects import BrokerRequests

from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SENDS = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)

pytestmark = pytest.mark.timeout(180)


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", _page(page), re.M | re.S)


# -- snippets as written ------------------------------------------------------------------


def test_config_reference_option_snippet_raises_the_error_the_page_shows(tmp_path: Path) -> None:
    (code,) = blocks("config-reference.md", "python")
    (shown,) = blocks("config-reference.md", "text")
    call = re.search(
        r"^`(load_options\(BatchSinkOptions, .*?\))`\nraises", _page("config-reference.md"), re.M
    )
    assert call is not None, "the page no longer shows the call whose error it quotes"
    script = tmp_path / "batch_sink.py"
    script.write_text(
        code
        + "\nfrom rmqk.model.errors import ConfigError\n"
        + f"try:\n    {call.group(1)}\nexcept ConfigError as exc:\n    print(exc)\n"
        # The class as a factory would use it: its own check refuses an odd number.
        + 'try:\n    BatchSink({"path": "out.txt", "pairs": 3})\n'
        + "except ConfigError as exc:\n    print(exc.problems[0])\n"
        + 'print(BatchSink({"path": "out.txt", "pairs": 4}).options)\n'
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    *error, odd, options = run.stdout.rstrip("\n").split("\n")
    assert "\n".join(error) == shown.rstrip("\n")
    assert odd == "<sink_options>: [batch] pairs: must be even, got 3"
    assert "batch_rows=1000" in options and "mode='append'" in options and "pairs=4" in options


def test_every_toml_block_of_the_pages_is_accepted(tmp_path: Path) -> None:
    operations = blocks("operations.md", "toml")
    (consumer_table,) = blocks("config-reference.md", "toml")
    assert len(operations) == 2, "operations.md: the processes and [prometheus] blocks"
    processes, prometheus = operations
    assert prometheus.startswith("[prometheus]")
    for name, text in {
        "config-reference": consumer_table,
        "processes": processes,
        # A [prometheus] table goes beside the consumers of a file.
        "prometheus": consumer_table + "\n" + prometheus,
    }.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        check = rmqk("check", str(path), cwd=tmp_path)
        assert check.returncode == 0, (name, check.stderr)
    # What check prints composes the same consumers: the processes block keeps its 4 workers.
    resolved = rmqk("check", str(tmp_path / "processes.toml"), cwd=tmp_path).stdout
    assert re.search(r"^processes = 4\s+# file$", resolved, re.M), resolved

    from rmqk.plugins.broker.acl import load_acl_config

    (acl,) = blocks("reliability.md", "toml")
    path = tmp_path / "plain_acl.toml"
    path.write_text(acl)
    config = load_acl_config(path)
    (account,) = config.accounts
    assert account.access_key == "RocketMQ" and account.default_topic_perm == "DENY"
    assert config.global_white_remote_addresses == ("10.10.103.*",)


# -- logging ------------------------------------------------------------------------------


def _status_of_nothing(**env: str) -> subprocess.CompletedProcess[str]:
    # A name server that is not there: the transport logs a WARNING for it.
    return rmqk(
        "status", "--namesrv", "127.0.0.1:1", "--group", "g", "--timeout", "1",
        env={**os.environ, **env},
    )  # fmt: skip


def test_log_level_and_format_come_from_the_environment_and_options_win() -> None:
    as_json = _status_of_nothing(RMQK_LOG_FORMAT="json")
    records = [json.loads(line) for line in as_json.stderr.splitlines() if line.startswith("{")]
    assert records and all(r["level"] == "WARNING" for r in records), as_json.stderr

    quiet = _status_of_nothing(RMQK_LOG_FORMAT="json", RMQK_LOG_LEVEL="error")
    assert "WARNING" not in quiet.stderr, quiet.stderr

    text = rmqk(
        "status", "--namesrv", "127.0.0.1:1", "--group", "g", "--timeout", "1",
        "--log-format", "text", "--log-level", "warning",
        env={**os.environ, "RMQK_LOG_FORMAT": "json", "RMQK_LOG_LEVEL": "error"},
    )  # fmt: skip
    assert re.search(r"^\S+ \S+ WARNING rmqk\.remoting", text.stderr, re.M), text.stderr
    assert "{" not in text.stderr


def _watched_warnings() -> list[re.Pattern[str]]:
    """The messages the operations page lists under "What to watch for at WARNING"."""
    section = _page("operations.md").split("What to watch for at WARNING:", 1)[1]
    section = section.split("\n## ", 1)[0]
    quoted = re.findall(r"^\* `(.*?)`:", section, re.M | re.S)
    patterns = []
    for text in quoted:
        text = " ".join(text.split())
        parts = re.split(r"(<[a-z ]+>|\.\.\.)", text)
        regex = "".join(".+?" if p.startswith("<") or p == "..." else re.escape(p) for p in parts)
        patterns.append(re.compile(regex))
    return patterns


async def test_the_warnings_to_watch_for_are_logged_as_the_page_quotes_them(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    watched = _watched_warnings()
    assert len(watched) == 3
    said_at_info = re.search(r"^Not a WARNING: `(.*?)`", _page("operations.md"), re.M)
    assert said_at_info is not None
    flow_notice = re.compile(
        re.escape(said_at_info[1]).replace(r"<n>", r"\d+").replace(r"\.\.\.", ".+")
    )
    await create_topic(broker, "Watched", 1)
    await produce_async(broker.namesrv_addr, "Watched", (b"w%d" % i for i in range(64)))

    seen = BrokerRequests(broker)
    first_pull_refused = False

    async def refuse_once(request: RemotingCommand) -> RemotingCommand:
        nonlocal first_pull_refused
        first_pull_refused = True
        del seen.answer[RequestCode.PULL_MESSAGE]
        return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, "test refusal")

    async def refuse(request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, "test refusal")

    # The first pull is refused, then pulls are served; every send-back is refused, and so
    # is the consumer's re-publishing of the message to its retry topic (Java's fallback).
    seen.answer[RequestCode.PULL_MESSAGE] = refuse_once
    for code in (RequestCode.CONSUMER_SEND_MSG_BACK, *SENDS):
        seen.answer[code] = refuse

    calls = 0

    async def slow_listener(msgs: list[Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("the first batch fails")
        await asyncio.sleep(0.05)

    c = push_consumer(
        broker,
        "g-watched",
        pull_threshold_for_queue=1,
        consume_message_batch_max_size=1,
        pull_time_delay_mills_when_exception=100,
    )
    c.subscribe("Watched")
    c.register_listener(slow_listener)
    caplog.set_level(logging.INFO, logger="rmqk")

    def missing() -> list[re.Pattern[str]]:
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        return [p for p in watched if not any(p.match(m) for m in messages)]

    await c.start()
    try:
        await wait_for(lambda: not missing(), 30, "every watched warning")
    finally:
        await c.shutdown()
    assert first_pull_refused
    # The flow-control notice the page says is not a WARNING: said, at INFO.
    assert c.flow.events > 0
    said = [r for r in caplog.records if flow_notice.match(r.getMessage())]
    assert said and all(r.levelno == logging.INFO for r in said)


# -- stopping -----------------------------------------------------------------------------

SLOW_HANDLER = """
import time
from pathlib import Path

HERE = Path(__file__).parent


def write(queue, messages):
    (HERE / "entered").touch()
    time.sleep({seconds})
    with open(HERE / "written.txt", "a") as out:
        for m in messages:
            out.write(f"{{m.queue_id}} {{m.queue_offset}}\\n")
"""


def _slow_python_sink(
    folder: Path, namesrv: str, topic: str, seconds: float, extra: str = ""
) -> Path:
    (folder / "handlers.py").write_text(SLOW_HANDLER.format(seconds=seconds))
    config = folder / "consumers.toml"
    config.write_text(
        textwrap.dedent(
            f"""\
            [consumers.slow]
            group = "g-{topic}"
            namesrv_addr = "{namesrv}"
            subscription = {{ {topic} = "*" }}
            consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
            sink = "python"
            sink_options = {{ function = "handlers:write" }}
            """
        )
        + extra
    )
    return config


def _wait_for_file(path: Path, seconds: float, lines: int = 0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear (with {lines} lines) within {seconds} s")


def test_rmqk_run_stopped_mid_write_waits_for_it_and_commits_it(
    broker_thread: Any, tmp_path: Path
) -> None:
    # operations.md, "rmqk run": a stop waits for the writes under way (30 s under rmqk run,
    # where Java's default would give up at once), acknowledges them and commits: the next
    # run writes none of them again.
    ns = broker_thread.namesrv_addr
    sent = produce(ns, "SlowStop", "--count", "20")
    assert sent.returncode == 0, sent.stderr
    config = _slow_python_sink(tmp_path, ns, "SlowStop", seconds=1.5)
    written = tmp_path / "written.txt"

    run = start_rmqk("run", str(config), cwd=tmp_path)
    try:
        _wait_for_file(tmp_path / "entered", 60)
        began = time.monotonic()
    finally:
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    stopped_after = time.monotonic() - began
    assert run.returncode == 0, err
    assert stopped_after >= 1.0, "the stop did not wait for the write under way"
    first = written.read_text().splitlines()
    assert first and len(set(first)) == len(first), first

    # The second run gets only what the first had not written, and one new message.
    again = start_rmqk("run", str(config), cwd=tmp_path)
    try:
        late = produce(ns, "SlowStop", "--count", "1")
        assert late.returncode == 0, late.stderr
        _wait_for_file(written, 60, lines=21)
        time.sleep(1.0)  # a message written twice would arrive meanwhile
    finally:
        again.send_signal(signal.SIGINT)
        _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    every = written.read_text().splitlines()
    assert len(every) == 21 and len(set(every)) == 21, every


SUPERVISE = """
import sys

from rmqk.app.supervisor import Supervisor, SupervisorSettings, worker_identities
from rmqk.app.worker import WorkerJob

if __name__ == "__main__":
    config, cwd = sys.argv[1], sys.argv[2]
    jobs = [WorkerJob(config, i, cwd=cwd) for i in worker_identities([("slow", 1)])]
    sys.exit(Supervisor(jobs, SupervisorSettings(stop_timeout=2)).run())
"""


def test_a_worker_still_running_after_the_stop_timeout_is_killed_and_the_run_exits_1(
    broker_thread: Any, tmp_path: Path
) -> None:
    # operations.md, "Running with several processes": one still running 60 s after the stop
    # is killed and the exit status is 1. The default is the page's; the run uses 2 s.
    from rmqk.app.supervisor import SupervisorSettings

    assert SupervisorSettings().stop_timeout == 60.0
    ns = broker_thread.namesrv_addr
    assert produce(ns, "StuckStop", "--count", "1").returncode == 0
    # The worker itself would wait 10 minutes for its write.
    config = _slow_python_sink(
        tmp_path,
        ns,
        "StuckStop",
        seconds=600,
        extra="await_termination_millis_when_shutdown = 600000\n",
    )
    script = tmp_path / "supervise.py"
    script.write_text(SUPERVISE)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(config), str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_file(tmp_path / "entered", 60)
        began = time.monotonic()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert 2.0 <= time.monotonic() - began < 30
    killed = re.search(
        r"rmqk: error: worker slow#0 \(pid (\d+)\) did not stop within 2 s and was killed", err
    )
    assert killed, err
    assert not (tmp_path / "written.txt").exists()
    # The worker the message names is gone (or a zombie until init reaps it). Not every
    # child of the supervisor: multiprocessing's resource tracker may outlive it briefly.
    stat = Path(f"/proc/{killed.group(1)}/stat")

    def state() -> str:
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    deadline = time.monotonic() + 10
    while state() not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state() in ("gone", "Z")


# -- the tests the pages cite -------------------------------------------------------------


def test_every_test_the_pages_cite_exists() -> None:
    # "Shown by: tests/x.py::test_y" is a promise too: a renamed test must not leave the page
    # pointing at nothing. A bare "::test_y" is in the file named last before it.
    cited = 0
    for page in ("reliability.md", "operations.md", "concepts.md", "cli.md"):
        current: str | None = None
        for match in re.finditer(r"`(tests/[\w/]+\.py)?(::\w+)?`", _page(page)):
            path, name = match.groups()
            if path:
                current = path
                assert (ROOT / path).is_file(), (page, path)
            if name:
                assert current is not None, (page, name)
                source = (ROOT / current).read_text()
                found = re.search(rf"^(async )?def {name[2:]}\(", source, re.M)
                assert found, (page, current, name)
                cited += 1
    assert cited >= 40


def test_a_dying_worker_is_restarted_after_doubling_delays_then_given_up_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # operations.md: restarted after 1 s, then 2, 4, ... up to 30 s; given up on after 5
    # deaths within 10 s of the start. The defaults are the page's; the run scales them down.
    from rmqk.app.supervisor import Supervisor, SupervisorSettings, worker_identities
    from rmqk.app.worker import WorkerJob

    defaults = SupervisorSettings()
    assert (defaults.restart_delay, defaults.restart_delay_max) == (1.0, 30.0)
    assert (defaults.stable_after, defaults.give_up_after) == (10.0, 5)
    settings = SupervisorSettings(
        restart_delay=0.1, restart_delay_max=0.3, stable_after=10, give_up_after=5, stop_timeout=10
    )
    jobs = [WorkerJob(str(tmp_path / "gone.toml"), i) for i in worker_identities([("x", 1)])]
    caplog.set_level(logging.WARNING, logger="rmqk.supervisor")
    assert Supervisor(jobs, settings).run() == 1
    delays = [
        float(m.group(1))
        for r in caplog.records
        if (m := re.search(r"restarting it in ([\d.]+) s$", r.getMessage()))
    ]
    assert delays == [0.1, 0.2, 0.3, 0.3]


STABLE = """
import logging, sys

from rmqk.app.supervisor import Supervisor, SupervisorSettings, worker_identities
from rmqk.app.worker import WorkerJob

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    config, cwd = sys.argv[1], sys.argv[2]
    jobs = [WorkerJob(config, i, cwd=cwd) for i in worker_identities([("w", 1)])]
    settings = SupervisorSettings(restart_delay=0.1, stable_after=1.0, stop_timeout=20)
    sys.exit(Supervisor(jobs, settings).run())
"""


def test_a_worker_that_lived_past_its_start_is_restarted_after_the_first_delay_again(
    broker_thread: Any, tmp_path: Path
) -> None:
    # "one that lived 10 s counts as started and its next failure waits 1 s again": killed
    # three times, each after it outlived stable_after, it never waits more than the first delay.
    config = tmp_path / "w.toml"
    config.write_text(
        "[consumers.w]\n"
        'group = "g-stable"\n'
        f'namesrv_addr = "{broker_thread.namesrv_addr}"\n'
        'subscription = { Stable = "*" }\n'
        'sink = "jsonl"\n'
        'sink_options = { path = "out.jsonl" }\n'
    )
    script = tmp_path / "stable.py"
    script.write_text(STABLE)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(config), str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed: list[int] = []
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + 60
        while len(killed) < 3 and time.monotonic() < deadline:
            alive = [int(c) for c in children.read_text().split() if int(c) not in killed]
            workers = [c for c in alive if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
            if workers:
                time.sleep(1.5)  # past stable_after
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert len(killed) == 3, err
    assert proc.returncode == 0, err
    delays = re.findall(r"restarting it in ([\d.]+) s", err)
    assert delays == ["0.1"] * 3, err


# -- concepts.md ----------------------------------------------------------------------------


async def test_ack_index_sends_back_only_the_messages_after_it(broker: Any) -> None:
    # concepts.md, "Delivery guarantees": a listener that fails on part of a batch has the
    # whole batch retried unless it set context.ack_index. Messages 0 and 1 are acknowledged,
    # 2 and 3 come back once through %RETRY%<group>, and nothing else is delivered again.
    from rmqk import ConsumeStatus

    await create_topic(broker, "AckIndex", 1)
    # The retry topic's route exists before the start, so its queue is held at once.
    await create_topic(broker, "%RETRY%g-ack-index", 1)
    await produce_async(broker.namesrv_addr, "AckIndex", (b"m%d" % i for i in range(4)))
    seen: list[tuple[bytes, int, int]] = []

    def listener(msgs: list[Any], context: Any) -> ConsumeStatus:
        seen.extend((m.body, m.reconsume_times, len(msgs)) for m in msgs)
        if msgs[0].reconsume_times == 0:
            context.ack_index = 1
            context.delay_level_when_next_consume = 1  # 1 s, not the default 10 s
        return ConsumeStatus.CONSUME_SUCCESS

    c = push_consumer(broker, "g-ack-index", consume_message_batch_max_size=4)
    c.subscribe("AckIndex")
    c.register_listener(listener)
    await c.start()
    try:
        await wait_for(lambda: len(seen) >= 6, 30, "the two messages past ack_index again")
        await asyncio.sleep(1.5)  # anything sent back wrongly would come back by now
    finally:
        await c.shutdown()
    assert seen[:4] == [(b"m%d" % i, 0, 4) for i in range(4)], seen
    assert sorted((body, times) for body, times, _ in seen[4:]) == [(b"m2", 1), (b"m3", 1)], seen
