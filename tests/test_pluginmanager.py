"""Entry-point loading and the RMQK_* environment variables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqk.model.errors import PluginError
from rmqk.pluginmanager import get_plugin_manager, registries, reset_plugin_manager


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    reset_plugin_manager()
    yield
    reset_plugin_manager()


ESSENTIAL = "rmqk-builtins"  # the kernel's built-in commands, registered whatever the environment


def loaded() -> set[str]:
    """The plugins loaded from entry points (the essential one is checked on its own)."""
    names = {name for name, plugin in get_plugin_manager().list_name_plugin() if plugin is not None}
    assert ESSENTIAL in names
    return names - {ESSENTIAL}


def test_default_plugins_load_through_entry_points() -> None:
    names = loaded()
    assert {"allocation", "remoting", "broker", "consume", "offsets", "sinks"} <= names
    regs = registries()
    assert "AVG" in regs.allocation_strategies
    assert "tcp" in regs.transports
    assert {"remote-broker", "local-file"} <= set(regs.offset_stores.names())


def test_disable_autoload_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQK_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert loaded() == set()
    with pytest.raises(PluginError, match=r"unknown allocation strategy 'AVG'; registered: \(none"):
        registries().allocation_strategies.get("AVG")


def test_load_plugins_selects_by_entry_point_or_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RMQK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("RMQK_LOAD_PLUGINS", "allocation, offsets")
    assert loaded() == {"allocation", "offsets"}
    reset_plugin_manager()
    monkeypatch.setenv("RMQK_LOAD_PLUGINS", "rocketmq-kernel")
    assert {"allocation", "remoting", "broker"} <= loaded()


def test_disabled_plugins_are_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQK_DISABLED_PLUGINS", "allocation,filters")
    names = loaded()
    assert "allocation" not in names and "filters" not in names and "remoting" in names
    assert "AVG" not in registries().allocation_strategies


def test_an_entry_point_that_fails_to_import_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pluggy's loader loads every entry point; the error still says which one failed."""
    from rmqk.pluginmanager import plugin_distribution

    info = tmp_path / "rmqk_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rmqk-broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rmqk]\nbroken = rmqk_no_such_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as err:
        get_plugin_manager()
    assert str(err.value) == (
        "plugin 'broken' from distribution rmqk-broken failed to load "
        "(rmqk_no_such_module): No module named 'rmqk_no_such_module'"
    )
    reset_plugin_manager()
    monkeypatch.setenv("RMQK_DISABLED_PLUGINS", "broken")
    assert "broken" not in loaded()
    dist = plugin_distribution("remoting")
    assert dist is not None and (dist.distribution, dist.value) == (
        "rocketmq-kernel",
        "rmqk.plugins.remoting",
    )
    assert plugin_distribution("broken") is None
