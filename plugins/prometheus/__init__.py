"""rmqk.plugins.prometheus: consumer metrics for Prometheus.

Enabled by a ``[prometheus]`` table in the config file (``rmqk_configure``)::

    [prometheus]
    port = 9464          # 0 picks a free port; the address is logged at INFO
    host = "127.0.0.1"

or from a program with :func:`enable`. Needs ``prometheus_client``
(``pip install 'rocketmq-kernel[prometheus]'``); without the table the plugin does
nothing and costs nothing: its consume hooks are registered only once enabled,
because any consume hook takes consumers off their hook-free fast path.

The HTTP endpoint starts when the first consumer gets its queues (the first
``rmqk_queues_changed``), so ``rmqk check`` of the same file binds no port.
Under ``processes = N`` every worker process serves its own endpoint on
``port + slot`` (slot 0, 1, ... across all workers); the supervisor serves none.
:mod:`rmqk.plugins.prometheus.metrics` lists the metrics.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.plugins.prometheus.settings import TABLE, PrometheusSettings
from rmqk.spi.contexts import ConsumeMessageContext, ConsumerView
from rmqk.spi.hookspecs import hookimpl

__all__ = [
    "MetricsPlugin",
    "PrometheusSettings",
    "active",
    "disable",
    "enable",
    "rmqk_check_config",
    "rmqk_configure",
]

log = logging.getLogger("rmqk.plugins.prometheus")

# The name the runtime hooks are registered under in the plugin manager. That
# registration is the plugin's only state, so whoever undoes it (disable, a fresh
# plugin manager, `rmqk check` undoing what it configured) leaves metrics off.
RUNTIME_PLUGIN_NAME = "prometheus-runtime"

_lock = threading.Lock()


class MetricsPlugin:
    """The runtime hooks: counts around every consume, tracks consumers, serves HTTP."""

    def __init__(self, settings: PrometheusSettings) -> None:
        from rmqk.plugins.prometheus.metrics import RmqkMetrics

        self.settings = settings
        self.metrics = RmqkMetrics(timeout_s=settings.scrape_timeout)
        self.server: Any = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None
        self._serve_lock = threading.Lock()

    @property
    def url(self) -> str | None:
        if self.address is None:
            return None
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    def serve(self) -> tuple[str, int]:
        """Start the HTTP endpoint once; returns the (host, port) it listens on."""
        with self._serve_lock:
            if self.address is not None:
                return self.address
            from prometheus_client import start_http_server

            from rmqk.spi.workers import current_worker

            worker = current_worker()
            port = self.settings.port
            if worker is not None and port:
                # Each worker of `processes = N` serves its own figures, on port + its slot.
                port += worker.slot
            try:
                server, thread = start_http_server(
                    port, self.settings.host, registry=self.metrics.registry
                )
            except OSError as exc:
                raise ConfigError(
                    [
                        ConfigProblem(
                            "<config>",
                            TABLE,
                            "port",
                            f"cannot serve metrics on {self.settings.host}:{port}: "
                            f"{exc.strerror or exc}",
                        )
                    ]
                ) from exc
            self.server, self._thread = server, thread
            self.address = (self.settings.host, int(server.server_address[1]))
            log.info("serving metrics on %s", self.url)
            return self.address

    def close(self) -> None:
        with self._serve_lock:
            if self.server is not None:
                self.server.shutdown()
                self.server.server_close()
                self.server = None
            self.address = None

    @hookimpl
    def rmqk_consume_message_before(self, context: ConsumeMessageContext) -> None:
        self.metrics.before(context)

    @hookimpl
    def rmqk_consume_message_after(self, context: ConsumeMessageContext) -> None:
        self.metrics.after(context)

    @hookimpl
    def rmqk_queues_changed(
        self,
        consumer: ConsumerView,
        topic: str,
        all_queues: Collection[MessageQueue],
        assigned: Sequence[MessageQueue],
    ) -> None:
        self.metrics.collector.track(consumer, asyncio.get_running_loop())
        try:
            self.serve()
        except ConfigError as exc:
            # Hook errors are swallowed by the engine; say it loudly once per attempt.
            log.error("%s", exc)


def _require_client() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            [
                ConfigProblem(
                    "<config>",
                    TABLE,
                    None,
                    "metrics need the prometheus_client package: "
                    "pip install 'rocketmq-kernel[prometheus]'",
                )
            ]
        ) from None


def enable(settings: PrometheusSettings | None = None, pm: Any = None) -> MetricsPlugin:
    """Register the runtime hooks (once per plugin manager) and return them.

    The endpoint starts with the first consumer that gets queues, or at once with
    ``enable(...).serve()``. Enabling again with other settings is an error.
    """
    settings = settings or PrometheusSettings()
    manager = _manager(pm)
    with _lock:
        current = manager.get_plugin(RUNTIME_PLUGIN_NAME)
        if current is not None:
            if current.settings != settings:
                raise ConfigError(
                    [
                        ConfigProblem(
                            "<config>",
                            TABLE,
                            None,
                            f"metrics are already enabled with {current.settings}; "
                            "one process serves one endpoint",
                        )
                    ]
                )
            return cast(MetricsPlugin, current)
        _require_client()
        plugin = MetricsPlugin(settings)
        manager.register(plugin, name=RUNTIME_PLUGIN_NAME)
        return plugin


def disable(pm: Any = None) -> None:
    """Unregister the runtime hooks and stop the endpoint (tests, embedding programs)."""
    manager = _manager(pm)
    with _lock:
        plugin = manager.get_plugin(RUNTIME_PLUGIN_NAME)
        if plugin is None:
            return
        manager.unregister(name=RUNTIME_PLUGIN_NAME)
    plugin.close()


def active(pm: Any = None) -> MetricsPlugin | None:
    """The enabled runtime hooks, or None while metrics are off."""
    return cast(MetricsPlugin | None, _manager(pm).get_plugin(RUNTIME_PLUGIN_NAME))


def _manager(pm: Any) -> Any:
    from rmqk.spi.registry import get_plugin_manager

    return pm or get_plugin_manager()


@hookimpl
def rmqk_check_config(config: Mapping[str, Any]) -> None:
    """Check the ``[prometheus]`` table; nothing is enabled (``rmqk check``)."""
    table = config.get(TABLE)
    if table is not None:
        PrometheusSettings.from_table(table)


@hookimpl
def rmqk_configure(config: Mapping[str, Any]) -> None:
    table = config.get(TABLE)
    if table is None:
        return
    settings = PrometheusSettings.from_table(table)
    enable(settings)
