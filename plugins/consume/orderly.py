"""The ``orderly`` consume service (Java's ConsumeMessageOrderlyService).

In clustering mode a queue is consumed only while this client holds its lock on
the broker (taken before the queue is, renewed every 20 s, treated as lost
locally after 30 s). One drainer per queue takes batches in offset order; a
failed batch goes back to the head of the queue and is retried first, so a
later message is never consumed before an earlier one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from rmqk.model import ConsumeOrderlyStatus, MessageModel, MessageQueue
from rmqk.model.errors import SinkHalted
from rmqk.model.message import MessageExt
from rmqk.plugins.consume.direct import consume_directly
from rmqk.plugins.consume.status import read_status
from rmqk.plugins.consume.tasks import cancel_all, spawn
from rmqk.spi.consume import (
    REBALANCE_LOCK_INTERVAL_MS,
    ConsumeHost,
    ConsumeOrderlyContext,
    QueueView,
)
from rmqk.spi.options import JAVA_INT_MAX, OptionSpec, OptionType
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = ["OrderlyConsumeService", "normalize_orderly_status"]

log = logging.getLogger("rmqk.plugins.consume.orderly")

# rocketmq.client.maxTimeConsumeContinuously: a queue yields its drainer after this.
MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60_000


# The console's CMResult for each orderly status; None is an answer not understood.
ORDERLY_RESULTS: Mapping[ConsumeOrderlyStatus | None, str] = {
    ConsumeOrderlyStatus.SUCCESS: "CR_SUCCESS",
    ConsumeOrderlyStatus.COMMIT: "CR_COMMIT",
    ConsumeOrderlyStatus.ROLLBACK: "CR_ROLLBACK",
    ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER",
    None: "CR_RETURN_NULL",
}


def normalize_orderly_status(value: Any) -> ConsumeOrderlyStatus | None:
    return read_status(
        value,
        ConsumeOrderlyStatus,
        ConsumeOrderlyStatus.SUCCESS,
        ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
    )


class OrderlyConsumeService:
    orderly = True
    option_specs = (
        OptionSpec(
            name="max_time_consume_continuously_ms",
            value_type=OptionType.INT,
            doc=(
                "How long one queue's drainer may consume before it yields to the others "
                "(Java's rocketmq.client.maxTimeConsumeContinuously)."
            ),
            default=MAX_TIME_CONSUME_CONTINUOUSLY_MS,
            minimum=1,
            maximum=JAVA_INT_MAX,
            unit="ms",
        ),
    )

    def __init__(self, host: ConsumeHost, options: Mapping[str, Any]) -> None:
        self.host = host
        self._stopped = False
        # Batches between their listener call and their commit, for shutdown to wait on.
        self._busy = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._mq_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._lock_renewer: asyncio.Task[None] | None = None
        self.max_time_consume_continuously_ms: int = options.get(
            "max_time_consume_continuously_ms", MAX_TIME_CONSUME_CONTINUOUSLY_MS
        )

    @property
    def clustering(self) -> bool:
        return self.host.message_model is MessageModel.CLUSTERING

    async def start(self) -> None:
        if self.clustering:
            self._lock_renewer = asyncio.get_running_loop().create_task(self._renew_locks())

    async def _renew_locks(self) -> None:
        await asyncio.sleep(1.0)
        while True:
            try:
                await self.host.lock_all()
            except Exception:
                log.exception("lockAll failed")
            await asyncio.sleep(REBALANCE_LOCK_INTERVAL_MS / 1000)

    async def shutdown(self, await_termination_ms: int) -> None:
        """Take no more batches; wait up to ``await_termination_ms`` for those under way.

        A batch whose listener call finishes within the wait is committed before
        this returns (the consumer persists its offsets right after); drains that
        only wait for a lock or a retry delay are not waited for.
        """
        self._stopped = True
        if self._lock_renewer is not None:
            self._lock_renewer.cancel()
        if await_termination_ms > 0:
            deadline = time.monotonic() + await_termination_ms / 1000
            while self._busy and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if self._busy:
            log.warning(
                "group %s stopped with %d listener calls still under way after %d ms "
                "(await_termination_millis_when_shutdown); their batches are not committed "
                "and will be consumed again",
                self.host.group,
                self._busy,
                await_termination_ms,
            )
        await cancel_all(self._tasks)
        if self.clustering:
            # Synchronous unlock, so the next owner does not wait for the lock to expire.
            await self.host.unlock_all(False)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        spawn(self._tasks, coro)

    def submit(
        self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        if dispatch_to_consume and not self._stopped:
            self._spawn(self._drain(pq, mq))

    def _submit_later(self, pq: QueueView, mq: MessageQueue, delay_ms: int) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            if not self._stopped:
                await self._drain(pq, mq)

        self._spawn(later())

    def _try_lock_later_and_reconsume(self, pq: QueueView, mq: MessageQueue, delay_ms: int) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            if self._stopped:
                return
            locked = await self.host.lock(mq)
            self._submit_later(pq, mq, 10 if locked else 3000)

        self._spawn(later())

    def _suspend_ms(self, ctx: ConsumeOrderlyContext) -> int:
        value = ctx.suspend_current_queue_time_millis
        if value < 0:
            value = self.host.options.suspend_current_queue_time_millis
        return min(max(value, 10), 30_000)

    async def _drain(self, pq: QueueView, mq: MessageQueue) -> None:
        if pq.is_dropped():
            return
        mq_lock = self._mq_locks.setdefault(mq, asyncio.Lock())
        async with mq_lock:
            if pq.is_dropped():
                return
            clustering = self.clustering
            if clustering and not (pq.locked and not pq.is_lock_expired()):
                self._try_lock_later_and_reconsume(pq, mq, 100)
                return
            if pq.consume_lock is None:
                pq.consume_lock = asyncio.Lock()
            host = self.host
            batch = host.options.consume_message_batch_max_size
            begin = time.monotonic()
            while not self._stopped:
                if pq.is_dropped():
                    break
                if clustering and (not pq.locked or pq.is_lock_expired()):
                    self._try_lock_later_and_reconsume(pq, mq, 10)
                    break
                if (time.monotonic() - begin) * 1000 > self.max_time_consume_continuously_ms:
                    self._submit_later(pq, mq, 10)
                    break
                msgs = pq.take_messages(batch)
                if not msgs:
                    break  # take_messages cleared pq.consuming
                self._busy += 1
                try:
                    keep_going = await self._consume_batch(msgs, pq, mq)
                finally:
                    self._busy -= 1
                if not keep_going:
                    break

    async def _consume_batch(self, msgs: list[MessageExt], pq: QueueView, mq: MessageQueue) -> bool:
        """One batch: its delivery and the result; False stops the drain."""
        host = self.host
        host.reset_retry_topic(msgs)
        ctx = ConsumeOrderlyContext(mq)
        assert pq.consume_lock is not None  # set by _drain before its first batch
        async with pq.consume_lock:
            if pq.is_dropped():
                log.warning(
                    "the message queue not be able to consume, because it's dropped. %s", mq
                )
                return False
            # The client's consume interceptors run around the listener in deliver,
            # which also waits for a deferred acknowledgement and logs a failure.
            outcome = await host.deliver(mq, msgs, ctx)
        assert outcome is not None  # no settled callback: always the final outcome
        status = None if outcome.exception is not None else normalize_orderly_status(outcome.status)
        if status is None and outcome.exception is None:
            log.warning(
                "listener of %s returned %r; treating it as SUSPEND",
                host.group,
                outcome.status,
            )
        if status is None:
            status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        host.stats.consume_rt(mq.topic, outcome.duration_ms)
        if isinstance(outcome.exception, SinkHalted):
            # The sink halts the consumer: the batch is neither committed nor retried.
            return False
        return await self._process_result(msgs, status, ctx, pq, mq)

    async def _process_result(
        self,
        msgs: list[MessageExt],
        status: ConsumeOrderlyStatus,
        ctx: ConsumeOrderlyContext,
        pq: QueueView,
        mq: MessageQueue,
    ) -> bool:
        stats = self.host.stats
        S = ConsumeOrderlyStatus
        commit_offset = -1
        keep_going = True
        if ctx.auto_commit:
            if status in (S.SUCCESS, S.COMMIT, S.ROLLBACK):
                if status is S.ROLLBACK:
                    log.warning(
                        "the message queue consume result is illegal, we think you want to "
                        "ack these message %s",
                        mq,
                    )
                commit_offset = pq.commit()
                stats.consume_ok(mq.topic, len(msgs))
            elif await self._failed(msgs, ctx, pq, mq):
                keep_going = False
            else:
                commit_offset = pq.commit()
        else:
            if status is S.SUCCESS:
                stats.consume_ok(mq.topic, len(msgs))
            elif status is S.COMMIT:
                commit_offset = pq.commit()
            elif status is S.ROLLBACK:
                pq.rollback()
                self._submit_later(pq, mq, self._suspend_ms(ctx))
                keep_going = False
            elif await self._failed(msgs, ctx, pq, mq):
                keep_going = False
        self.host.update_offset(mq, pq, commit_offset)
        return keep_going

    async def _failed(
        self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext, pq: QueueView, mq: MessageQueue
    ) -> bool:
        """Count a failed batch; True when it is consumed again here after a suspension."""
        self.host.stats.consume_failed(mq.topic, len(msgs))
        if not await self._check_reconsume_times(msgs):
            return False
        pq.make_messages_to_consume_again(msgs)
        self._submit_later(pq, mq, self._suspend_ms(ctx))
        return True

    async def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True when the batch must be retried locally; past the maximum, DLQ instead."""
        host = self.host
        limit = host.max_reconsume_times()
        suspend = False
        for msg in msgs:
            if msg.reconsume_times >= limit:
                try:
                    # The broker routes it to %DLQ% since reconsume times reached the maximum.
                    await host.send_message_back(msg, -1, msg.broker_name or None)
                except Exception:
                    log.exception("orderly send back of %s failed; suspending", msg)
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        return await consume_directly(
            self.host,
            msg,
            broker_name,
            context=ConsumeOrderlyContext,
            read_status=normalize_orderly_status,
            results=ORDERLY_RESULTS,
            order=True,
        )
