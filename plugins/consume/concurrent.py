"""The ``concurrent`` consume service (Java's ConsumeMessageConcurrentlyService).

A pulled batch is split into chunks of ``consume_message_batch_max_size`` that
run in parallel on the listener pool. A chunk's failures go back to the broker's
retry flow (or, failing that, are retried locally after 5 s); the committed
offset is the lowest offset still in flight, so nothing is skipped.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Mapping
from itertools import repeat
from operator import attrgetter
from typing import Any

from rmqk.model import ConsumeStatus, MessageModel, MessageQueue
from rmqk.model.errors import SinkHalted
from rmqk.model.message import MessageExt
from rmqk.plugins.consume.backlog import Backlog, Chunk
from rmqk.plugins.consume.direct import consume_concurrently_directly
from rmqk.plugins.consume.expired import clean_expired_loop, clean_expired_messages
from rmqk.plugins.consume.status import concurrent_status
from rmqk.plugins.consume.tasks import cancel_all, spawn
from rmqk.spi.consume import ConsumeConcurrentlyContext, ConsumeHost, ListenerOutcome, QueueView
from rmqk.spi.options import OptionSpec
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = ["ConcurrentConsumeService"]

log = logging.getLogger("rmqk.plugins.consume.concurrent")

_OFFSET = attrgetter("queue_offset")

LOCAL_RETRY_DELAY_S = 5.0
# The most chunks one worker takes from the backlog at once.
MAX_GROUP = 64
# The listener time one worker may take in one thread hop when calls are quick.
GROUP_BUDGET_MS = 5.0
# Sync calls quicker than this (moving average) run one group at a time.
QUICK_CALL_MS = 0.5
# How often the pool size is adjusted to the backlog (Java: every minute, first after one).
ADJUST_INTERVAL_S = 60.0
# Below this share of adjust_thread_pool_nums_threshold the pool shrinks (Java: 0.8).
SHRINK_RATIO = 0.8


class _Acks:
    """A queue's chunks acknowledged in this loop turn, and their listener time."""

    __slots__ = ("mq", "msgs", "rt_calls", "rt_ms")

    def __init__(self, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        self.mq = mq
        self.msgs = msgs
        self.rt_ms = 0.0
        self.rt_calls = 0


class ConcurrentConsumeService:
    """A fixed pool of worker tasks drains chunks from one queue (Java's consumeExecutor).

    Workers replace a task per chunk: an enqueue and a dequeue cost far less than
    a task, and a worker that finds a backlog takes its fair share of it at once
    (one thread hop for several sync listener calls), while a slow listener's
    chunks still spread across all workers.

    An async listener may return a :class:`rmqk.spi.consume.DeferredAck` instead of
    a status (a sink's group commit, say): the worker moves on at once and the
    chunk is acknowledged, or retried, when it is answered. Flow control
    (``pull_threshold_*``, ``consume_concurrently_max_span``) then bounds what is
    in flight, not ``consume_thread_min``.
    """

    orderly = False
    # It takes no consume_service_options: any key given is an error.
    option_specs: tuple[OptionSpec, ...] = ()

    def __init__(self, host: ConsumeHost, options: Mapping[str, Any]) -> None:
        self.host = host
        self._queue: Backlog[Chunk] = Backlog()
        self._workers: list[asyncio.Task[None]] = []
        self._worker_by_index: dict[int, asyncio.Task[None]] = {}
        self._adjuster: asyncio.Task[None] | None = None
        # Internal, not an option: a test shortens it.
        self._adjust_interval_s = ADJUST_INTERVAL_S
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cleaner: asyncio.Task[None] | None = None
        self._stopped = False
        opts = host.options
        # Java's ThreadPoolExecutor over an unbounded queue runs only its core size.
        self.worker_count = opts.consume_thread_min
        self._busy = 0
        self._deferred = 0  # chunks whose deferred acknowledgement is not yet answered
        # The context the done callbacks run in: one, not a copy per call (a sink keeps
        # thousands of chunks in flight, and each copy is one more object for the
        # cyclic GC to walk). They set no context variable; they log and spawn tasks.
        self._callback_context = contextvars.copy_context()
        self._acks: dict[QueueView, _Acks] = {}
        self._retry_topic = host.retry_topic
        # Moving average of a sync listener call; starts high so that the first
        # groups are fair shares until calls are seen to be quick.
        self._call_ms = GROUP_BUDGET_MS
        self._quick_gate = asyncio.Lock()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._callback_context = contextvars.copy_context()
        self._cleaner = loop.create_task(clean_expired_loop(self.host))
        if self.host.listener.is_async:
            self._workers = [
                loop.create_task(self._async_worker(), name=f"ConsumeMessageThread_{i}")
                for i in range(self.worker_count)
            ]
        else:
            for i in range(self.worker_count):
                self._start_worker(i)
            # Only a sync listener has a pool to adjust (an async one runs on the loop).
            self._adjuster = loop.create_task(self._adjust_loop())

    def _start_worker(self, index: int) -> None:
        task = asyncio.get_running_loop().create_task(
            self._worker(index), name=f"ConsumeMessageThread_{index}"
        )
        self._worker_by_index[index] = task
        self._workers.append(task)

    def backlog(self) -> int:
        """The broker-side backlog of this consumer's queues (Java's computeAccumulationTotal:
        the sum of each process queue's msgAccCnt, the broker's max offset minus the newest
        pulled message's offset, as of the last pull)."""
        return sum(pq.msg_acc_cnt for _mq, pq in self.host.process_queues())

    async def _adjust_loop(self) -> None:
        while True:
            await asyncio.sleep(self._adjust_interval_s)
            try:
                self.adjust_pool()
            except Exception:
                log.exception("adjusting the consume pool of group %s failed", self.host.group)

    def adjust_pool(self) -> None:
        """Grow the pool by one thread while the backlog is above the threshold, shrink
        it by one below 80 % of it, within consume_thread_min..consume_thread_max."""
        if self._stopped or self.host.listener.is_async:
            return
        opts = self.host.options
        backlog = self.backlog()
        size = self.worker_count
        if backlog > opts.adjust_thread_pool_nums_threshold and size < opts.consume_thread_max:
            size += 1
        elif (
            backlog < opts.adjust_thread_pool_nums_threshold * SHRINK_RATIO
            and size > opts.consume_thread_min
        ):
            size -= 1
        else:
            return
        log.info("group %s: backlog %d, consume pool %d -> %d threads",
                 self.host.group, backlog, self.worker_count, size)  # fmt: skip
        self.worker_count = size
        self.host.listener.resize_pool(size)
        # A worker task per thread: a surplus one ends after its current group; one
        # still finishing its last group when the pool grows again carries on.
        for i in range(size):
            task = self._worker_by_index.get(i)
            if task is None or task.done():
                self._start_worker(i)
        self._workers = [t for t in self._workers if not t.done()]

    async def shutdown(self, await_termination_ms: int) -> None:
        """Take no more chunks; wait up to ``await_termination_ms`` for those under way.

        Chunks no worker has begun stay unacknowledged in their process queues, so
        the committed offsets stop below them and they come again after a restart.
        Chunks whose listener call or deferred write finishes within the wait are
        acknowledged before this returns, because the consumer persists its
        offsets right after (Java: the consume executor's graceful shutdown, then
        persistConsumerOffset). A deferred write still pending at the deadline is
        cancelled: a group-commit sink then withdraws a batch no flush has taken.
        """
        self._stopped = True
        if self._cleaner is not None:
            self._cleaner.cancel()
        if self._adjuster is not None:
            self._adjuster.cancel()
        while not self._queue.empty():
            self._queue.get_nowait()
        under_way = f"{self._busy} listener calls and {self._deferred} deferred writes"
        if await_termination_ms > 0 and (self._busy or self._deferred):
            log.info("group %s stopping: waiting up to %d ms for %s", self.host.group,
                     await_termination_ms, under_way)  # fmt: skip
            deadline = time.monotonic() + await_termination_ms / 1000
            while (self._busy or self._deferred) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if self._busy or self._deferred:
            log.warning(
                "group %s stopped with %s still under way after %d ms (await_termination_"
                "millis_when_shutdown); those batches are not acknowledged: consumed again",
                self.host.group,
                f"{self._busy} listener calls and {self._deferred} deferred writes",
                await_termination_ms,
            )
        # Answered meanwhile or not at all: those not answered stay unacknowledged.
        await self.host.listener.cancel_deferred()
        await cancel_all([*self._workers, *self._tasks])
        self._workers = []
        # Acknowledgements still waiting for their loop turn count before the
        # consumer drops its queues and persists the offsets.
        self._flush_acks()

    def submit(
        self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        if self._stopped:
            return
        size = self.host.options.consume_message_batch_max_size
        put = self._queue.put_nowait
        if len(msgs) <= size:
            put(Chunk(msgs, pq, mq))
            return
        for i in range(0, len(msgs), size):
            put(Chunk(msgs[i : i + size], pq, mq))

    def _stamp(self, r: Chunk, started: int) -> None:
        if r.mq.topic == self._retry_topic:
            self.host.reset_retry_topic(r.msgs)
        # When each message's consume began, for cleanExpiredMsg.
        msgs = r.msgs
        if len(msgs) == 1:
            r.pq.consume_started[msgs[0].queue_offset] = started
        else:
            r.pq.consume_started.update(zip(map(_OFFSET, msgs), repeat(started)))

    async def _async_worker(self) -> None:
        """The worker for an async listener: one chunk at a time, delivered inline."""
        queue = self._queue
        host = self.host
        deliver = host.deliver
        wants_context = host.listener.wants_context
        settled = self._on_settled
        while True:
            r = queue.take() or await queue.get()
            if r.pq.dropped or self._stopped:
                continue
            self._stamp(r, int(time.time() * 1000))
            ctx = ConsumeConcurrentlyContext(r.mq) if wants_context else None
            r.ctx = ctx
            self._busy += 1
            try:
                # A deferred acknowledgement: deliver returns None and settles it later.
                outcome = await deliver(r.mq, r.msgs, ctx, settled, r)
            except asyncio.CancelledError:
                self._busy -= 1
                raise
            except Exception:
                self._busy -= 1
                log.exception("consume of %s failed unexpectedly", r.mq)
                continue
            self._busy -= 1
            if outcome is None:
                self._deferred += 1
                continue
            status = outcome.status
            if (
                outcome.exception is None
                and (status is None or status is ConsumeStatus.CONSUME_SUCCESS)
                and (ctx is None or ctx.ack_index >= len(r.msgs) - 1)
            ):
                self._ack(r, outcome.duration_ms)
                continue
            try:
                await self._finish(r, ctx, outcome)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consume of %s failed unexpectedly", r.mq)

    def _ack(self, r: Chunk, rt_ms: float | None = None) -> None:
        """A chunk consumed whole: acknowledged with the others of this loop turn.

        One removal from the process queue, one offset update and one stats entry
        per queue and turn instead of per chunk (a pull of 32 is 32 chunks at
        batch size 1). ``rt_ms``, the chunk's listener time, is summed into the
        consumeRT figure the same way.
        """
        if r.pq.dropped:
            if rt_ms is not None:
                self.host.stats.consume_rt(r.mq.topic, rt_ms)
            return
        acks = self._acks
        if not acks:
            asyncio.get_running_loop().call_soon(self._flush_acks, context=self._callback_context)
        entry = acks.get(r.pq)
        if entry is None:
            acks[r.pq] = entry = _Acks(r.mq, list(r.msgs))
        else:
            entry.msgs.extend(r.msgs)
        if rt_ms is not None:
            entry.rt_ms += rt_ms
            entry.rt_calls += 1

    def _flush_acks(self) -> None:
        acks, self._acks = self._acks, {}
        host = self.host
        for pq, entry in acks.items():
            mq = entry.mq
            if entry.rt_calls:
                host.stats.add_consume_rt(mq.topic, entry.rt_ms, entry.rt_calls)
            if pq.dropped:
                continue
            host.stats.consume_ok(mq.topic, len(entry.msgs))
            host.acknowledge(mq, pq, entry.msgs)

    def _on_settled(self, r: Chunk, outcome: ListenerOutcome) -> None:
        """A chunk whose deferred acknowledgement was answered (rmqk.spi.consume.DeferredAck)."""
        self._deferred -= 1
        if self._stopped and isinstance(outcome.exception, asyncio.CancelledError):
            return  # given up at shutdown: the batch stays unacknowledged
        status, ctx = outcome.status, r.ctx
        if (
            outcome.exception is None
            and (status is None or status is ConsumeStatus.CONSUME_SUCCESS)
            and (ctx is None or ctx.ack_index >= len(r.msgs) - 1)
        ):
            self._ack(r, outcome.duration_ms)
            return
        if not self._stopped:
            spawn(self._tasks, self._finish(r, ctx, outcome))

    async def _finish(
        self, r: Chunk, ctx: ConsumeConcurrentlyContext | None, outcome: ListenerOutcome
    ) -> None:
        """The general path for one chunk's outcome: partial acks and failures."""
        status = self._status(outcome)
        self.host.stats.consume_rt(r.mq.topic, outcome.duration_ms)
        if r.pq.dropped or _halted(outcome):
            return
        await self._process_result(
            status, ctx if ctx is not None else ConsumeConcurrentlyContext(r.mq), r.msgs, r.pq, r.mq
        )

    async def _worker(self, index: int = 0) -> None:
        queue = self._queue
        gate = self._quick_gate
        while True:
            if index >= self.worker_count:
                # The pool shrank: this worker retires, as its thread does.
                if self._worker_by_index.get(index) is asyncio.current_task():
                    del self._worker_by_index[index]
                return
            # Quick calls: one group in flight at a time, so the chunks that arrive
            # meanwhile make the next group instead of a thread hop each (hops, and
            # threads contending for the GIL, cost more than such calls).
            held: list[bool] | None = None
            if self._call_ms < QUICK_CALL_MS:
                await gate.acquire()
                held = [True]
                try:
                    first = await queue.get()
                except BaseException:
                    self._release_gate(held)
                    raise
            else:
                first = await queue.get()
            group = [first]
            # One thread hop for the whole group. A fair share of the backlog keeps
            # slow listener calls spread over the threads; calls known to be quick
            # are taken in bulk, up to GROUP_BUDGET_MS of listener time per hop,
            # since a hop (a thread wake-up and a loop wake-up) costs more than them.
            backlog = queue.qsize()
            extra = backlog // self.worker_count
            if backlog > extra and self._call_ms < GROUP_BUDGET_MS:
                extra = max(extra, min(backlog, int(GROUP_BUDGET_MS / max(self._call_ms, 0.001))))
            extra = min(extra, MAX_GROUP - 1)
            for _ in range(extra):
                group.append(queue.get_nowait())
            self._busy += 1
            try:
                await self._consume_group(group, held)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consume of %d batches failed unexpectedly", len(group))
            finally:
                self._busy -= 1
                self._release_gate(held)

    def _release_gate(self, held: list[bool] | None) -> None:
        if held is not None and held[0]:
            held[0] = False
            self._quick_gate.release()

    async def _consume_group(self, group: list[Chunk], held: list[bool] | None = None) -> None:
        invoker = self.host.listener
        live = [] if self._stopped else [r for r in group if not r.pq.dropped]
        if not live:
            return
        started = int(time.time() * 1000)
        for r in live:
            self._stamp(r, started)
        # A listener that takes no context cannot set ack_index: one shared None.
        if invoker.wants_context:
            contexts: list[ConsumeConcurrentlyContext | None] = [
                ConsumeConcurrentlyContext(r.mq) for r in live
            ]
        else:
            contexts = [None] * len(live)
        requeued = False

        def give_up(started: int) -> None:
            # A slow call holds the group up: the chunks it has not reached go back to
            # the queue for other workers now, so a hung call stalls only its batch;
            # calls are no longer taken to be quick, and the gate opens.
            nonlocal requeued
            requeued = True
            self._call_ms = max(self._call_ms, GROUP_BUDGET_MS)
            self._release_gate(held)
            for r in live[started:]:
                self._queue.put_nowait(r)

        # Delivered with the client's consume interceptors around each call, if any.
        outcomes = await invoker.deliver_group(
            [(r.mq, r.msgs, ctx) for r, ctx in zip(live, contexts, strict=True)],
            on_give_up=give_up,
            watch_single=held is not None,
        )
        if len(outcomes) < len(live):
            if not requeued:
                for r in live[len(outcomes) :]:
                    self._queue.put_nowait(r)
            live = live[: len(outcomes)]
            contexts = contexts[: len(outcomes)]
        success = ConsumeStatus.CONSUME_SUCCESS
        total_ms = 0.0
        per_topic: dict[str, list[float]] = {}
        for r, ctx, outcome in zip(live, contexts, outcomes, strict=True):
            total_ms += outcome.duration_ms
            entry = per_topic.get(r.mq.topic)
            if entry is None:
                per_topic[r.mq.topic] = [outcome.duration_ms, 1]
            else:
                entry[0] += outcome.duration_ms
                entry[1] += 1
            plain = outcome.exception is None and (
                outcome.status is None or outcome.status is success
            )
            if plain and (ctx is None or ctx.ack_index >= len(r.msgs) - 1):
                self._ack(r)
                continue
            status = self._status(outcome)
            if r.pq.dropped or _halted(outcome):
                continue
            if status is success and (ctx is None or ctx.ack_index >= len(r.msgs) - 1):
                self._ack(r)
            else:
                await self._process_result(
                    status,
                    ctx if ctx is not None else ConsumeConcurrentlyContext(r.mq),
                    r.msgs,
                    r.pq,
                    r.mq,
                )
        if outcomes:
            mean_ms = total_ms / len(outcomes)
            self._call_ms += (mean_ms - self._call_ms) * 0.3
            # One statistics entry per topic and group rather than per call.
            for topic, (ms, calls) in per_topic.items():
                self.host.stats.add_consume_rt(topic, ms, int(calls))

    def _status(self, outcome: ListenerOutcome) -> ConsumeStatus:
        return concurrent_status(outcome, self.host)

    async def _process_result(
        self,
        status: ConsumeStatus,
        ctx: ConsumeConcurrentlyContext,
        msgs: list[MessageExt],
        pq: QueueView,
        mq: MessageQueue,
    ) -> None:
        host = self.host
        ack_index = ctx.ack_index
        if not msgs:
            return
        if self._stopped and status is not ConsumeStatus.CONSUME_SUCCESS:
            # A failure while stopping (a sink closing under the call, say): left
            # unacknowledged rather than sent back, it is consumed again after a restart.
            return
        if status is ConsumeStatus.CONSUME_SUCCESS:
            if ack_index >= len(msgs):
                ack_index = len(msgs) - 1
            ok = ack_index + 1
            host.stats.consume_ok(mq.topic, ok)
            if len(msgs) - ok:
                host.stats.consume_failed(mq.topic, len(msgs) - ok)
        else:
            ack_index = -1
            host.stats.consume_failed(mq.topic, len(msgs))
        failed = msgs[ack_index + 1 :]
        done = msgs
        if failed and host.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                log.warning("BROADCASTING, the message consume failed, drop it, %s", msg)
        elif failed:
            back_failed: list[MessageExt] = []
            for msg in failed:
                try:
                    await host.send_message_back(
                        msg, ctx.delay_level_when_next_consume, mq.broker_name
                    )
                except Exception as exc:
                    log.warning("send message back failed, consume it again locally later: %s", exc)
                    msg.reconsume_times += 1
                    back_failed.append(msg)
            if back_failed:
                ids = {id(m) for m in back_failed}
                done = [m for m in msgs if id(m) not in ids]
                self._retry_locally(back_failed, pq, mq)
        host.acknowledge(mq, pq, done)

    def _retry_locally(self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue) -> None:
        async def later() -> None:
            await asyncio.sleep(LOCAL_RETRY_DELAY_S)
            self.submit(msgs, pq, mq, True)

        spawn(self._tasks, later())

    async def clean_expired_messages(self) -> None:
        """Send back (delay level 3) messages whose consume began over consume_timeout ago."""
        await clean_expired_messages(self.host)

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        return await consume_concurrently_directly(self.host, msg, broker_name)


def _halted(outcome: ListenerOutcome) -> bool:
    """Whether the sink refused the batch and halts the consumer (:class:`SinkHalted`).

    Such a batch is neither acknowledged nor sent back: its offset stays
    uncommitted, and it is consumed again once the cause is fixed.
    """
    return isinstance(outcome.exception, SinkHalted)
