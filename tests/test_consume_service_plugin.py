"""A consume service from its own distribution, written from the docs, consumes over real TCP.

``tests/plugin-offset-batches/`` (docs/tutorial-consume-service.md) is copied to a
temp dir, pip-installed into the running test environment, found through its
``rmqk`` entry point and selected with ``consume_service``; it sees the push
consumer only through :class:`rmqk.spi.consume.ConsumeHost`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from cli_support import installed_distribution, module_broker, start_rmqk
from cli_support import produce as produce_cli
from engine_support import committed_offsets, create_topic, max_offsets, produce, wait_for

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import plugin_distribution, registries

pytestmark = pytest.mark.timeout(300)

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin-offset-batches"
TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial-consume-service.md"
DIST = "rmqk-offset-batches"


def test_the_tutorial_shows_the_plugin_as_it_is() -> None:
    """The plugin is what the tutorial says, so it is written from the docs alone."""
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", TUTORIAL.read_text(), re.M | re.S)
    code = [body for lang, body in blocks if lang == "python"]
    assert (PLUGIN_DIR / "rmqk_offset_batches" / "__init__.py").read_text() in code
    toml = "".join(
        line + "\n"
        for line in (PLUGIN_DIR / "pyproject.toml").read_text().splitlines()
        if not line.startswith("#") and not line.startswith("description")
    ).strip()
    assert toml + "\n" in [body for lang, body in blocks if lang == "toml"]


installed_plugin = installed_distribution(PLUGIN_DIR, DIST)


broker = module_broker()


def test_entry_point_registers_the_service(installed_plugin: str) -> None:
    reg = registries().consume_services
    assert "offset-batches" in reg.names()
    assert reg.entry("offset-batches").plugin == "offset_batches"
    dist = plugin_distribution("offset_batches")
    assert dist is not None and dist.distribution == installed_plugin


async def test_every_message_once_in_offset_batches_of_the_configured_size(
    installed_plugin: str, broker: Any
) -> None:
    topic, queues, total, batch_size = "OffsetBatches", 4, 403, 7
    await create_topic(broker, topic, queues)
    await produce(broker.namesrv_addr, topic, (f"m{i}".encode() for i in range(total)))
    lock = threading.Lock()
    # queue id -> the successful batches' offsets, in the order they were consumed
    batches: dict[int, list[list[int]]] = defaultdict(list)
    failed: list[list[int]] = []
    consumer = AsyncPushConsumer(
        "g-offset-batches",
        namesrv_addr=broker.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_service="offset-batches",
        consume_service_options={"batch_size": batch_size, "retry_delay_ms": 50},
    )
    consumer.subscribe(topic)

    @consumer.register_listener
    def handle(msgs: list[MessageExt]) -> None:
        offsets = [m.queue_offset for m in msgs]
        with lock:
            # One failure, to see the batch come back first and whole.
            if msgs[0].queue_id == 0 and 10 in offsets and not failed:
                failed.append(offsets)
                raise RuntimeError("fail once")
            batches[msgs[0].queue_id].append(offsets)

    def consumed() -> int:
        with lock:
            return sum(len(b) for per_queue in batches.values() for b in per_queue)

    await consumer.start()
    try:
        service: Any = consumer.consume_service
        assert (service.batch_size, service.retry_delay_ms) == (batch_size, 50)
        await wait_for(lambda: consumed() >= total, 60, "every message")
    finally:
        await consumer.shutdown()
    assert consumed() == total
    expected = await max_offsets(broker.namesrv_addr, broker.broker_addr, topic, queues)
    assert sum(expected.values()) == total
    for queue_id, per_queue in batches.items():
        flat = [offset for batch in per_queue for offset in batch]
        assert flat == list(range(expected[queue_id])), f"queue {queue_id} out of order or twice"
        assert all(1 <= len(batch) <= batch_size for batch in per_queue)
    assert max(len(b) for per_queue in batches.values() for b in per_queue) == batch_size
    (failed_batch,) = failed
    assert failed_batch in batches[0], "the failed batch was retried as it was"
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-offset-batches", topic, queues
    )
    assert committed == expected


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ({"batch_sise": 3}, ["batch_sise", "did you mean 'batch_size'"]),
        ({"batch_size": 0}, ["batch_size", "Out of range [1, 1024], got 0"]),
        ({"batch_size": "7"}, ["batch_size", 'must be an integer, got string "7"']),
    ],
)
async def test_options_the_service_does_not_take_are_errors(
    installed_plugin: str, broker: Any, options: dict[str, Any], fragments: list[str]
) -> None:
    consumer = AsyncPushConsumer(
        "g-offset-batches-bad",
        namesrv_addr=broker.namesrv_addr,
        consume_service="offset-batches",
        consume_service_options=options,
    )
    consumer.subscribe("OffsetBatches")
    consumer.register_listener(lambda msgs: None)
    with pytest.raises(ConfigError) as info:
        await consumer.start()
    text = str(info.value)
    assert "[consume_service_options]" in text and "consume service 'offset-batches'" in text
    for fragment in fragments:
        assert fragment in text


def _tutorial_config(tmp_path: Path, namesrv: str) -> Path:
    """The tutorial's TOML as written, with this test's name server and output folder."""
    blocks = re.findall(r"^```toml\n(.*?)^```$", TUTORIAL.read_text(), re.M | re.S)
    (text,) = [b for b in blocks if 'consume_service = "offset-batches"' in b]
    assert 'namesrv_addr = "127.0.0.1:9876"' in text and '"out/orders.jsonl"' in text
    path = tmp_path / "cs.toml"
    path.write_text(text.replace("127.0.0.1:9876", namesrv))
    return path


def test_the_tutorial_config_runs_with_a_sink(
    installed_plugin: str, broker: Any, tmp_path: Path
) -> None:
    """`rmqk run` of the tutorial's config: the service hands the sink's listener its queue.

    A service that passed no context made every batch fail (the sink's listener reads
    context.queue), counted as failed and retried forever without a word in the log.
    """
    ns = broker.namesrv_addr
    sent = produce_cli(ns, "Orders", "--count", "100")
    assert sent.returncode == 0, sent.stderr
    # The stop's tally is logged at INFO when stderr is not a terminal.
    env = {**os.environ, "RMQK_LOG_LEVEL": "INFO"}
    run = start_rmqk("run", str(_tutorial_config(tmp_path, ns)), cwd=tmp_path, env=env)
    out = tmp_path / "out" / "orders.jsonl"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and len(out.read_text().splitlines()) >= 100:
                break
            if run.poll() is not None:
                break
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    ids = [json.loads(line)["msg_id"] for line in out.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 100, err
    assert "consumer stopped: orders: 100 consumed, 0 failed" in err, err
    assert "raised" not in err, err
