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
from rmqk.spi.consume import (
    CallLane,
    ConsumeConcurrentlyContext,
    ConsumeHost,
    ListenerOutcome,
    QueueView,
)
from rmqk.spi.options import OptionSpec
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = ["ConcurrentConsumeService"]

log = logging.getLogger("rmqk.plugins.consume.concurrent")

_OFFSET = attrgetter("queue_offset")

LOCAL_RETRY_DELAY_S = 5.0
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
    """Chunks of the pulled batches to the listener, in parallel (Java's consumeExecutor).

    A plain ``def`` listener's chunks go to its pool through a lane
    (:class:`rmqk.spi.consume.CallLane`): pool threads drain them while any are
    queued and hand the outcomes back in bulk, so a quick listener costs no thread
    hop per batch. Chunks for an ``async def`` listener, and every chunk while the
    client has consume hooks, are taken by worker tasks that deliver them one at a
    time through ``host.deliver``.

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
        self._lane: CallLane | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._callback_context = contextvars.copy_context()
        self._cleaner = loop.create_task(clean_expired_loop(self.host))
        if self.host.listener.is_async:
            self._workers = [
                loop.create_task(self._deliver_worker(), name=f"ConsumeMessageThread_{i}")
                for i in range(self.worker_count)
            ]
        else:
            self._lane = self.host.listener.lane(self._lane_settled, self._lane_begins)
            # Workers for the chunks delivered with the consume hooks around them.
            for i in range(self.worker_count):
                self._start_worker(i)
            # Only a sync listener has a pool to adjust (an async one runs on the loop).
            self._adjuster = loop.create_task(self._adjust_loop())

    def _start_worker(self, index: int) -> None:
        task = asyncio.get_running_loop().create_task(
            self._deliver_worker(index), name=f"ConsumeMessageThread_{index}"
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
        lane = self._lane
        if lane is not None:
            lane.take_back()  # not begun: left unacknowledged
            lane.settle_now()  # finished, handed back, not yet taken

        def calls() -> int:
            return self._busy + (lane.running() if lane is not None else 0)

        under_way = f"{calls()} listener calls and {self._deferred} deferred writes"
        if await_termination_ms > 0 and (calls() or self._deferred):
            log.info("group %s stopping: waiting up to %d ms for %s", self.host.group,
                     await_termination_ms, under_way)  # fmt: skip
            deadline = time.monotonic() + await_termination_ms / 1000
            while (calls() or self._deferred) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if calls() or self._deferred:
            log.warning(
                "group %s stopped with %s still under way after %d ms (await_termination_"
                "millis_when_shutdown); those batches are not acknowledged: consumed again",
                self.host.group,
                f"{calls()} listener calls and {self._deferred} deferred writes",
                await_termination_ms,
            )
        if lane is not None:
            lane.settle_now()
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
        if len(msgs) <= size:
            chunks = [Chunk(msgs, pq, mq)]
        else:
            chunks = [Chunk(msgs[i : i + size], pq, mq) for i in range(0, len(msgs), size)]
        lane = self._lane
        if lane is not None:
            if mq.topic == self._retry_topic:
                self.host.reset_retry_topic(msgs)
            if self.host.listener.wants_context:
                for r in chunks:
                    r.ctx = ConsumeConcurrentlyContext(mq)
                calls = [(r, mq, r.msgs, r.ctx) for r in chunks]
            else:
                calls = [(r, mq, r.msgs, None) for r in chunks]
            if lane.put(calls):
                # Quick calls begin within moments; slow ones are stamped again as they
                # begin (_lane_begins). None is acknowledged before this returns.
                _stamp_started(pq, msgs, int(time.time() * 1000))
                return
        put = self._queue.put_nowait
        for r in chunks:
            put(r)

    def _lane_begins(self, r: Chunk) -> bool:
        """In a pool thread, as a chunk's call begins: False skips it (its queue is gone)."""
        if r.pq.dropped or self._stopped:
            return False
        _stamp_started(r.pq, r.msgs, int(time.time() * 1000))
        return True

    def _lane_settled(self, done: list[tuple[Any, ListenerOutcome | None]]) -> None:
        """Outcomes of chunks the lane ran (on the loop): acknowledged as the workers'."""
        wants_context = self.host.listener.wants_context
        for r, outcome in done:
            if outcome is None:
                continue  # not called: its queue was dropped, or the service stopped
            ctx = r.ctx if wants_context else None
            if _consumed_whole(outcome, ctx, r.msgs):
                self._ack(r, outcome.duration_ms)
            elif not self._stopped:
                spawn(self._tasks, self._finish(r, ctx, outcome))

    def _stamp(self, r: Chunk, started: int) -> None:
        if r.mq.topic == self._retry_topic:
            self.host.reset_retry_topic(r.msgs)
        _stamp_started(r.pq, r.msgs, started)

    async def _deliver_worker(self, index: int = 0) -> None:
        """A worker task: one chunk at a time through ``host.deliver`` (an async listener
        inline; a sync one, with the consume hooks around it, on its pool)."""
        queue = self._queue
        host = self.host
        deliver = host.deliver
        wants_context = host.listener.wants_context
        settled = self._on_settled
        is_async = host.listener.is_async
        while True:
            if not is_async and index >= self.worker_count:
                # The pool shrank: this worker retires, as its thread does.
                if self._worker_by_index.get(index) is asyncio.current_task():
                    del self._worker_by_index[index]
                return
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
            if _consumed_whole(outcome, ctx, r.msgs):
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
        ctx = r.ctx
        if _consumed_whole(outcome, ctx, r.msgs):
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


def _consumed_whole(
    outcome: ListenerOutcome, ctx: ConsumeConcurrentlyContext | None, msgs: list[MessageExt]
) -> bool:
    """Whether a chunk is simply acknowledged: no exception, success (None counts), and
    no ``ack_index`` short of its last message. Anything else takes ``_finish``."""
    status = outcome.status
    return (
        outcome.exception is None
        and (status is None or status is ConsumeStatus.CONSUME_SUCCESS)
        and (ctx is None or ctx.ack_index >= len(msgs) - 1)
    )


def _stamp_started(pq: QueueView, msgs: list[MessageExt], started: int) -> None:
    """When each message's consume began, for cleanExpiredMsg."""
    if len(msgs) == 1:
        pq.consume_started[msgs[0].queue_offset] = started
    else:
        pq.consume_started.update(zip(map(_OFFSET, msgs), repeat(started)))


def _halted(outcome: ListenerOutcome) -> bool:
    """Whether the sink refused the batch and halts the consumer (:class:`SinkHalted`).

    Such a batch is neither acknowledged nor sent back: its offset stays
    uncommitted, and it is consumed again once the cause is fixed.
    """
    return isinstance(outcome.exception, SinkHalted)
