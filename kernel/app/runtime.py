"""Running the consumers a config file composes, each delivering to its sink."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmqk.app.config import Config, ConsumerSpec
from rmqk.app.logsetup import log_context
from rmqk.app.preflight import preflight, sink_context, sink_step
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.listener import listener_name
from rmqk.model import MessageModel
from rmqk.model.errors import ClientError, ConfigError, RmqkError, SinkHalted
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsReset
from rmqk.options import ConsumerOptions, rehome
from rmqk.pluginmanager import registries
from rmqk.spi.contracts import BodyParsingSink, BufferedSink, OffsetsRecordingSink, Sink

__all__ = [
    "BUFFERED_STOP_GRACE_MS",
    "STOP_GRACE_MS",
    "ComposedConsumer",
    "StopTally",
    "install_stop_signals",
    "run_config",
    "sink_listener_name",
    "widen_for_sink",
]

log = logging.getLogger("rmqk.runtime")

# How long a stopping composed consumer waits for listener calls and sink writes under
# way, unless its config sets await_termination_millis_when_shutdown. Java's default (0)
# gives up on them, and a write that completes anyway is then consumed again after a
# restart: a duplicate in the sink. A stop waits only as long as the writes take.
STOP_GRACE_MS = 30_000
# The same for a group-commit sink. Closing the sink finishes every flush it has taken
# however long that takes (a Spark flush on a busy machine: tens of seconds), so a
# shorter wait would only leave those batches written but unacknowledged.
BUFFERED_STOP_GRACE_MS = 600_000


@attrs.frozen
class StopTally:
    """What one composed consumer did while it ran, for the line ``rmqk run`` ends with."""

    name: str
    group: str
    consumed: int
    failed: int
    # Queues with an offset committed at the stop; of those, the ones whose offset this
    # run moved, and by how much in all. Offsets themselves are not summed: they count
    # every earlier run's messages too, and read as a mismatch beside ``consumed``.
    committed_queues: int
    advanced_queues: int
    advanced_total: int
    elapsed_s: float
    # Queues started afresh because their offsets went backwards (on_offsets_reset).
    offsets_reset: int = 0
    # Bodies the sink could not parse and kept raw (body_format = "json").
    bad_bodies: int = 0
    # Why the sink halted the consumer (on_bad_body = "fail"), if it did.
    halted: str | None = None

    def line(self) -> str:
        resets = (
            f", {self.offsets_reset} queue(s) started afresh (offsets went backwards)"
            if self.offsets_reset
            else ""
        )
        bad = f", {self.bad_bodies:,} bad bodies kept raw" if self.bad_bodies else ""
        halted = f", halted by its sink: {self.halted}" if self.halted else ""
        return (
            f"{self.name}: {self.consumed:,} consumed, {self.failed:,} failed{bad}, "
            f"offsets advanced by {self.advanced_total:,} on {self.advanced_queues} of "
            f"{self.committed_queues} queues this run, ran {self.elapsed_s:,.1f} s{resets}"
            f"{halted}"
        )


class ComposedConsumer:
    """A consumer from config whose listener is its sink."""

    def __init__(self, spec: ConsumerSpec, config_path: str = "<config>") -> None:
        if not spec.sink:
            raise ClientError(
                f"consumer {spec.name!r} (group {spec.group}) names no sink to deliver to"
            )
        self.spec = spec
        # The file the spec came from, named by the errors of the sink.
        self.config_path = config_path
        with sink_step(config_path, spec, "factory"):
            self.sink: Sink = registries().sinks.create(
                spec.sink, sink_context(spec), spec.sink_options
            )
        options = spec.options
        sink = self.sink
        if isinstance(sink, BufferedSink) and sink.window_rows > 0:
            options = widen_for_sink(options, sink.window_rows, spec.from_file)
        if "await_termination_millis_when_shutdown" not in spec.from_file:
            grace = BUFFERED_STOP_GRACE_MS if isinstance(sink, BufferedSink) else STOP_GRACE_MS
            options = attrs.evolve(options, await_termination_millis_when_shutdown=grace)
        self.consumer = AsyncPushConsumer(spec.group, options)
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        if isinstance(sink, OffsetsRecordingSink):
            # Issue 25: the sink's commit records go backwards with the queue's offsets.
            consumer = self.consumer

            def reported(reset: OffsetsReset) -> None:
                consumer.offsets_went_backwards(reset)

            sink.watch_offsets(options.on_offsets_reset, reported)
            consumer.add_offsets_reset_listener(sink.offsets_reset)
        for sub in spec.subscriptions:
            self.consumer.subscribe(sub.topic, sub.sub_string, sub.expression_type.value)
        if isinstance(sink, BodyParsingSink):
            sink.watch_bad_bodies(
                frozenset(sub.topic for sub in spec.subscriptions), self.consumer.stats.bad_bodies
            )

        if isinstance(sink, BufferedSink):
            # Group-commit sinks: the batch is acknowledged when its flush commits, and
            # no concurrent consume worker waits for that meanwhile (orderly
            # consumption awaits the future in place, keeping each queue's order).
            buffered = sink

            async def deliver_later(messages: list[MessageExt], context: Any) -> Any:
                future = buffered.submit(context.queue, messages)
                future.add_done_callback(self._check_halted)
                return future

            self.consumer.register_listener(deliver_later, name=sink_listener_name(spec))
        else:

            async def deliver(messages: list[MessageExt], context: Any) -> None:
                try:
                    await sink.write(context.queue, messages)
                except SinkHalted as exc:
                    self._halt(exc)
                    raise

            self.consumer.register_listener(deliver, name=sink_listener_name(spec))

    def _check_halted(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            exc = future.exception()
            if isinstance(exc, SinkHalted):
                self._halt(exc)

    def _halt(self, exc: SinkHalted) -> None:
        """The sink refused to go on: the consumer stops on that error (and the run with it).

        The consume service leaves the batches failed with this error neither
        acknowledged nor sent back, so their offsets stay uncommitted.
        """
        self.consumer.fail(exc)

    async def start(self) -> None:
        # Tasks the consumer creates while starting (pull loops, consume workers, timers)
        # inherit these fields, so their log records say which consumer they belong to.
        with log_context(group=self.spec.group, consumer=self.spec.name):
            with sink_step(self.config_path, self.spec, "start"):
                await self.sink.start()
            self.started_at = time.monotonic()
            try:
                await self.consumer.start()
            except BaseException:
                # A refused start (the broker refusing the subscription) cleans up the
                # consumer; the sink it never wrote to closes too, not at loop teardown
                # with its flusher cancelled under it.
                with contextlib.suppress(Exception):
                    await self.sink.close()
                raise

    async def stop(self) -> None:
        """Stop consuming, acknowledge and commit what was written, then close the sink.

        The consumer goes first: its consume service waits (a bounded time) for
        the listener calls and sink writes under way and acknowledges them, and
        only then are the offsets persisted. A group-commit sink closes after
        that, with nothing left to write that the offsets do not cover: batches
        no flush had taken were withdrawn.
        """
        try:
            await self.consumer.shutdown()
        finally:
            self.stopped_at = time.monotonic()
            await self.sink.close()

    @property
    def failure(self) -> RmqkError | None:
        """The error the consumer stopped on by itself (on_offsets_reset = "fail"), if any."""
        return self.consumer.failure

    def tally(self) -> StopTally:
        consumer = self.consumer
        consumed = sum(t.consumed_ok_total for t in consumer.stats.topics.values())
        failed = sum(t.consumed_failed_total for t in consumer.stats.topics.values())
        offsets: dict[Any, int] = {}
        store = getattr(consumer, "offset_store", None)
        if store is not None:
            topics = {sub.topic for sub in self.spec.subscriptions} | {consumer.retry_topic}
            for topic in topics:
                with contextlib.suppress(Exception):
                    offsets.update(store.clone_offset_table(topic))
        committed = {mq: offset for mq, offset in offsets.items() if offset >= 0}
        started = consumer.run_start_offsets
        advances = [
            offset - started[mq]
            for mq, offset in committed.items()
            if mq in started and offset > started[mq]
        ]
        end = self.stopped_at if self.stopped_at is not None else time.monotonic()
        return StopTally(
            name=self.spec.name,
            group=self.spec.group,
            consumed=consumed,
            failed=failed,
            committed_queues=len(committed),
            advanced_queues=len(advances),
            advanced_total=sum(advances),
            elapsed_s=end - self.started_at if self.started_at is not None else 0.0,
            offsets_reset=sum(consumer.offsets_resets.values()),
            bad_bodies=sum(t.bad_bodies_total for t in consumer.stats.topics.values()),
            halted=str(consumer.failure) if isinstance(consumer.failure, SinkHalted) else None,
        )


def sink_listener_name(spec: ConsumerSpec) -> str:
    """What a composed consumer's failure log lines call its listener.

    The function the config names (a ``function`` sink option, as the python sink
    has: ``orders.handlers:handle_batch``), else the sink; never the wrapper that
    hands batches to the sink, whose name the user has not seen.
    """
    function = spec.sink_options.get("function") if spec.sink_options else None
    if isinstance(function, str) and function:
        return function
    if callable(function):
        return listener_name(function)
    return f"sink {spec.sink}"


def widen_for_sink(
    options: ConsumerOptions, window_rows: int, keep: frozenset[str] = frozenset()
) -> ConsumerOptions:
    """Let ``window_rows`` messages wait on a group-commit sink at once.

    Java's defaults (1,000 messages per queue, a span of 2,000 offsets) would cap
    every flush far below a sink's ``flush_rows``, so each one would wait for the
    sink's timer instead. The topic-wide message limit grows to hold the window
    and the span grows to match, except for options named in ``keep`` (those the
    config file set).

    Java divides ``pull_threshold_for_topic`` evenly over every queue the consumer
    holds, its group's ``%RETRY%`` queue included (clustering only), so n queues of
    the subscribed topics get n/(n+1) of it: half when one queue is held. Twice the
    window covers the worst case; with n queues they hold 2n/(n+1) windows at most.
    """
    changes: dict[str, Any] = {}
    if "pull_threshold_for_topic" not in keep and options.pull_threshold_for_topic == -1:
        shares = 2 if options.message_model is MessageModel.CLUSTERING else 1
        changes["pull_threshold_for_topic"] = min(window_rows * shares, 6_553_500)
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
    on_stopped: Callable[[Sequence[ComposedConsumer]], None] | None = None,
    on_created: Callable[[ComposedConsumer], None] | None = None,
) -> None:
    """Start every composed consumer (or those named), run until ``stop`` is set, stop them.

    ``on_stopped`` gets the consumers that ran, once every one of them is stopped;
    ``on_created`` gets each one before it starts (a worker pauses it there).
    A consumer that stops on an error (offsets gone backwards, a sink that halts
    with :class:`~rmqk.model.errors.SinkHalted`) stops them all, and the first such
    error is raised once they are stopped.
    """
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
                composed = ComposedConsumer(spec, config.path)
                if on_created is not None:
                    on_created(composed)
                await composed.start()
            except ConfigError as exc:
                # Plugin factories name placeholders; here the file and table are known.
                raise rehome(exc, config.path, spec.table) from exc
            running.append(composed)
            # A consumer that stops on an error (offsets gone backwards) stops the run,
            # which then ends with that error.
            composed.consumer.add_failure_listener(lambda _error: stop.set())
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
        if on_stopped is not None and running:
            on_stopped(running)
    failed = [composed.failure for composed in running if composed.failure is not None]
    if failed:
        raise failed[0]


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
