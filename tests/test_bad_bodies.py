"""A body a sink cannot parse is kept, counted, or stops the consumer (issue 25 #4).

With ``body_format = "json"`` the ``jsonl`` and ``spark`` sinks keep a body that
does not parse raw in the corrupt-record column (``_corrupt_record``), its body
columns null; they count it (``rmqk_bad_bodies_total``, the line ``rmqk run``
stops with), and with ``on_bad_body = "fail"`` they stop the consumer with an
error naming the message, its offset left uncommitted and nothing sent back.

The end-to-end tests run over real TCP against the embedded broker. The Spark
ones (marked ``spark``) share one session and run the docs/spark.md sink block
against text bodies, the issue's own scenario.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_support import rmqk
from engine_support import admin_transport, committed_offsets, create_topic, produce
from spark_support import spark_session  # noqa: F401  (the spark fixture)

from rmqk.app.config import load_config
from rmqk.app.runtime import ComposedConsumer, run_config
from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError, SinkHalted
from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.sinks.jsonl_options import parse_jsonl_options
from rmqk.plugins.sinks.records import message_record

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "Orders"
QUEUE = MessageQueue(TOPIC, "broker-a", 0)


def _msg(offset: int, body: bytes) -> MessageExt:
    return MessageExt(
        topic=TOPIC,
        body=body,
        queue_id=0,
        queue_offset=offset,
        born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_500,
        store_host="127.0.0.1:10911",
        properties={"TAGS": "paid", "UNIQ_KEY": f"ID-{offset}"},
    )


# -- the jsonl sink's records and options (no broker) ----------------------------------------


def test_jsonl_records_keep_a_body_that_is_not_json_raw() -> None:
    good = message_record(QUEUE, _msg(0, b'{"id": 1}'), "json")
    assert (good["body"], good["_corrupt_record"]) == ({"id": 1}, None)
    # Any JSON document parses (the jsonl sink has no schema), a string or null too.
    assert message_record(QUEUE, _msg(1, b'"x"'), "json")["body"] == "x"
    null = message_record(QUEUE, _msg(2, b"null"), "json")
    assert (null["body"], null["_corrupt_record"]) == (None, None)
    for raw in (b"Hello RocketMQ 3", b"", b'{"id": 1', b"{'id': 1}"):
        bad = message_record(QUEUE, _msg(3, raw), "json")
        assert (bad["body"], bad["_corrupt_record"]) == (None, raw.decode()), raw
        assert "_corrupt_record_base64" not in bad
    # JSON inside bytes that are not UTF-8: not JSON (RFC 8259); kept whole, as base64.
    raw = b'{"id": "\xff"}'
    bad = message_record(QUEUE, _msg(4, raw), "json", "raw_body")
    assert (bad["body"], bad["raw_body_base64"]) == (None, True)
    assert base64.b64decode(bad["raw_body"]) == raw
    # Other body formats have no corrupt-record key: nothing is parsed.
    assert "_corrupt_record" not in message_record(QUEUE, _msg(5, b"x"), "text")


def test_bad_body_options_are_checked() -> None:
    opts = parse_jsonl_options({"path": "o", "body_format": "json"})
    assert (opts.on_bad_body, opts.corrupt_record_column) == ("keep", "_corrupt_record")
    cases = {
        "on_bad_body: must be one of keep, fail, got 'drop'": {
            "body_format": "json",
            "on_bad_body": "drop",
        },
        "on_bad_body: only used with body_format = 'json'": {"on_bad_body": "fail"},
        "corrupt_record_column: 'body' is a key every record has": {
            "body_format": "json",
            "corrupt_record_column": "body",
        },
        "corrupt_record_column: must be a column name": {
            "body_format": "json",
            "corrupt_record_column": "raw body",
        },
    }
    for expected, options in cases.items():
        with pytest.raises(ConfigError) as raised:
            parse_jsonl_options({"path": "o", **options})
        assert expected in str(raised.value), raised.value
    # The spark sink's, checked the same way (no Spark needed to parse them).
    from rmqk.plugins.spark.options import parse_sink_options

    json_sink = {"path": "o", "body_format": "json", "body_schema": "order_id STRING"}
    spark_cases = {
        "on_bad_body: must be one of keep, fail, got 'drop'": {**json_sink, "on_bad_body": "drop"},
        "on_bad_body: only used with body_format = 'json'": {"path": "o", "on_bad_body": "keep"},
        "corrupt_record_column: 'order_id' clashes with the column of that name": {
            **json_sink,
            "corrupt_record_column": "order_id",
        },
        "corrupt_record_column: 'tags' clashes": {**json_sink, "corrupt_record_column": "tags"},
    }
    for expected, options in spark_cases.items():
        with pytest.raises(ConfigError) as raised:
            parse_sink_options(options)
        assert expected in str(raised.value), raised.value


def test_rmqk_check_refuses_a_bad_on_bad_body(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[consumers.c]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9"\nsubscription = { T = "*" }\n'
        'sink = "jsonl"\n'
        'sink_options = { path = "o.jsonl", body_format = "json", on_bad_body = "skip" }\n'
    )
    done = rmqk("check", str(config))
    assert done.returncode != 0
    assert "on_bad_body: jsonl: must be one of keep, fail, got 'skip'" in done.stderr


def test_the_new_options_are_in_the_generated_reference() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import rmqk_reference
    finally:
        sys.path.pop(0)
    jsonl = rmqk_reference.plugin_options().split("### sink_options of the jsonl sink", 1)[1]
    jsonl = jsonl.split("###", 1)[0]
    # The committed pages too (rewritten by python docs/_ext/rmqk_reference.py --write).
    config_page = (ROOT / "docs" / "config-reference.md").read_text()
    committed = config_page.split("### sink_options of the jsonl sink", 1)[1].split("###", 1)[0]
    spark_page = (ROOT / "docs" / "spark.md").read_text()
    for text in (jsonl, rmqk_reference.spark_sink_options(), committed, spark_page):
        assert "| `on_bad_body` |" in text and "| `corrupt_record_column` |" in text
        assert '| `"_corrupt_record"` |' in text


# -- end to end over TCP: the jsonl sink -----------------------------------------------------


def _bodies(n: int) -> list[bytes]:
    """Every third body text (a quickstart-like order line), the others JSON orders."""
    return [
        f"order {i} paid".encode() if i % 3 == 0 else json.dumps({"id": i}).encode()
        for i in range(n)
    ]


def _config(tmp_path: Path, namesrv: str, group: str, sink_options: str, sink: str) -> Path:
    path = tmp_path / f"{group}.toml"
    path.write_text(
        f'[consumers.c]\ngroup = "{group}"\nnamesrv_addr = "{namesrv}"\n'
        f'subscription = {{ {TOPIC} = "*" }}\nconsume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        f'consume_message_batch_max_size = 8\nsink = "{sink}"\n'
        f"[consumers.c.sink_options]\n{sink_options}\n"
    )
    return path


class Run:
    """``run_config`` of one config in a task, with its consumers and their tallies."""

    def __init__(self, config: Path) -> None:
        self.stop = asyncio.Event()
        self.running: list[ComposedConsumer] = []
        self.lines: list[str] = []
        self.task = asyncio.get_running_loop().create_task(
            run_config(load_config(config), self.stop, None, self._started, self._stopped)
        )

    def _started(self, consumers: Sequence[ComposedConsumer]) -> None:
        self.running.extend(consumers)

    def _stopped(self, consumers: Sequence[ComposedConsumer]) -> None:
        self.lines.extend(c.tally().line() for c in consumers)


async def _until(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture
async def broker(tmp_path: Path) -> Any:
    async with EmbeddedBroker(tmp_path / "broker", namesrv_port=0, broker_port=0) as b:
        await create_topic(b, TOPIC, 2)
        yield b


def _metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_jsonl_keeps_every_bad_body_raw_and_counts_it(
    broker: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    from rmqk.plugins.prometheus.metrics import RmqkMetrics

    bodies = _bodies(90)
    await produce(broker.namesrv_addr, TOPIC, bodies, batch=16)
    out = tmp_path / "out.jsonl"
    config = _config(
        tmp_path,
        broker.namesrv_addr,
        "g-keep",
        f'path = "{out}"\nbody_format = "json"',
        "jsonl",
    )
    run = Run(config)
    await _until(lambda: len(_records(out)) >= len(bodies), "every message written")
    metrics = RmqkMetrics(timeout_s=10)
    metrics.collector.track(run.running[0].consumer, asyncio.get_running_loop())
    scraped = (await asyncio.to_thread(generate_latest, metrics.registry)).decode()
    run.stop.set()
    await run.task

    records = _records(out)
    assert len(records) == len(bodies)  # each message once
    by_body: dict[bytes, dict[str, Any]] = {}
    for r in records:
        raw = r["_corrupt_record"]
        key = raw.encode() if raw is not None else json.dumps(r["body"]).encode()
        by_body[key] = r
    assert set(by_body) == set(bodies)
    bad = [b for b in bodies if not b.startswith(b"{")]
    for body in bodies:
        r = by_body[body]
        if body in bad:
            assert r["body"] is None and r["_corrupt_record"] == body.decode()
        else:
            assert r["body"] == json.loads(body) and r["_corrupt_record"] is None
    assert _metric(scraped, "rmqk_bad_bodies_total", group="g-keep", topic=TOPIC) == len(bad)
    assert f", {len(bad)} bad bodies kept raw," in run.lines[0], run.lines
    warned = [r for r in caplog.records if r.name == "rmqk.plugins.sinks.jsonl"]
    assert warned and all(r.levelno == logging.WARNING for r in warned)
    first = warned[0].getMessage()
    assert "are not JSON, kept raw in _corrupt_record (the first: message " in first, first
    assert f"topic {TOPIC}, queue " in first and "not JSON (Expecting value" in first, first


@pytest.mark.parametrize("service", ["concurrent", "orderly"])
async def test_jsonl_fail_stops_the_consumer_and_leaves_the_offset(
    broker: Any, tmp_path: Path, service: str
) -> None:
    # One queue written in order: good, good, then a text body, then more good ones.
    transport = await admin_transport(broker.namesrv_addr)
    try:
        await transport.create_topic(broker.broker_addr, "Single", 1, 1)
    finally:
        await transport.close()
    await _until_routed(broker, "Single")
    bodies = [b'{"id": 0}', b'{"id": 1}', b"order 2 paid", b'{"id": 3}', b'{"id": 4}']
    await produce(broker.namesrv_addr, "Single", bodies, batch=1)
    out = tmp_path / "out.jsonl"
    sink_options = f'path = "{out}"\nbody_format = "json"\non_bad_body = "fail"'
    config = _config(tmp_path, broker.namesrv_addr, "g-fail", sink_options, "jsonl")
    config.write_text(
        config.read_text()
        .replace(f"{TOPIC} = ", "Single = ")
        .replace('sink = "jsonl"', f'consume_service = "{service}"\nsink = "jsonl"')
    )
    # rmqk run, as a user runs it: it stops on its own, exit code 1, the error last.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rmqk.cli", "run", str(config), "--log-level", "INFO",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    stderr = err.decode()
    assert proc.returncode == 1, stderr
    text = stderr.strip().splitlines()[-1]
    assert text.startswith("rmqk: error: jsonl sink: the body of message "), stderr
    for part in ("topic Single", "queue ", "/0, offset 2)", "not JSON", "on_bad_body = 'fail'"):
        assert part in text, text
    assert re.search(r"message [0-9A-F]{32} ", text), text  # the producer's message id
    stopped = [line for line in stderr.splitlines() if "consumer stopped: c:" in line]
    assert len(stopped) == 1 and "halted by its sink: jsonl sink:" in stopped[0], stderr
    # Nothing from the bad body on: not written, not committed, not sent back.
    written = [r["queue_offset"] for r in _records(out)]
    assert written == sorted(written) and all(o < 2 for o in written), written
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-fail", "Single", 1
    )
    assert committed[0] is not None and committed[0] <= 2, committed
    back = await _sent_back(broker, "g-fail")
    assert not back, f"{back} messages sent back"
    assert " 0 failed," in stopped[0], stopped

    # Fixed by keeping bad bodies: the same group starts at the bad body, keeps it raw.
    config.write_text(config.read_text().replace('on_bad_body = "fail"', 'on_bad_body = "keep"'))
    run = Run(config)
    await _until(lambda: {r["queue_offset"] for r in _records(out)} >= set(range(5)), "the rest")
    run.stop.set()
    await run.task
    records = [r for r in _records(out) if r["queue_offset"] == 2]
    assert len(records) == 1 and records[0]["_corrupt_record"] == "order 2 paid"


async def test_a_halt_with_consume_hooks_leaves_the_offset_too(
    broker: Any, tmp_path: Path, pm: Any
) -> None:
    """The consume hooks' path (a metrics plugin, say) treats the halt the same."""
    from rmqk import hookimpl

    seen: list[bool] = []

    class Watcher:
        @hookimpl
        def rmqk_consume_message_after(self, context: Any) -> None:
            seen.append(bool(context.success))

    pm.register(Watcher(), name="bad-body-watcher")
    await _single_topic(broker, [b'{"id": 0}', b"order 1 paid", b'{"id": 2}'])
    out = tmp_path / "out.jsonl"
    sink_options = f'path = "{out}"\nbody_format = "json"\non_bad_body = "fail"'
    config = _config(tmp_path, broker.namesrv_addr, "g-hooked", sink_options, "jsonl")
    config.write_text(config.read_text().replace(f"{TOPIC} = ", "Single = "))
    run = Run(config)
    with pytest.raises(SinkHalted, match=r"offset 1\) does not parse"):
        await asyncio.wait_for(run.task, 120)
    assert False in seen  # the hooks saw the refused batch fail
    assert all(r["queue_offset"] < 1 for r in _records(out))
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-hooked", "Single", 1
    )
    assert committed[0] is None or committed[0] <= 1, committed
    assert not await _sent_back(broker, "g-hooked")


async def _single_topic(broker: Any, bodies: list[bytes]) -> None:
    """Topic Single, one queue, ``bodies`` sent to it in order."""
    transport = await admin_transport(broker.namesrv_addr)
    try:
        await transport.create_topic(broker.broker_addr, "Single", 1, 1)
    finally:
        await transport.close()
    await _until_routed(broker, "Single")
    await produce(broker.namesrv_addr, "Single", bodies, batch=1)


def test_a_halted_worker_ends_the_supervised_run_with_the_error(
    broker_thread: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under processes = N a halt ends the run: a restarted worker would meet the same body."""
    from rmqk.app.supervisor import Supervisor, SupervisorSettings, worker_identities
    from rmqk.app.worker import WorkerJob

    async def setup() -> None:
        await create_topic(broker_thread, "Single", 1)
        await produce(broker_thread.namesrv_addr, "Single", [b'{"id": 0}', b"order 1"])

    asyncio.run(setup())
    out = tmp_path / "out.jsonl"
    sink_options = f'path = "{out}"\nbody_format = "json"\non_bad_body = "fail"'
    config = _config(tmp_path, broker_thread.namesrv_addr, "g-w", sink_options, "jsonl")
    config.write_text(config.read_text().replace(f"{TOPIC} = ", "Single = "))
    jobs = [WorkerJob(str(config), identity) for identity in worker_identities([("c", 1)])]
    settings = SupervisorSettings(restart_delay=0.05, give_up_after=5, stop_timeout=30)
    assert Supervisor(jobs, settings).run() == 1
    err = capsys.readouterr().err
    assert "restarting it" not in err, err
    assert "rmqk: error: jsonl sink: the body of message " in err, err
    assert "offset 1) does not parse" in err, err
    committed = asyncio.run(
        committed_offsets(broker_thread.namesrv_addr, broker_thread.broker_addr, "g-w", "Single", 1)
    )
    assert committed[0] is None or committed[0] <= 1, committed


def test_supervised_workers_count_bad_bodies_in_the_final_tally(
    broker_thread: Any, tmp_path: Path
) -> None:
    """Under processes = N the group's final line sums every worker's bad bodies."""
    bodies = _bodies(60)
    bad = sum(1 for b in bodies if not b.startswith(b"{"))

    async def setup() -> None:
        await create_topic(broker_thread, TOPIC, 4)
        await produce(broker_thread.namesrv_addr, TOPIC, bodies, batch=8)

    asyncio.run(setup())
    out = tmp_path / "out.jsonl"
    config = _config(
        tmp_path, broker_thread.namesrv_addr, "g-sup", f'path = "{out}"\nbody_format = "json"',
        "jsonl",
    )  # fmt: skip
    config.write_text(config.read_text().replace('sink = "jsonl"', 'processes = 2\nsink = "jsonl"'))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqk.cli", "run", str(config)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def written() -> int:
            return sum(len(_records(f)) for f in tmp_path.glob("out.w*.jsonl"))

        deadline = time.monotonic() + 120
        while written() < len(bodies):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"only {written()} of {len(bodies)} written"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    kept = [
        r
        for f in tmp_path.glob("out.w*.jsonl")
        for r in _records(f)
        if r["_corrupt_record"] is not None
    ]
    assert len(kept) == bad
    tally = [line for line in err.splitlines() if line.startswith("rmqk: c: ")]
    assert len(tally) == 1, err
    assert f"{len(bodies)} consumed, 0 failed, {bad} bad bodies kept raw, by 2 worker" in tally[0]


async def _until_routed(broker: Any, topic: str) -> None:
    transport = await admin_transport(broker.namesrv_addr)
    try:
        for _ in range(200):
            if await transport.get_route(topic) is not None:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no route for {topic}")
    finally:
        await transport.close()


async def _sent_back(broker: Any, group: str) -> int:
    """Messages of ``group`` sent back: stored in its retry topic or waiting in the delay
    topic's queues (a sent-back message waits there first). Asked of the broker itself."""
    transport = await admin_transport(broker.namesrv_addr)
    queues = [MessageQueue(f"%RETRY%{group}", broker.broker_name, 0)]
    queues += [MessageQueue("SCHEDULE_TOPIC_XXXX", broker.broker_name, q) for q in range(18)]
    total = 0
    try:
        for mq in queues:
            try:
                total += await transport.get_max_offset(broker.broker_addr, mq)
            except Exception as exc:
                if "not exist" not in str(exc).lower():
                    raise
    finally:
        await transport.close()
    return total


# -- the spark sink ---------------------------------------------------------------------------

# One flush, mixed: what each body becomes, by offset: (order_id, amount, _corrupt_record).
SPARK_BODIES: list[tuple[bytes, tuple[Any, Any, Any]]] = [
    (b'{"order_id": "a", "amount": 1.5}', ("a", 1.5, None)),
    (b'{"amount": 2, "extra": [1]}', (None, 2.0, None)),  # a missing field is null
    (b"order 2 paid", (None, None, "order 2 paid")),  # text
    (b"", (None, None, "")),  # empty: from_json gives no row at all
    (b'[{"order_id": "x"}]', (None, None, '[{"order_id": "x"}]')),  # not an object
    (b'"a string"', (None, None, '"a string"')),
    # A value that does not fit its type: Spark would keep order_id; here nothing is kept.
    (b'{"order_id": "y", "amount": "x"}', (None, None, '{"order_id": "y", "amount": "x"}')),
    (b'{"order_id": "b",\n "amount": 3.0}', ("b", 3.0, None)),
]
# Not UTF-8: kept as the bytes came (read back as binary, not text).
NOT_UTF8 = b'{"order_id": "\xff"'


def _spark_messages() -> list[MessageExt]:
    msgs = [_msg(i, body) for i, (body, _) in enumerate(SPARK_BODIES)]
    msgs.append(_msg(len(msgs), NOT_UTF8))
    return msgs


def _append(into: list[tuple[str, int]], topic: str, n: int) -> None:
    into.append((topic, n))


def _read_rows(out: Path, corrupt: str = "_corrupt_record") -> dict[int, tuple[Any, ...]]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    raw = table.column(corrupt).cast("binary").to_pylist()
    return {
        offset: (order_id, amount, None if r is None else bytes(r))
        for offset, order_id, amount, r in zip(
            table.column("queue_offset").to_pylist(),
            table.column("order_id").to_pylist(),
            table.column("amount").to_pylist(),
            raw,
            strict=True,
        )
    }


@pytest.fixture
def builder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The Arrow column builder in use: the compiled one, or the pure-Python one."""
    from rmqk.plugins.spark import columns

    if request.param == "compiled" and not columns.SPEEDUPS:
        pytest.skip("the compiled column builder is not built (or disabled)")
    if request.param == "pure":
        monkeypatch.setattr(columns, "_compiled_build", None)
    return str(request.param)


@pytest.mark.spark
@pytest.mark.parametrize("builder", ["compiled", "pure"], indirect=True)
async def test_spark_keeps_bad_bodies_raw_on_every_path(
    spark: Any, tmp_path: Path, builder: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rmqk.plugins.spark.sink import SparkSink

    expected = {i: (o, a, None if r is None else r.encode()) for i, (_, (o, a, r)) in
                enumerate(SPARK_BODIES)}  # fmt: skip
    expected[len(SPARK_BODIES)] = (None, None, NOT_UTF8)
    schemas = {
        # flat: pyarrow parses a flush of good bodies; one bad body sends it to from_json
        "flat": "order_id STRING, amount DOUBLE",
        # beyond flat primitives: every flush through from_json
        "spark": "order_id STRING, amount DOUBLE, at TIMESTAMP",
    }
    for (name, schema), writer, column in [
        (("flat", schemas["flat"]), "arrow", "_corrupt_record"),
        (("spark", schemas["spark"]), "arrow", "_corrupt_record"),
        (("flat", schemas["flat"]), "spark", "raw_body"),  # renamed
    ]:
        out = tmp_path / f"{name}-{writer}"
        sink = SparkSink(
            {
                "path": str(out),
                "body_format": "json",
                "body_schema": schema,
                "writer": writer,
                "flush_seconds": 0.1,
                "corrupt_record_column": column,
            }
        )
        reported: list[tuple[str, int]] = []
        sink.watch_bad_bodies({TOPIC}, functools.partial(_append, reported))
        await sink.start()
        await sink.write(QUEUE, _spark_messages())
        # A flush of good bodies only: on the fast path for the flat schema.
        await sink.write(QUEUE, [_msg(100, b'{"order_id": "g", "amount": 9}')])
        await sink.close()
        rows = _read_rows(out, column)
        assert rows == {**expected, 100: ("g", 9.0, None)}, (builder, name, writer)
        assert reported == [(TOPIC, 6)], (name, writer)
        warned = [r.getMessage() for r in caplog.records if r.name == "rmqk.plugins.spark.sink"]
        assert len(warned) == 1 and "6 bodies of this flush" in warned[0], warned
        assert "(the first: message ID-2, topic Orders, queue broker-a/0, offset 2:" in warned[0]
        caplog.clear()

    # fail: the flush is refused whole, nothing written, with the message named.
    out = tmp_path / "fail"
    sink = SparkSink(
        {
            "path": str(out),
            "body_format": "json",
            "body_schema": schemas["flat"],
            "on_bad_body": "fail",
            "flush_seconds": 0.1,
        }
    )
    await sink.start()
    with pytest.raises(SinkHalted) as raised:
        await sink.write(QUEUE, _spark_messages())
    # Every later flush too, even of good bodies: the consumer is stopping.
    with pytest.raises(SinkHalted):
        await sink.write(QUEUE, [_msg(100, b'{"order_id": "g"}')])
    await sink.close()
    text = str(raised.value)
    assert "message ID-2 (topic Orders, queue broker-a/0, offset 2)" in text, text
    assert "not JSON" in text, text
    assert not list(out.rglob("*.parquet"))


@pytest.mark.spark
async def test_the_spark_guide_sink_keeps_text_bodies(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    """docs/spark.md's sink block against quickstart-like text bodies (the issue's scenario)."""
    import tomllib

    import pyarrow.dataset as ds

    (block,) = re.findall(r"^```toml\n(.*?)^```", (ROOT / "docs" / "spark.md").read_text(),
                          re.M | re.S)  # fmt: skip
    guide = tomllib.loads(block)["consumers"]["orders"]
    sink_options = dict(guide["sink_options"])
    assert sink_options["body_format"] == "json" and "on_bad_body" not in sink_options
    out = tmp_path / "out" / "orders"
    sink_options["path"] = str(out)
    lines = "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in sink_options.items())
    config = _config(tmp_path, broker.namesrv_addr, "g-guide", lines, "spark")

    orders = [
        json.dumps({"order_id": f"O-{i}", "amount": i * 1.5, "ts": i}).encode()
        for i in range(0, 300, 2)
    ]
    texts = [f"Hello RocketMQ {i}".encode() for i in range(1, 300, 2)]
    await produce(broker.namesrv_addr, TOPIC, orders + texts, tags="paid", batch=32)

    def rows() -> int:
        try:
            return int(ds.dataset(str(out), format="parquet", partitioning="hive").count_rows())
        except (OSError, ValueError):
            return 0

    run = Run(config)
    await _until(lambda: rows() >= 300, "every message in Parquet", timeout=240)
    run.stop.set()
    await run.task
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 300
    assert len(set(table.column("msg_id").to_pylist())) == 300
    got = table.select(["order_id", "amount", "ts", "_corrupt_record"]).to_pylist()
    parsed = sorted(r["order_id"] for r in got if r["_corrupt_record"] is None)
    assert parsed == sorted(f"O-{i}" for i in range(0, 300, 2))
    kept = [r for r in got if r["_corrupt_record"] is not None]
    assert sorted(r["_corrupt_record"] for r in kept) == sorted(t.decode() for t in texts)
    assert all((r["order_id"], r["amount"], r["ts"]) == (None, None, None) for r in kept)
    assert ", 150 bad bodies kept raw," in run.lines[0], run.lines
