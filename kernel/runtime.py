"""Running the consumers a config file composes, each delivering to its sink."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from typing import Any

from rmqk.config import Config, ConsumerSpec, announce_config
from rmqk.contracts import Sink
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.errors import ClientError
from rmqk.logsetup import log_context
from rmqk.message import MessageExt
from rmqk.pluginmanager import registries

__all__ = ["ComposedConsumer", "install_stop_signals", "run_config"]

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
        self.consumer = AsyncPushConsumer(spec.group, spec.options)
        for sub in spec.subscriptions:
            self.consumer.subscribe(sub.topic, sub.sub_string, sub.expression_type.value)
        sink = self.sink

        async def deliver(messages: list[MessageExt], context: Any) -> None:
            queue = context.queue
            await sink.write(queue, messages)

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


async def run_config(
    config: Config,
    stop: asyncio.Event,
    names: Sequence[str] | None = None,
    on_started: Callable[[Sequence[ComposedConsumer]], None] | None = None,
) -> None:
    """Start every composed consumer (or those named), run until ``stop`` is set, stop them."""
    announce_config(config)
    specs = [s for s in config.consumers if not names or s.name in names]
    if names:
        missing = sorted(set(names) - {s.name for s in specs})
        if missing:
            known = ", ".join(s.name for s in config.consumers)
            raise ClientError(
                f"no consumer named {', '.join(missing)} in {config.path}; consumers: {known}"
            )
    running: list[ComposedConsumer] = []
    try:
        for spec in specs:
            composed = ComposedConsumer(spec)
            await composed.start()
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
