"""A separately installed distribution extends rmqk exactly as the default plugins do.

The distribution is written to a temp dir, pip-installed into the running test
environment, discovered through its ``rmqk`` entry point, and uninstalled again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqk.config import load_config
from rmqk.model import MessageQueue
from rmqk.pluginmanager import plugin_distribution, registries, reset_plugin_manager

pytestmark = pytest.mark.timeout(300)

DIST = "rmqk-test-every-other"


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    src = tmp_path_factory.mktemp("dist")
    (src / "rmqk_every_other").mkdir()
    (src / "rmqk_every_other" / "__init__.py").write_text(
        textwrap.dedent(
            '''
            """A third-party allocation strategy: queue k goes to consumer k mod n."""
            from rmqk import hookimpl


            class EveryOther:
                name = "EVERY_OTHER"

                def __init__(self, offset=0):
                    self.offset = offset

                def allocate(self, group, current_cid, mq_all, cid_all):
                    i = (cid_all.index(current_cid) + self.offset) % len(cid_all)
                    return [mq for k, mq in enumerate(mq_all) if k % len(cid_all) == i]


            @hookimpl
            def rmqk_register_allocation_strategies(register):
                register("EVERY_OTHER", EveryOther)
            '''
        )
    )
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{DIST}"
            version = "1.2.3"

            [project.entry-points.rmqk]
            every_other = "rmqk_every_other"

            [tool.setuptools]
            packages = ["rmqk_every_other"]
            """
        )
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", str(src)], check=True)
    reset_plugin_manager()
    try:
        yield DIST
    finally:
        subprocess.run([*pip, "uninstall", "-y", DIST], check=False)
        reset_plugin_manager()


def test_entry_point_registers_the_strategy(installed_plugin: str) -> None:
    reg = registries().allocation_strategies
    assert "EVERY_OTHER" in reg.names()
    entry = reg.entry("EVERY_OTHER")
    assert entry.plugin == "every_other"
    dist = plugin_distribution("every_other")
    assert dist is not None and dist.distribution == installed_plugin and dist.version == "1.2.3"
    strategy = reg.create("EVERY_OTHER", offset=1)
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    assert strategy.allocate("g", "c1", mqs, ["c1", "c2"]) == [mqs[1], mqs[3]]


def test_a_config_selects_the_strategy(installed_plugin: str, tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        textwrap.dedent(
            """
            [consumers.orders]
            group = "g-every-other"
            namesrv_addr = "127.0.0.1:9876"
            subscription = { Orders = "*" }
            allocate_message_queue_strategy = "EVERY_OTHER"
            sink = "jsonl"

            [consumers.orders.allocate_options]
            offset = 1

            [consumers.orders.sink_options]
            path = "out.jsonl"
            """
        )
    )
    config = load_config(path)
    spec = config.consumers[0]
    assert spec.options.allocate_message_queue_strategy == "EVERY_OTHER"
    strategy = registries().allocation_strategies.create(
        spec.options.allocate_message_queue_strategy, **dict(spec.options.allocate_options)
    )
    assert strategy.offset == 1


def test_rmqk_plugins_lists_it_and_disabling_removes_it(installed_plugin: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "plugins"], capture_output=True, text=True, check=True
    ).stdout
    assert f"every_other  [{installed_plugin} 1.2.3]" in out
    assert "EVERY_OTHER (every_other)" in out
    import os

    env = {**os.environ, "RMQK_DISABLED_PLUGINS": "every_other"}
    out = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "plugins"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert "EVERY_OTHER" not in out
