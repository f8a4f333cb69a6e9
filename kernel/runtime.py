"""Running the consumers a config file composes, each delivering to its sink."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmqk.config import Config, ConsumerSpec
from rmqk.contracts import BufferedSink, Sink
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.errors import ClientError, ConfigError
from rmqk.logsetup import log_context
from rmqk.message import MessageExt
from rmqk.options import ConsumerOptions, rehome
from rmqk.pluginmanager import registries
from rmqk.preflight import preflight

__all__ = ["ComposedConsumer", "install_stop_signals", "run_config", "widen_for_sink"]

log = logging.getLogger("rmqk.runtime")


class ComposedConsumer:
    """A consumer from config whose listener is its sink."""

    def __init__(self, spec: ConsumerSpec) -> None:
        if not spec.sink:
            raise ClientError(
                f"consumer {spec.name!r} (group {spec.group}) names no sink to deliver to"
            )
        self.spec = spec
        self.sink: Sink = registries().sinks.create(spec.sink, spec.sink_options)
        options = spec.options
        sink = self.sink
        if isinstance(sink, BufferedSink) and sink.window_rows > 0:
            options = widen_for_sink(options, sink.window_rows, spec.from_file)
        self.consumer = AsyncPushConsumer(spec.group, options)
        for sub in spec.subscriptions:
            self.consumer.subscribe(sub.topic, sub.sub_string, sub.expression_type.value)

        if isinstance(sink, BufferedSink):
            # Group-commit sinks: the batch is acknowledged when its flush commits, and
            # no concurrent consume worker waits for that meanwhile (orderly
            # consumption awaits the future in place, keeping each queue's order).
            buffered = sink

            async def deliver_later(messages: list[MessageExt], context: Any) -> Any:
                return buffered.submit(context.queue, messages)

            self.consumer.register_listener(deliver_later)
        else:

            async def deliver(messages: list[MessageExt], context: Any) -> None:
                await sink.write(context.queue, messages)

            self.consumer.register_listener(deliver)

    async def start(self) -> None:
        # Tasks the consumer creates while starting (pull loops, consume workers, timers)
        # inherit these fields, so their log records say which consumer they belong to.
        with log_context(group=self.spec.group, consumer=self.spec.name):
            await self.sink.start()
            await self.consumer.start()

    async def stop(self) -> None:
        try:
            await self.consumer.shutdown()
        finally:
            await self.sink.close()


def widen_for_sink(
    options: ConsumerOptions, window_rows: int, keep: frozenset[str] = frozenset()
) -> ConsumerOptions:
    """Let ``window_rows`` messages wait on a group-commit sink at once.

    Java's defaults (1,000 messages per queue, a span of 2,000 offsets) would cap
    every flush far below a sink's ``flush_rows``, so each one would wait for the
    sink's timer instead. The topic-wide message limit becomes the window and
    the span grows to match, except for options named in ``keep`` (those the
    config file set).
    """
    changes: dict[str, Any] = {}
    if "pull_threshold_for_topic" not in keep and options.pull_threshold_for_topic == -1:
        changes["pull_threshold_for_topic"] = min(window_rows, 6_553_500)
    if "consume_concurrently_max_span" not in keep:
        changes["consume_concurrently_max_span"] = min(
            max(window_rows, options.consume_concurrently_max_span), 65535
        )
    return attrs.evolve(options, **changes) if changes else options


async def run_config(
    config: Config,
    stop: asyncio.Event,
    names: Sequence[str] | None = None,
    on_started: Callable[[Sequence[ComposedConsumer]], None] | None = None,
) -> None:
    """Start every composed consumer (or those named), run until ``stop`` is set, stop them."""
    specs = [s for s in config.consumers if not names or s.name in names]
    if names:
        missing = sorted(set(names) - {s.name for s in specs})
        if missing:
            known = ", ".join(s.name for s in config.consumers)
            raise ClientError(
                f"no consumer named {', '.join(missing)} in {config.path}; consumers: {known}"
            )
    # The same checks as `rmqk check`, every problem at once, before anything connects.
    preflight(config, specs)
    running: list[ComposedConsumer] = []
    try:
        for spec in specs:
            try:
                composed = ComposedConsumer(spec)
                await composed.start()
            except ConfigError as exc:
                # Plugin factories name placeholders; here the file and table are known.
                raise rehome(exc, config.path, spec.table) from exc
            running.append(composed)
            log.info("consumer %s (group %s) started, sink %s", spec.name, spec.group, spec.sink)
        if on_started is not None:
            on_started(running)
        await stop.wait()
    finally:
        for composed in reversed(running):
            try:
                await composed.stop()
            except Exception:
                log.exception("stopping consumer %s failed", composed.spec.name)


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
