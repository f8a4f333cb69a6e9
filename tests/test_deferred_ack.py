"""Async listeners that return a future: the batch is acknowledged when it resolves.

This is how a group-commit sink keeps many batches in flight without holding a
consume worker per batch. Over real TCP against the embedded broker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
from engine_support import (
    FAST_RETRY_MARKS,
    committed_offsets,
    create_topic,
    produce,
    push_consumer,
    wait_for,
)

from rmqk.model import MessageModel
from rmqk.model.message import MessageExt
from rmqk.spi.factory import PluginFactory

pytestmark = FAST_RETRY_MARKS


consumer = push_consumer


async def test_pending_futures_do_not_hold_workers_and_ack_on_resolution(broker: Any) -> None:
    await create_topic(broker, "Deferred", 2)
    total = 2_000
    await produce(broker.namesrv_addr, "Deferred", (f"m{i}".encode() for i in range(total)))
    loop = asyncio.get_running_loop()
    pending: list[tuple[asyncio.Future[None], list[MessageExt]]] = []

    # One worker: if a pending future held it, no second batch would ever arrive.
    c = consumer(broker, "g-deferred", consume_thread_min=1, consume_thread_max=1)
    c.subscribe("Deferred", "*")

    @c.register_listener
    async def listener(msgs: list[MessageExt]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = loop.create_future()
        pending.append((fut, list(msgs)))
        return fut

    await c.start()
    try:
        # Everything the flow control lets in arrives while nothing is resolved.
        await wait_for(lambda: sum(len(m) for _, m in pending) >= total, 30, "all batches")
        assert len(pending) >= total // 32
        # Nothing is acknowledged yet: the offsets stay where consumption began.
        assert all(v == 0 for v in c.offset_store.clone_offset_table("Deferred").values())
        assert all(
            pq.msg_count > 0
            for mq, pq in c.rebalance.process_queue_table.items()
            if mq.topic == "Deferred"
        )
        seen = Counter(m.body for _, msgs in pending for m in msgs)
        assert len(seen) == total and max(seen.values()) == 1
        for fut, _ in pending:
            fut.set_result(None)
        await wait_for(
            lambda: all(
                pq.msg_count == 0
                for mq, pq in c.rebalance.process_queue_table.items()
                if mq.topic == "Deferred"
            ),
            30,
            "process queues drained",
        )
        await c.persist_consumer_offset()
        offsets = await committed_offsets(
            broker.namesrv_addr, broker.broker_addr, "g-deferred", "Deferred", 2
        )
        assert sum(v or 0 for v in offsets.values()) == total
    finally:
        await c.shutdown()


async def test_a_failed_future_sends_the_batch_back_for_retry(broker: Any) -> None:
    await create_topic(broker, "DeferredFail", 1)
    await produce(broker.namesrv_addr, "DeferredFail", (f"f{i}".encode() for i in range(10)))
    loop = asyncio.get_running_loop()
    deliveries: Counter[tuple[bytes, int]] = Counter()

    c = consumer(broker, "g-deferred-fail", max_reconsume_times=3)
    c.subscribe("DeferredFail", "*")

    @c.register_listener
    async def listener(msgs: list[MessageExt]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = loop.create_future()
        for m in msgs:
            deliveries[(m.body, m.reconsume_times)] += 1
        first_time = all(m.reconsume_times == 0 for m in msgs)
        # Resolve later, from another callback, as a sink's flush would.
        if first_time:
            loop.call_later(0.05, fut.set_exception, OSError("flush failed"))
        else:
            loop.call_later(0.05, fut.set_result, None)
        return fut

    await c.start()
    try:
        await wait_for(
            lambda: sum(n for (_, times), n in deliveries.items() if times == 1) >= 10,
            60,
            "every message retried once",
        )
        await asyncio.sleep(1.0)  # a retry that succeeded is not delivered again
        first = {body for (body, times) in deliveries if times == 0}
        again = {body for (body, times) in deliveries if times == 1}
        assert first == again == {f"f{i}".encode() for i in range(10)}
        assert not any(times > 1 for (_, times) in deliveries)
    finally:
        await c.shutdown()


class WindowSink:
    """A group-commit sink in miniature: submit() returns the future of the next flush."""

    window_rows = 6_000

    def __init__(self, options: Any = None) -> None:
        self.buffer: list[tuple[asyncio.Future[None], list[MessageExt]]] = []
        self.flushed_rows: list[int] = []
        self.bodies: Counter[bytes] = Counter()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._flush_loop())

    def submit(self, queue: Any, messages: Any) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buffer.append((fut, list(messages)))
        return fut

    async def write(self, queue: Any, messages: Any) -> None:
        await self.submit(queue, messages)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(0.3)
            batch, self.buffer = self.buffer, []
            if batch:
                self.flushed_rows.append(sum(len(m) for _, m in batch))
            for fut, msgs in batch:
                self.bodies.update(m.body for m in msgs)
                fut.set_result(None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def test_widen_for_sink_moves_only_the_limits_the_file_left_alone() -> None:
    from rmqk.app.runtime import widen_for_sink
    from rmqk.options import ConsumerOptions

    base = ConsumerOptions()
    wide = widen_for_sink(base, 200_000)
    # Twice the window: Java's division counts the %RETRY% queue (clustering only).
    assert wide.pull_threshold_for_topic == 400_000
    broadcast = widen_for_sink(attrs.evolve(base, message_model=MessageModel.BROADCASTING), 200_000)
    assert broadcast.pull_threshold_for_topic == 200_000
    assert widen_for_sink(base, 5_000_000).pull_threshold_for_topic == 6_553_500
    assert wide.consume_concurrently_max_span == 65_535  # the option's maximum
    assert wide.pull_threshold_for_queue == base.pull_threshold_for_queue
    kept = widen_for_sink(base, 5_000, frozenset({"pull_threshold_for_topic"}))
    assert kept.pull_threshold_for_topic == -1
    assert kept.consume_concurrently_max_span == 5_000
    assert widen_for_sink(base, 10, frozenset()).consume_concurrently_max_span == 2_000


async def run_composed_with_sink(
    broker: Any,
    tmp_path: Path,
    topic: str,
    total: int,
    sink_class: type[WindowSink],
    timeout: float,
    check: Any = None,
) -> Any:
    """``total`` messages on a one-queue topic through ``rmqk run``'s composition into the
    sink; the sink once every message was acknowledged (``check(composed)`` before start)."""
    from rmqk.app.config import load_config
    from rmqk.app.runtime import ComposedConsumer
    from rmqk.pluginmanager import get_plugin_manager, reset_plugin_manager
    from rmqk.spi.hookspecs import hookimpl

    name = f"{topic.lower()}-test"

    class Plugin:
        @hookimpl
        def rmqk_register_sinks(self, register: Any) -> None:
            register(PluginFactory(name, lambda context, options: sink_class(options)))

    await create_topic(broker, topic, 1)
    await produce(broker.namesrv_addr, topic, (f"{topic}{i}".encode() for i in range(total)))
    config = tmp_path / "c.toml"
    config.write_text(
        "[consumers.c]\n"
        f'group = "g-{name}"\n'
        f'namesrv_addr = "{broker.namesrv_addr}"\n'
        f'subscription = {{ {topic} = "*" }}\n'
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        f'sink = "{name}"\n'
    )
    reset_plugin_manager()
    get_plugin_manager().register(Plugin(), name=name)
    try:
        composed = ComposedConsumer(load_config(config).consumers[0])
        sink: Any = composed.sink
        if check is not None:
            check(composed)
        await composed.start()
        try:
            await wait_for(lambda: sum(sink.bodies.values()) >= total, timeout, "every message")
        finally:
            await composed.stop()
    finally:
        reset_plugin_manager()
    assert len(sink.bodies) == total and max(sink.bodies.values()) == 1
    return sink


async def test_composed_consumer_fills_the_sink_window(broker: Any, tmp_path: Path) -> None:
    def widened(composed: Any) -> None:
        assert composed.consumer.options.pull_threshold_for_topic == 2 * WindowSink.window_rows

    sink = await run_composed_with_sink(broker, tmp_path, "Window", 6_000, WindowSink, 60, widened)
    # Java's default of 1,000 per queue would cap every flush near 1,000 rows.
    assert max(sink.flushed_rows) > 2_000


class HoldingSink(WindowSink):
    """Acknowledges nothing until a whole window of rows waits on it."""

    window_rows = 3_000
    total = 2 * window_rows

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.most_waiting = 0

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            waiting = sum(len(m) for _, m in self.buffer)
            self.most_waiting = max(self.most_waiting, waiting)
            if waiting < self.window_rows and sum(self.bodies.values()) + waiting < self.total:
                continue
            batch, self.buffer = self.buffer, []
            self.flushed_rows.append(waiting)
            for fut, msgs in batch:
                self.bodies.update(m.body for m in msgs)
                fut.set_result(None)


async def test_one_queue_beside_the_retry_queue_still_holds_the_whole_window(
    broker: Any, tmp_path: Path
) -> None:
    """Java gives the %RETRY% queue a share of pull_threshold_for_topic: a consumer of one
    queue got only half the window, and a sink waiting for a full window never flushed."""
    sink = await run_composed_with_sink(
        broker, tmp_path, "Holding", HoldingSink.total, HoldingSink, 20
    )
    assert sink.flushed_rows[0] >= HoldingSink.window_rows, sink.most_waiting


async def test_with_consume_hooks_pending_futures_hold_no_worker(broker: Any) -> None:
    """A metrics or trace plugin (consume hooks) must not make each deferred batch hold a
    consume worker until its flush: the after hook runs when the future resolves."""
    from rmqk.pluginmanager import get_plugin_manager
    from rmqk.spi.contexts import ConsumeMessageContext
    from rmqk.spi.hookspecs import hookimpl

    after: list[tuple[int, bool, str | None]] = []

    class Metrics:
        @hookimpl
        def rmqk_consume_message_after(self, context: ConsumeMessageContext) -> None:
            after.append((len(context.messages), context.success, context.return_type))

    await create_topic(broker, "DeferredHooked", 2)
    total = 640
    await produce(broker.namesrv_addr, "DeferredHooked", (f"h{i}".encode() for i in range(total)))
    loop = asyncio.get_running_loop()
    pending: list[tuple[asyncio.Future[None], list[MessageExt]]] = []
    pm = get_plugin_manager()
    pm.register(Metrics(), name="test-metrics")
    c = consumer(broker, "g-deferred-hooked", consume_thread_min=1, consume_thread_max=1)
    c.subscribe("DeferredHooked", "*")

    @c.register_listener
    async def listener(msgs: list[MessageExt]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = loop.create_future()
        pending.append((fut, list(msgs)))
        return fut

    try:
        await c.start()
        try:
            await wait_for(
                lambda: sum(len(m) for _, m in pending) >= total, 30, "every batch unresolved"
            )
            assert after == []  # nothing concluded before its future resolves
            batches = len(pending)
            failed = len(pending[0][1])
            pending[0][0].set_exception(RuntimeError("flush failed"))
            for fut, _ in pending[1:]:
                fut.set_result(None)
            await wait_for(lambda: len(after) >= batches, 30, "an after hook per batch")
            assert (failed, False, "EXCEPTION") in after[:batches]
            assert sum(n for n, ok, _ in after[:batches] if ok) == total - failed
            # The failed batch comes back through the retry topic and is consumed again.
            await wait_for(lambda: len(pending) > batches, 30, "the failed batch again")
            assert sorted(m.body for m in pending[batches][1]) == sorted(
                m.body for m in pending[0][1]
            )
        finally:
            for fut, _ in pending:
                if not fut.done():
                    fut.set_result(None)
            await c.shutdown()
    finally:
        pm.unregister(name="test-metrics")
