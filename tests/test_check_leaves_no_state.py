"""An in-process `rmqk check` configures nothing that outlives it; `rmqk run`'s preflight does.

A check of examples/prometheus.toml once left the prometheus plugin's consume hooks
registered, so every consumer a later test started in the same process ran hooked.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from rmqk.app.cli import main
from rmqk.app.config import load_config
from rmqk.app.preflight import preflight
from rmqk.pluginmanager import PluginManager, hook_has_impls
from rmqk.plugins import prometheus
from rmqk.spi.hookspecs import hookimpl

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "prometheus.toml"

CONSUMER = (
    '[consumers.orders]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\nsubscription = { T = "*" }\n'
    'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
)


@pytest.fixture(autouse=True)
def metrics_off(pm: PluginManager) -> Iterator[None]:
    prometheus.disable()
    yield
    prometheus.disable()


def _hooked() -> bool:
    return hook_has_impls("rmqk_consume_message_before") or hook_has_impls(
        "rmqk_consume_message_after"
    )


def _check(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["check", *args])


def test_checking_the_prometheus_example_leaves_consume_hooks_off(pm: PluginManager) -> None:
    plugins = {name for name, _ in pm.list_name_plugin()}
    assert not _hooked()
    assert _check(str(EXAMPLE)) == 0
    # What the engine consults before building hook contexts for each batch.
    assert not _hooked()
    assert prometheus.active() is None
    assert pm.get_plugin(prometheus.RUNTIME_PLUGIN_NAME) is None
    assert {name for name, _ in pm.list_name_plugin()} == plugins


def test_a_plugin_registered_after_a_check_is_not_handed_the_checked_file(
    pm: PluginManager,
) -> None:
    assert _check(str(EXAMPLE)) == 0
    seen: list[Mapping[str, Any]] = []

    class Late:
        @hookimpl
        def rmqk_configure(self, config: Mapping[str, Any]) -> None:
            seen.append(config)

    pm.register(Late(), name="late")
    assert seen == []


def test_the_check_still_refuses_a_bad_prometheus_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[prometheus]\nport = -1\n\n" + CONSUMER)
    assert main(["check", str(path)]) == 1
    assert f"{path}: [prometheus] port: must be a port number" in capsys.readouterr().err
    assert not _hooked()


def test_runs_preflight_keeps_the_metrics_it_configured(pm: PluginManager) -> None:
    # `rmqk run` announces the file through the same preflight and must stay configured.
    preflight(load_config(EXAMPLE))
    plugin = prometheus.active()
    assert plugin is not None and plugin.settings.port == 9464
    assert pm.get_plugin(prometheus.RUNTIME_PLUGIN_NAME) is plugin
    assert _hooked()
