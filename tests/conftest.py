"""Shared fixtures: embedded brokers on free loopback ports, a fresh plugin manager.

* ``broker``: a started :class:`~rmqk.plugins.broker.EmbeddedBroker` (async) with
  Apache's defaults, data in ``tmp_path``; a module or test marked
  ``@pytest.mark.broker_options(**options)`` gets one started with those options.
* ``broker_factory``: ``await broker_factory(**options)`` starts more (or
  differently configured) brokers; all are stopped at teardown. Options are
  EmbeddedBroker's keyword arguments (``delay_levels="100ms 200ms"``,
  ``lock_expiry=0.5``, ...); ``data_dir`` defaults to a fresh folder of ``tmp_path``.
* ``pm``: the plugin manager, reset before and after the test.
* ``no_acl_credentials``: no ACL keys from the environment or configured (ACL tests).
* ``broker_thread``: a broker running on its own loop in a thread, for sync tests;
  ``broker_thread_factory`` as above.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rmqk.pluginmanager import PluginManager
    from rmqk.plugins.broker import BrokerThread, EmbeddedBroker

_counter = itertools.count()


def _broker_options(tmp_path: Path, options: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    data_dir = Path(options.pop("data_dir", tmp_path / f"broker-{next(_counter)}"))
    options.setdefault("namesrv_port", 0)
    options.setdefault("broker_port", 0)
    return data_dir, options


@pytest.fixture
async def broker_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[EmbeddedBroker]]]:
    from rmqk.plugins.broker import EmbeddedBroker

    started: list[EmbeddedBroker] = []

    async def make(**options: Any) -> EmbeddedBroker:
        data_dir, kwargs = _broker_options(tmp_path, options)
        broker = await EmbeddedBroker(data_dir, **kwargs).start()
        started.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(started):
            await broker.stop()


@pytest.fixture
async def broker(
    broker_factory: Callable[..., Awaitable[EmbeddedBroker]], request: pytest.FixtureRequest
) -> EmbeddedBroker:
    marker = request.node.get_closest_marker("broker_options")
    return await broker_factory(**(dict(marker.kwargs) if marker else {}))


@pytest.fixture
def broker_thread_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    from rmqk.plugins.broker import EmbeddedBroker

    started: list[BrokerThread] = []

    def make(**options: Any) -> BrokerThread:
        data_dir, kwargs = _broker_options(tmp_path, options)
        handle = EmbeddedBroker.run_in_thread(data_dir, **kwargs)
        started.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in reversed(started):
            handle.stop()


@pytest.fixture
def pm() -> Iterator[PluginManager]:
    """The plugin manager, loaded afresh for the test and reset again after it."""
    from rmqk.pluginmanager import get_plugin_manager, reset_plugin_manager

    reset_plugin_manager()
    yield get_plugin_manager()
    reset_plugin_manager()


@pytest.fixture
def no_acl_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ACL credentials from the environment or an earlier test, before and after."""
    from rmqk.plugins.remoting import acl

    for var in ("RMQK_ACCESS_KEY", "RMQK_SECRET_KEY", "RMQK_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    acl.configure(None)
    yield
    acl.configure(None)


@pytest.fixture
def broker_thread(broker_thread_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_thread_factory()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A started sync PushConsumer holds the process open at exit, as a Java consumer
    # holds its JVM; one a test forgot to shut down must not hang the test run.
    import sys

    sync = sys.modules.get("rmqk.engine.sync")
    if sync is not None:
        sync._shutdown_live()
