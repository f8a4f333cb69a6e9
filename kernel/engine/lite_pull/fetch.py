"""The lite pull consumer's fetchers: one circulating pull per held queue (PullTaskImpl)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from rmqk.engine.lite_pull.buffer import Batch
from rmqk.engine.lite_pull.queues import QueueState
from rmqk.engine.pull import (
    PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL,
    FlowControl,
    PullAPI,
    offsets_went_backwards,
)
from rmqk.model import MessageQueue, PullStatus
from rmqk.model.errors import ClientError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.model.offsets_reset import OffsetsReset
from rmqk.pluginmanager import call_event_hook, hook_has_impls
from rmqk.spi.aio import wait_event
from rmqk.spi.contexts import ConsumeMessageContext

if TYPE_CHECKING:
    from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer

__all__ = ["Fetcher"]

# DefaultLitePullConsumerImpl's fixed delays (4.9.8).
PULL_TIME_DELAY_MILLS_WHEN_PAUSE = 1000
PULL_TIME_DELAY_MILLS_ON_EXCEPTION = 3000


class Fetcher:
    """Long-polls each held queue and puts every non-empty response into the poll buffer."""

    __slots__ = ("consumer", "flow", "log", "pull_api")

    def __init__(self, consumer: AsyncLitePullConsumer, pull_api: PullAPI, flow: FlowControl):
        self.consumer = consumer
        self.pull_api = pull_api
        self.flow = flow
        self.log: logging.Logger = consumer.log

    def start(self, state: QueueState) -> None:
        if state.task is not None and not state.task.done():
            return
        state.task = asyncio.get_running_loop().create_task(
            self._loop(state, state.generation), name=f"rmqk fetch {state.mq}"
        )

    async def _loop(self, state: QueueState, generation: int) -> None:
        """The one circulating pull of a queue; ends when it goes stale."""
        consumer = self.consumer
        while consumer.is_current(state, generation):
            if state.paused:
                await wait_event(state.unpaused, PULL_TIME_DELAY_MILLS_WHEN_PAUSE / 1000)
                continue
            try:
                delay = await self._once(state, generation)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("fetching %s failed unexpectedly", state.mq)
                delay = consumer.options.pull_time_delay_mills_when_exception
            if delay > 0:
                await asyncio.sleep(delay / 1000)

    async def _once(self, state: QueueState, generation: int) -> int:
        """One pull of ``state``'s queue; returns the delay before the next one."""
        consumer = self.consumer
        mq, opts = state.mq, consumer.options
        if self.flow.blocks(state.pq, mq, len(consumer.buffer)):
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        offset = state.pull_offset
        if offset < 0:
            try:
                offset = await consumer.rebalance.compute_pull_from_where(mq)
            except RmqkError as exc:
                self.log.warning("computing the pull offset of %s failed: %s", mq, exc)
                return PULL_TIME_DELAY_MILLS_ON_EXCEPTION
            if not consumer.is_current(state, generation):
                return 0
            if offset < 0:
                self.log.warning("the pull offset of %s is not known yet; retrying", mq)
                return opts.pull_time_delay_mills_when_exception
            state.pull_offset = offset
        sub = consumer.queues.subscription_for(mq.topic, consumer.rebalance.subscription_inner)
        if sub is None:
            return opts.pull_time_delay_mills_when_exception
        state.pq.last_pull_timestamp = int(time.time() * 1000)
        result = await self.pull_api.pull(mq, sub, offset)
        if isinstance(result, int):
            return result
        if not consumer.is_current(state, generation):
            return 0
        msgs = await self.pull_api.process(mq, sub, result)
        # Filter hooks may have awaited: a seek meanwhile owns the queue's position.
        if not consumer.is_current(state, generation):
            return 0
        if msgs:
            await _consume_hooks(consumer.group, mq, msgs, consumer.hook_plugins)
            state.pq.put_messages(msgs)
            consumer.buffer.put(Batch(state, generation, msgs))
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            reset = offsets_went_backwards(mq, offset, result)
            if reset is not None:
                return await self._restart(state, generation, reset)
            self.log.warning(
                "the pull request offset illegal, %s offset=%d next=%d",
                mq,
                offset,
                result.next_begin_offset,
            )
            if result.next_begin_offset == offset:
                # Java re-pulls at once; a broker that keeps refusing must not make that a spin.
                return opts.pull_time_delay_mills_when_exception
        state.pull_offset = result.next_begin_offset
        return 0

    async def _restart(self, state: QueueState, generation: int, reset: OffsetsReset) -> int:
        """The queue's offsets went backwards: stop (fail) or start it afresh (resume).

        Java's lite pull adopts nextBeginOffset, which for this case is the new
        queue's max offset, past its new messages: resume starts from its min
        offset instead, and moves the group's offset there too, so neither a
        commit of the old position nor a restart skips them.
        """
        consumer = self.consumer
        if not consumer.offsets_went_backwards(reset):
            return 0
        try:
            await consumer._forget_queue(state.mq)
        except Exception as exc:
            consumer.fail(
                ClientError(
                    f"cannot start {state.mq} afresh after its offsets went backwards: "
                    f"forgetting its recorded offsets failed: {exc}"
                )
            )
            return 0
        if not consumer.is_current(state, generation):
            return 0
        state.pull_offset = state.consume_offset = state.processed = reset.first
        consumer.offset_store.update_offset(state.mq, reset.first, False)
        return 0


async def _consume_hooks(
    group: str, mq: MessageQueue, msgs: list[MessageExt], only: frozenset[str] | None
) -> None:
    """The consume hooks around a found pull, as Java 4.9.8's lite pull path runs them.

    DefaultLitePullConsumerImpl has no listener: it calls the hooks' before and,
    at once, after (CONSUME_SUCCESS) for each pull that found messages.
    """
    before, after = "rmqk_consume_message_before", "rmqk_consume_message_after"
    if not (hook_has_impls(before, only=only) or hook_has_impls(after, only=only)):
        return
    context = ConsumeMessageContext(group, mq, list(msgs))
    await call_event_hook(before, context=context, only=only)
    context.status = "CONSUME_SUCCESS"
    context.success = True
    context.return_type = "SUCCESS"
    await call_event_hook(after, context=context, only=only)
