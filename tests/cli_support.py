"""Helpers for tests that run ``rmqk`` as a user does: one process per command.

``broker = module_broker()`` in a test module gives its tests one broker thread
for the whole module (the processes under test reach it by address), instead of
conftest's per-test async ``broker``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rmqk.plugins.broker import BrokerThread


def rmqk(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``rmqk <args>`` in a fresh interpreter, output captured as text."""
    kwargs.setdefault("timeout", 60)
    return subprocess.run(
        [sys.executable, "-m", "rmqk.cli", *args], capture_output=True, text=True, **kwargs
    )


def produce(
    namesrv: str, topic: str, *options: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``rmqk produce`` to ``topic``; ``options`` such as ``"--count", "40"``."""
    return rmqk("produce", "--namesrv", namesrv, "--topic", topic, *options, **kwargs)


def jsonl_consumer(
    name: str, group: str, namesrv: str, topic: str, out: Path, *, tags: str = "*", **options: int
) -> str:
    """A ``[consumers.<name>]`` table: ``topic`` from its first offset into the jsonl file ``out``.

    ``options`` are further integer consumer options, e.g. ``consume_message_batch_max_size=16``.
    """
    lines = [
        f"[consumers.{name}]",
        f'group = "{group}"',
        f'namesrv_addr = "{namesrv}"',
        f'subscription = {{ {topic} = "{tags}" }}',
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"',
        *(f"{key} = {value}" for key, value in options.items()),
        'sink = "jsonl"',
        f'sink_options = {{ path = "{out}" }}',
    ]
    return "\n".join(lines) + "\n"


def start_rmqk(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``rmqk <args>`` started in the background, stdout and stderr piped unless told."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "rmqk.cli", *args], text=True, **kwargs)


def installed_distribution(source: Path, dist: str) -> Callable[..., Iterator[str]]:
    """A module-scoped fixture named ``installed_plugin``: ``source`` pip-installed as ``dist``.

    It yields the distribution name and uninstalls it afterwards; the plugin manager
    is reset both times so the entry points are read again.
    """

    @pytest.fixture(scope="module", name="installed_plugin")
    def installed_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        from rmqk.pluginmanager import reset_plugin_manager

        # A copy, so the build leaves nothing behind in the repository.
        src = tmp_path_factory.mktemp("dist") / source.name
        shutil.copytree(source, src)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "install", "--no-deps", str(src)], check=True)
        reset_plugin_manager()
        try:
            yield dist
        finally:
            subprocess.run([*pip, "uninstall", "-y", dist], check=False)
            reset_plugin_manager()

    return installed_fixture


def module_broker() -> Callable[..., Iterator[BrokerThread]]:
    """A module-scoped fixture named ``broker``: an embedded broker in its own thread."""

    @pytest.fixture(scope="module", name="broker")
    def broker_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
        from rmqk.plugins.broker import EmbeddedBroker

        with EmbeddedBroker.run_in_thread(
            tmp_path_factory.mktemp("broker"), namesrv_port=0, broker_port=0
        ) as handle:
            yield handle

    return broker_fixture
