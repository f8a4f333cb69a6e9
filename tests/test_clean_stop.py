"""Ctrl-C, restart, repeat: every shipped example loses nothing and writes nothing twice.

Issue 15 #2 and #4. Each config of ``examples/*.toml`` is run as a user runs it,
``rmqk run``, against one embedded broker on free ports: the test rewrites only
the name server address (and the metrics port), and runs each in its own
working directory, where the configs' relative ``out/`` paths land. Every run is
stopped with SIGINT at a random moment (seeded; the seed and the moments are
printed when an assertion fails), five times, and restarted; a last run goes to
completion. Then the sink output must hold every expected message exactly once.

Message counts: 100,000 orders (the Orders topic every jsonl example reads).
The slow sinks get fewer: the ledger of ``orderly-python.toml`` is an orderly
consumer calling a Python function once per one-message batch, so its
topic holds 3,000; the broadcast example's Payments topic holds 20,000. The
Spark examples are marked ``spark`` (each run starts a JVM): ``spark-table.toml``
reads the 100,000 orders, ``demo.toml`` (exactly once, a slower write) an Orders
topic of 20,000 on a broker of its own.

Each run's log must also end with the consumer's final tally (#13).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from rmqk.engine.producer import AsyncProducer
from rmqk.model.message import Message
from rmqk.plugins.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SEED = int(os.environ.get("RMQK_CLEAN_STOP_SEED", "1515"))
STOPS = 5

ORDERS = 100_000
SPARK_ORDERS = 20_000
PAYMENTS = 20_000
LEDGER = 3_000
REFUNDS = 2_000
ORDER_TAGS = ("created", "paid", "shipped", "cancelled")


@attrs.frozen
class Loaded:
    """A broker and what was sent to it: topic -> the keys of its messages, by tag."""

    namesrv_addr: str
    sent: dict[str, dict[str, list[str]]]

    def keys(self, topic: str, tags: tuple[str, ...] | None = None) -> set[str]:
        by_tag = self.sent[topic]
        return {k for tag, keys in by_tag.items() if tags is None or tag in tags for k in keys}


def _order(i: int, prefix: str) -> Message:
    tag = ORDER_TAGS[i % len(ORDER_TAGS)]
    body = {
        "order_id": f"{prefix}{i}",
        "customer_id": f"c{i % 97}",
        "event": tag,
        "amount": float(i % 500),
        "currency": "EUR",
        "items": 1 + i % 3,
        "ts": 1_700_000_000_000 + i,
    }
    return Message("Orders", json.dumps(body).encode(), tags=tag, keys=f"{prefix}{i}")


async def _produce(namesrv: str, batches: dict[str, list[Message]]) -> None:
    producer = AsyncProducer("clean-stop-producer", namesrv_addr=namesrv)
    await producer.start()
    try:
        for messages in batches.values():
            # One topic per batch request; queues are chosen round robin per request.
            for i in range(0, len(messages), 200):
                await producer.send_batch(messages[i : i + 200])
    finally:
        await producer.shutdown()


def _load(namesrv: str, batches: dict[str, list[Message]]) -> Loaded:
    asyncio.run(_produce(namesrv, batches))
    sent: dict[str, dict[str, list[str]]] = {}
    for topic, messages in batches.items():
        by_tag = sent.setdefault(topic, collections.defaultdict(list))
        for m in messages:
            by_tag[m.tags or ""].append(m.keys or "")
    return Loaded(namesrv, sent)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    data = tmp_path_factory.mktemp("clean-stop-broker")
    # broadcast-jsonl.toml subscribes by SQL92, which a broker serves only with
    # enablePropertyFilter on (the example says so).
    with EmbeddedBroker.run_in_thread(
        data, namesrv_port=0, broker_port=0, enable_property_filter=True
    ) as handle:
        payments = [
            Message(
                "Payments",
                f"payment {i}".encode(),
                keys=f"p{i}",
                tags="big" if i % 2000 > 1000 else "small",
                properties={"amount": str(i % 2000)},
            )
            for i in range(PAYMENTS)
        ]
        refunds = [
            Message(
                "Refunds",
                f"refund {i}".encode(),
                keys=f"r{i}",
                tags="RefundIssued" if i % 3 else "RefundDenied",
            )
            for i in range(REFUNDS)
        ]
        ledger = [
            Message("Ledger", f"entry {i}".encode(), keys=f"l{i}", tags="entry")
            for i in range(LEDGER)
        ]
        yield _load(
            handle.namesrv_addr,
            {
                "Orders": [_order(i, "o") for i in range(ORDERS)],
                "Payments": payments,
                "Refunds": refunds,
                "Ledger": ledger,
            },
        )


@pytest.fixture(scope="module")
def spark_loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    data = tmp_path_factory.mktemp("clean-stop-spark-broker")
    with EmbeddedBroker.run_in_thread(data, namesrv_port=0, broker_port=0) as handle:
        yield _load(handle.namesrv_addr, {"Orders": [_order(i, "s") for i in range(SPARK_ORDERS)]})


def _place(example: str, tmp: Path, namesrv: str) -> tuple[Path, Path]:
    """The example, pointed at the test's broker, in tmp/examples; and tmp/work to run in.

    tmp/work mirrors the repository root for the Python modules the examples
    name (``examples.ledger``), which the python sink imports from the working
    directory.
    """
    folder = tmp / "examples"
    folder.mkdir()
    text = (EXAMPLES / example).read_text()
    text = text.replace('"127.0.0.1:9876"', json.dumps(namesrv))
    text = re.sub(r"(?m)^port = \d+$", "port = 0", text)
    config = folder / example
    config.write_text(text)
    work = tmp / "work"
    (work / "examples").mkdir(parents=True)
    for module in EXAMPLES.glob("*.py"):
        shutil.copy(module, work / "examples" / module.name)
    return config, work


def _jsonl_keys(*paths: Path) -> Callable[[], list[str]]:
    def read() -> list[str]:
        keys: list[str] = []
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                if not line.endswith("}"):
                    continue  # a line being appended right now
                record = json.loads(line)
                if "topic" in record:
                    keys.append(f"{record['topic']}/{record['keys']}")
                else:  # examples/ledger.py writes queue, offset and body
                    keys.append(f"Ledger/{record['body']}")
        return keys

    return read


def _parquet_keys(
    folder: Path, column: str = "keys", topic: str = "Orders"
) -> Callable[[], list[str]]:
    def read() -> list[str]:
        import pyarrow.dataset as ds

        # Staging areas and Spark's _temporary folders hold files not (yet) published.
        files = [
            p
            for p in folder.rglob("*.parquet")
            if not any(part.startswith((".", "_")) for part in p.relative_to(folder).parts)
        ]
        if not files:
            return []
        table = ds.dataset([str(p) for p in files], format="parquet").to_table(columns=[column])
        return [f"{topic}/{k}" for k in table.column(column).to_pylist()]

    return read


@attrs.define
class Scenario:
    example: str
    expected: set[str]
    read: Callable[[], list[str]]
    # Seconds after "running" within which the random stop falls.
    stop_within: tuple[float, float]
    # The longest the last run may take to deliver everything.
    finish_within: float
    env: dict[str, str] = attrs.field(factory=dict)
    log: list[str] = attrs.field(factory=list)


def _start(
    config: Path, work: Path, env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    out = log_path.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "run", str(config), "--log-level", "INFO"],
            cwd=work,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        out.close()


def _wait_running(proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "running " in log_path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"rmqk run exited early:\n{log_path.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"rmqk run did not start in {timeout}s:\n{log_path.read_text()}")


def _stop(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"rmqk run did not stop on SIGINT:\n{log_path.read_text()}") from None
    text = log_path.read_text(errors="replace")
    assert proc.returncode == 0, text
    assert "Traceback" not in text, text
    # The final tally of every consumer (#13).
    assert "consumer stopped: " in text, text
    return text


def _play(scenario: Scenario, config: Path, work: Path, start_timeout: float = 60.0) -> None:
    rng = random.Random(f"{SEED}/{scenario.example}")
    moments = [round(rng.uniform(*scenario.stop_within), 2) for _ in range(STOPS)]
    history: list[str] = [f"seed {SEED}, stop moments (s after start) {moments}"]

    def context() -> str:
        return "\n".join([*history, *scenario.log[-3:]])

    for n, moment in enumerate(moments):
        log_path = work / f"run-{n}.log"
        proc = _start(config, work, scenario.env, log_path)
        _wait_running(proc, log_path, start_timeout)
        time.sleep(moment)
        _stop(proc, log_path)
        got = scenario.read()
        history.append(f"run {n}: stopped {moment}s in, {len(got):,} delivered so far")
        print(history[-1])
        scenario.log.append(log_path.read_text(errors="replace")[-3000:])
        dups = len(got) - len(set(got))
        assert dups == 0, f"{dups} duplicates after stop {n}\n{context()}"

    log_path = work / "run-last.log"
    proc = _start(config, work, scenario.env, log_path)
    _wait_running(proc, log_path, start_timeout)
    deadline = time.monotonic() + scenario.finish_within
    got = scenario.read()
    while len(set(got)) < len(scenario.expected) and time.monotonic() < deadline:
        time.sleep(0.5)
        got = scenario.read()
    time.sleep(1.0)  # anything delivered twice would arrive now
    _stop(proc, log_path)
    got = scenario.read()
    history.append(f"last run: {len(got):,} delivered")
    print("\n".join(history))
    counts = collections.Counter(got)
    dups = {k: c for k, c in counts.items() if c > 1}
    missing = scenario.expected - set(counts)
    unexpected = set(counts) - scenario.expected
    assert not dups, (
        f"{len(dups)} keys delivered more than once, e.g. {list(dups)[:5]}\n{context()}"
    )
    assert not missing, f"{len(missing)} lost, e.g. {sorted(missing)[:5]}\n{context()}"
    assert not unexpected, f"{len(unexpected)} unexpected, e.g. {sorted(unexpected)[:5]}"


def test_jsonl_example(loaded: Loaded, tmp_path: Path) -> None:
    config, work = _place("jsonl.toml", tmp_path, loaded.namesrv_addr)
    orders = {f"Orders/{k}" for k in loaded.keys("Orders")}
    _play(
        Scenario("jsonl.toml", orders, _jsonl_keys(work / "out/orders.jsonl"), (0.3, 2.5), 120),
        config,
        work,
    )


def test_prometheus_example(loaded: Loaded, tmp_path: Path) -> None:
    config, work = _place("prometheus.toml", tmp_path, loaded.namesrv_addr)
    orders = {f"Orders/{k}" for k in loaded.keys("Orders")}
    read = _jsonl_keys(work / "out/orders-metered.jsonl")
    _play(Scenario("prometheus.toml", orders, read, (0.3, 2.5), 150), config, work)


def test_orderly_python_example(loaded: Loaded, tmp_path: Path) -> None:
    """The ledger's function is the shipped examples/ledger.py (#4)."""
    config, work = _place("orderly-python.toml", tmp_path, loaded.namesrv_addr)
    expected = (
        {f"Ledger/entry {i}" for i in range(LEDGER)}
        | {f"Orders/{k}" for k in loaded.keys("Orders")}
        | {f"Refunds/{k}" for k in loaded.keys("Refunds", ("RefundIssued",))}
    )
    read = _jsonl_keys(work / "out/ledger.jsonl", work / "out/replay.jsonl")
    _play(Scenario("orderly-python.toml", expected, read, (0.3, 2.5), 180), config, work)


def test_broadcast_example(loaded: Loaded, tmp_path: Path) -> None:
    config, work = _place("broadcast-jsonl.toml", tmp_path, loaded.namesrv_addr)
    big = {f"Payments/p{i}" for i in range(PAYMENTS) if i % 2000 > 1000}
    scenario = Scenario(
        "broadcast-jsonl.toml",
        big,
        _jsonl_keys(work / "out/audit.jsonl"),
        (0.3, 2.5),
        120,
        env={"RMQK_LOCAL_OFFSET_STORE_DIR": str(tmp_path / "offsets")},
    )
    _play(scenario, config, work)


@pytest.mark.spark
def test_spark_table_example(loaded: Loaded, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    config, work = _place("spark-table.toml", tmp_path, loaded.namesrv_addr)
    orders = {f"Orders/{k}" for k in loaded.keys("Orders")}
    read = _parquet_keys(work / "spark-warehouse" / "orders_raw")
    _play(Scenario("spark-table.toml", orders, read, (0.2, 3.0), 120), config, work, 180)


@pytest.mark.spark
def test_demo_example(spark_loaded: Loaded, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    config, work = _place("demo.toml", tmp_path, spark_loaded.namesrv_addr)
    orders = {f"Orders/{k}" for k in spark_loaded.keys("Orders")}
    read = _parquet_keys(work / "out" / "orders", column="order_id")
    _play(Scenario("demo.toml", orders, read, (0.2, 3.0), 120), config, work, 180)


def test_every_example_is_run_here() -> None:
    """A new example must get a scenario above, not only a check."""
    covered = {  # examples/plugin-every-other/ needs its plugin installed first
        "jsonl.toml",
        "prometheus.toml",
        "orderly-python.toml",
        "broadcast-jsonl.toml",
        "spark-table.toml",
        "demo.toml",
    }
    assert {p.name for p in EXAMPLES.glob("*.toml")} == covered


def test_a_config_names_a_module_kept_beside_it(tmp_path: Path) -> None:
    """`rmqk check/run path/to/consumers.toml` imports a python sink's module from the
    config's folder, whatever the working directory (after the working directory)."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "beside_handlers.py").write_text("def handle(queue, messages):\n    return None\n")
    (conf / "consumers.toml").write_text(
        textwrap.dedent(
            """
            [consumers.c]
            group = "g-beside"
            namesrv_addr = "127.0.0.1:9876"
            subscription = { T = "*" }
            sink = "python"
            sink_options = { function = "beside_handlers:handle" }
            """
        )
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "check", str(conf / "consumers.toml")],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    script = textwrap.dedent(
        f"""
        from rmqk.app.commands import load_config_beside_modules
        from rmqk.app.runtime import ComposedConsumer
        config = load_config_beside_modules({str(conf / "consumers.toml")!r})
        sink = ComposedConsumer(config.consumers[0]).sink
        print(sink.function.__module__, sink.function.__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=elsewhere, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "beside_handlers handle"
