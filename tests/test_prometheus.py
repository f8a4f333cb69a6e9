"""The prometheus plugin: `rmqk run` serves metrics that match what was consumed."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from cli_support import jsonl_consumer, module_broker, produce, start_rmqk
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rmqk.app.config import announce_config, load_config
from rmqk.engine.stats import ConsumerStats
from rmqk.model import MessageModel, MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import get_plugin_manager, hook_has_impls
from rmqk.plugins import prometheus
from rmqk.plugins.prometheus.metrics import RmqkMetrics
from rmqk.plugins.prometheus.settings import PrometheusSettings
from rmqk.spi.contexts import ConsumeMessageContext

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(autouse=True)
def metrics_disabled() -> Iterator[None]:
    # Enabling is process-wide (any test announcing a config with a [prometheus] table
    # does it), so every test here starts and ends with metrics off.
    prometheus.disable()
    yield
    prometheus.disable()


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        value
        for (n, lbls), value in samples.items()
        if n == name and all(dict(lbls).get(k) == v for k, v in labels.items())
    )


# -- settings --------------------------------------------------------------------


def test_a_bad_prometheus_table_names_each_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        textwrap.dedent(
            """
            [prometheus]
            port = 70000
            host = ""
            scrape_timout = 3

            [consumers.c]
            group = "g"
            namesrv_addr = "127.0.0.1:9876"
            subscription = { T = "*" }
            sink = "jsonl"
            sink_options = { path = "x.jsonl" }
            """
        )
    )
    with pytest.raises(ConfigError) as info:
        announce_config(load_config(path))
    text = str(info.value)
    assert f"{path}: [prometheus] port: must be a port number in [0, 65535]" in text
    assert f"{path}: [prometheus] host: must be an address" in text
    assert "scrape_timout: unknown key (did you mean 'scrape_timeout'?)" in text
    assert prometheus.active() is None


def test_settings_defaults() -> None:
    assert PrometheusSettings.from_table({}) == PrometheusSettings("127.0.0.1", 9464, 5.0)
    assert PrometheusSettings.from_table({"port": 0, "scrape_timeout": 2}).scrape_timeout == 2.0


def test_enabling_registers_the_consume_hooks_only_then() -> None:
    pm = get_plugin_manager()
    assert pm.get_plugin(prometheus.RUNTIME_PLUGIN_NAME) is None
    plugin = prometheus.enable(PrometheusSettings(port=0))
    try:
        assert pm.get_plugin(prometheus.RUNTIME_PLUGIN_NAME) is plugin
        assert hook_has_impls("rmqk_consume_message_after")
        assert prometheus.enable(PrometheusSettings(port=0)) is plugin
        with pytest.raises(ConfigError, match="already enabled"):
            prometheus.enable(PrometheusSettings(port=1))
    finally:
        prometheus.disable()
    assert pm.get_plugin(prometheus.RUNTIME_PLUGIN_NAME) is None


# -- the hook-fed counters ----------------------------------------------------------


class FakeConsumer:
    """The attributes the collector and counters read, as an AsyncPushConsumer has them."""

    def __init__(self, group: str) -> None:
        from rmqk.model import ServiceState

        self.group = group
        self.client_id = "127.0.0.1@test"
        self.state = ServiceState.RUNNING
        self.message_model = MessageModel.CLUSTERING
        self.stats = ConsumerStats()
        self.rebalance = type("R", (), {"process_queue_table": {}})()
        self.offset_store = type("S", (), {"clone_offset_table": staticmethod(lambda t: {})})()

    def max_reconsume_times(self) -> int:
        return 2

    async def max_offset(self, mq: MessageQueue) -> int:
        return 0


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def message(offset: int, reconsume_times: int) -> MessageExt:
    msg = MessageExt(topic="T", body=b"x", queue_offset=offset)
    msg.reconsume_times = reconsume_times
    return msg


def test_consume_hooks_count_results_retries_and_dead_letters(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    metrics = RmqkMetrics(timeout_s=2)
    metrics.collector.track(FakeConsumer("g"), loop_thread)
    mq = MessageQueue("T", "broker-a", 1)
    ok = ConsumeMessageContext("g", mq, [message(0, 0), message(1, 0), message(2, 1)])
    metrics.before(ok)
    ok.success, ok.duration_ms = True, 12.0
    metrics.after(ok)
    # A failing batch: one message on its last allowed try goes to %DLQ%.
    bad = ConsumeMessageContext("g", mq, [message(3, 1), message(4, 2)])
    metrics.before(bad)
    bad.success, bad.duration_ms = False, 3.0
    metrics.after(bad)
    samples = parse(generate_latest(metrics.registry).decode())
    labels = {"group": "g", "topic": "T"}
    assert total(samples, "rmqk_consumed_messages_total", result="success", **labels) == 3
    assert total(samples, "rmqk_consumed_messages_total", result="failure", **labels) == 2
    assert total(samples, "rmqk_retried_messages_total", **labels) == 3
    assert total(samples, "rmqk_dlq_messages_total", **labels) == 1
    assert total(samples, "rmqk_consume_duration_seconds_count", **labels) == 2
    assert total(samples, "rmqk_consume_duration_seconds_sum", **labels) == pytest.approx(0.015)
    assert total(samples, "rmqk_consumer_queues", group="g") == 0


# -- rmqk run, end to end -------------------------------------------------------------


broker = module_broker()


class Stderr:
    """Collects a process's stderr lines in a thread, so the pipe never fills."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        assert proc.stderr is not None
        self._stream = proc.stderr
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(pattern, line)
                if found:
                    return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in stderr:\n{''.join(self.lines)[-3000:]}")


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse(response.read().decode())


def test_rmqk_run_serves_metrics_matching_the_consumed_count(broker: Any, tmp_path: Path) -> None:
    count = 300
    produced = produce(broker.namesrv_addr, "Metered", "--count", str(count), "--batch", "20")
    assert produced.returncode == 0, produced.stderr
    out = tmp_path / "out.jsonl"
    config = tmp_path / "metered.toml"
    consumer = jsonl_consumer(
        "metered",
        "g-metered",
        broker.namesrv_addr,
        "Metered",
        out,
        consume_message_batch_max_size=8,
    )
    config.write_text("[prometheus]\nport = 0\n\n" + consumer)
    proc = start_rmqk("run", str(config), "--log-level", "INFO", "--log-format", "json")
    stderr = Stderr(proc)
    try:
        url = stderr.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+/metrics)", 45)[1]
        labels = {"group": "g-metered", "topic": "Metered"}
        deadline = time.monotonic() + 45
        samples = scrape(url)
        while time.monotonic() < deadline:
            consumed = total(samples, "rmqk_consumed_messages_total", result="success", **labels)
            lag = total(samples, "rmqk_queue_lag_messages", **labels)
            if consumed >= count and lag == 0:
                break
            time.sleep(0.3)
            samples = scrape(url)
        assert total(samples, "rmqk_consumed_messages_total", result="success", **labels) == count
        assert total(samples, "rmqk_consumed_messages_total", result="failure", **labels) == 0
        assert total(samples, "rmqk_pulled_messages_total", **labels) == count
        batches = total(samples, "rmqk_consume_duration_seconds_count", **labels)
        assert count / 8 <= batches <= count
        # Every queue of the topic, with the broker's offsets: 300 messages, nothing behind.
        max_offsets = [
            v
            for (n, lbls), v in samples.items()
            if n == "rmqk_queue_max_offset" and dict(lbls)["topic"] == "Metered"
        ]
        assert len(max_offsets) == 4 and sum(max_offsets) == count
        assert total(samples, "rmqk_queue_committed_offset", **labels) == count
        assert total(samples, "rmqk_queue_lag_messages", **labels) == 0
        assert total(samples, "rmqk_process_queue_messages", **labels) == 0
        # The topic's four queues, and the retry queue once its route exists.
        assert total(samples, "rmqk_consumer_queues", group="g-metered") in (4, 5)
        assert total(samples, "rmqk_pull_latency_seconds_count", **labels) >= 1
        assert len(out.read_text().splitlines()) == count
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, "".join(stderr.lines)[-3000:]
    time.sleep(0.2)
    records = [json.loads(line) for line in stderr.lines if line.startswith("{")]
    assert records and len(records) == len(stderr.lines)
    started = [r for r in records if r["logger"] == "rmqk.runtime"]
    assert started and started[0]["message"].startswith("consumer metered (group g-metered)")
    assert any(r.get("group") == "g-metered" and r.get("topic") == "Metered" for r in records)


def _free_port_pair() -> int:
    """A port P such that P and P + 1 are free on loopback (now)."""
    import socket

    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two free ports in a row")


def test_each_worker_serves_its_own_figures_on_port_plus_its_slot(
    broker: Any, tmp_path: Path
) -> None:
    # operations.md, "Running with several processes": every worker serves its own endpoint
    # on `port` plus its slot, and each endpoint carries only its worker's figures.
    count = 40
    produced = produce(broker.namesrv_addr, "MeteredWorkers", "--count", str(count))
    assert produced.returncode == 0, produced.stderr
    port = _free_port_pair()
    config = tmp_path / "workers.toml"
    consumer = jsonl_consumer(
        "split", "g-metered-workers", broker.namesrv_addr, "MeteredWorkers", tmp_path / "o.jsonl"
    )
    config.write_text(f"[prometheus]\nport = {port}\n\n" + consumer)
    proc = start_rmqk("run", str(config), "--processes", "2", "--log-level", "INFO")
    stderr = Stderr(proc)
    labels = {"group": "g-metered-workers", "topic": "MeteredWorkers", "result": "success"}
    try:
        for slot in (0, 1):
            stderr.wait_for(rf"serving metrics on http://127\.0\.0\.1:{port + slot}/metrics", 60)
        deadline = time.monotonic() + 60
        while True:
            each = [
                total(
                    scrape(f"http://127.0.0.1:{port + slot}/metrics"),
                    "rmqk_consumed_messages_total",
                    **labels,
                )
                for slot in (0, 1)
            ]
            if sum(each) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
    assert proc.returncode == 0, "".join(stderr.lines)[-3000:]
    # Four queues over two members: both consumed, and no endpoint counts the other's.
    assert sum(each) == count and all(n > 0 for n in each), each


def test_every_metric_served_is_in_the_operations_table_and_back() -> None:
    # docs/operations.md's table is what an operator builds dashboards from: a metric the
    # registry serves but the table leaves out (rmqk_skipped_records_total was) is
    # invisible, and a row the registry does not serve is a dashboard that stays empty.
    served = {
        family.name + ("_total" if family.type == "counter" else ""): family.type
        for family in text_string_to_metric_families(
            generate_latest(RmqkMetrics().registry).decode()
        )
    }
    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    documented: dict[str, str] = {}
    for names, kind in re.findall(r"^\| ((?:`rmqk_\w+`(?:, )?)+) \| (\w+) \|", page, re.M):
        for name in re.findall(r"`(rmqk_\w+)`", names):
            assert name not in documented, f"operations.md lists {name} twice"
            documented[name] = kind
    assert sorted(documented) == sorted(served), (
        f"served, not in docs/operations.md: {sorted(set(served) - set(documented))}; "
        f"in the table, not served: {sorted(set(documented) - set(served))}"
    )
    assert documented == served
