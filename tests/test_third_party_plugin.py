"""The tutorial's plugin, a separate distribution, extends rmqk exactly as the default plugins do.

``examples/plugin-every-other/`` (docs/tutorial-allocation-strategy.md) is copied to a
temp dir, pip-installed into the running test environment, discovered through its
``rmqk`` entry point, selected by a config file, run by two ``rmqk run`` processes
against the embedded broker, and uninstalled again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import installed_distribution, module_broker, produce, start_rmqk

from rmqk.app.config import load_config
from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.pluginmanager import plugin_distribution, registries
from rmqk.spi.contracts import AllocationStrategyContext

CONTEXT = AllocationStrategyContext("g")

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "examples" / "plugin-every-other"
EXAMPLE_CONFIG = PLUGIN_DIR / "every-other.toml"
DIST = "rmqk-every-other"


installed_plugin = installed_distribution(PLUGIN_DIR, DIST)


def test_entry_point_registers_the_strategy(installed_plugin: str) -> None:
    reg = registries().allocation_strategies
    assert "EVERY_OTHER" in reg.names()
    entry = reg.entry("EVERY_OTHER")
    assert entry.plugin == "every_other"
    dist = plugin_distribution("every_other")
    assert dist is not None and dist.distribution == installed_plugin and dist.version == "1.0.0"
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    plain = reg.create("EVERY_OTHER", CONTEXT)
    assert plain.allocate("g", "c1", mqs, ["c1", "c2"]) == [mqs[0], mqs[2], mqs[4]]
    assert plain.allocate("g", "c2", mqs, ["c1", "c2"]) == [mqs[1], mqs[3]]
    shifted = reg.create("EVERY_OTHER", CONTEXT, {"offset": 1})
    assert shifted.allocate("g", "c1", mqs, ["c1", "c2"]) == [mqs[1], mqs[3]]
    assert plain.allocate("g", "gone", mqs, ["c1", "c2"]) == []
    # Its declared options are checked by rmqk before the factory is called.
    with pytest.raises(ConfigError) as info:
        reg.create("EVERY_OTHER", CONTEXT, {"offset": -1, "ofset": 1})
    assert [(p.table, p.key) for p in info.value.problems] == [
        ("allocate_options", "offset"),
        ("allocate_options", "ofset"),
    ]
    assert "EVERY_OTHER: " in str(info.value) and "did you mean 'offset'" in str(info.value)


def test_every_queue_goes_to_exactly_one_member(installed_plugin: str) -> None:
    strategy = registries().allocation_strategies.create("EVERY_OTHER", CONTEXT, {"offset": 3})
    for queues in range(0, 9):
        mqs = [MessageQueue("T", "b", i) for i in range(queues)]
        for members in range(1, 6):
            cids = [f"c{i}" for i in range(members)]
            shares = [strategy.allocate("g", c, mqs, cids) for c in cids]
            flat = [mq for share in shares for mq in share]
            assert sorted(flat) == mqs


def test_the_example_config_selects_the_strategy(installed_plugin: str) -> None:
    config = load_config(EXAMPLE_CONFIG)
    spec = config.consumers[0]
    assert spec.options.allocate_message_queue_strategy == "EVERY_OTHER"
    strategy = registries().allocation_strategies.create(
        spec.options.allocate_message_queue_strategy, CONTEXT, spec.options.allocate_options
    )
    assert strategy.offset == 0


def test_rmqk_plugins_lists_it_and_disabling_removes_it(installed_plugin: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "plugins"], capture_output=True, text=True, check=True
    ).stdout
    assert f"every_other  [{installed_plugin} 1.0.0]" in out
    assert "EVERY_OTHER (every_other)" in out
    env = {**os.environ, "RMQK_DISABLED_PLUGINS": "every_other"}
    result = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "check", str(EXAMPLE_CONFIG)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 1
    assert "unknown allocation strategy 'EVERY_OTHER'" in result.stderr


broker = module_broker()


def _status(config: Path) -> dict[str, Any] | None:
    result = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "status", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        return None
    (status,) = json.loads(result.stdout)
    return status  # type: ignore[no-any-return]


def _holdings(status: dict[str, Any]) -> dict[str, list[int]]:
    return {
        c["client_id"]: sorted(q["queue"] for q in c["queues"] if q["topic"] == "Orders")
        for c in status["clients"]
    }


def _wait_for(config: Path, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = _status(config)
        if status is not None and done(status):
            break
        time.sleep(0.5)
    return status


def test_two_members_split_the_queues_every_other(
    installed_plugin: str, broker: Any, tmp_path: Path
) -> None:
    """The tutorial's walk-through, command by command: every message lands once.

    A backlog first (the quickstart's 1,000), one member until `rmqk status` shows lag 0,
    the second until it shows the split, then 1,000 new messages.
    """
    backlog = produce(broker.namesrv_addr, "Orders", "--count", "1000")
    assert backlog.returncode == 0, backlog.stderr
    config = tmp_path / "every-other.toml"
    text = EXAMPLE_CONFIG.read_text().replace("127.0.0.1:9876", broker.namesrv_addr)
    config.write_text(text.replace('"out/orders-every-other.jsonl"', f'"{tmp_path}/out.jsonl"'))
    procs = [start_rmqk("run", str(config), stdout=subprocess.DEVNULL)]
    try:
        drained = _wait_for(
            config,
            lambda s: (
                s["lag"] == 0
                and sum(q["consumer_offset"] for q in s["queues"] if q["topic"] == "Orders") == 1000
            ),
        )
        assert drained is not None and drained["lag"] == 0, drained
        procs.append(start_rmqk("run", str(config), stdout=subprocess.DEVNULL))
        split = _wait_for(config, lambda s: sorted(_holdings(s).values()) == [[0, 2], [1, 3]])
        assert split is not None
        holdings = _holdings(split)
        first, second = sorted(holdings)
        # Sorted client ids: the first member takes queues 0 and 2, the second 1 and 3.
        assert holdings == {first: [0, 2], second: [1, 3]}, holdings
        fresh = produce(broker.namesrv_addr, "Orders", "--count", "1000")
        assert fresh.returncode == 0, fresh.stderr
        _wait_for(config, lambda s: s["lag"] == 0)
    finally:
        # One at a time: the second member rebalances after the first leaves and is stopped
        # once that is done, not while the broker's notification of the leave arrives.
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
            time.sleep(1.0)
    assert [p.returncode for p in procs] == [0, 0]
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # The backlog and the new messages, each exactly once: no member ever read what another
    # had read, because none started on a backlog another member was also taking.
    assert len(lines) == 2000
    assert len({(m["queue_id"], m["queue_offset"]) for m in lines}) == 2000
