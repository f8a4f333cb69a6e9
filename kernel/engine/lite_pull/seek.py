"""Positions of a lite pull consumer's queues: seek, position, committed, offsets by time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rmqk.engine.lite_pull.queues import QueueState
from rmqk.model import MessageQueue, ServiceState
from rmqk.model.errors import ClientError
from rmqk.spi.contracts import ReadOffsetType

if TYPE_CHECKING:
    from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer

__all__ = ["committed", "offsets_for_times", "position", "reposition", "seek"]


async def seek(consumer: AsyncLitePullConsumer, queue: MessageQueue, offset: int) -> None:
    """Reposition ``queue`` at ``offset``, which must lie within the broker's bounds."""
    consumer.queues.held(queue)
    low = await consumer.min_offset(queue)
    high = await consumer.max_offset(queue)
    if offset < low or offset > high:
        raise ClientError(
            f"Seek offset illegal, seek offset = {offset}, min offset = {low}, "
            f"max offset = {high} ({queue})"
        )
    # Looked up again: a rebalance may have replaced or taken the queue meanwhile.
    reposition(consumer, consumer.queues.held(queue), offset)


def reposition(consumer: AsyncLitePullConsumer, state: QueueState, offset: int) -> None:
    """Restart ``state``'s queue at ``offset``: drop what was fetched, refetch from there."""
    state.generation += 1
    if state.task is not None:
        state.task.cancel()
        state.task = None
    state.pq.clear()
    consumer.buffer.discard(state)
    state.pull_offset = offset
    state.consume_offset = offset
    if consumer.state is ServiceState.RUNNING:
        consumer.fetcher.start(state)


async def position(consumer: AsyncLitePullConsumer, queue: MessageQueue) -> int:
    """The offset of the next message poll would hand out for ``queue``."""
    state = consumer.queues.held(queue)
    if state.consume_offset >= 0:
        return state.consume_offset
    first = state.pq.first_offset()
    if first is not None:
        return first
    if state.pull_offset >= 0:
        return state.pull_offset
    offset = await consumer.rebalance.compute_pull_from_where(queue)
    if offset < 0:
        raise ClientError(f"the position of {queue} cannot be read from the offset store")
    return offset


async def committed(consumer: AsyncLitePullConsumer, queue: MessageQueue) -> int:
    """The group's committed offset of ``queue`` (memory first, then the store); -1 if none."""
    offset = await consumer.offset_store.read_offset(queue, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
    if offset == -2:
        raise ClientError(f"Fetch consume offset from broker exception ({queue})")
    return offset


async def offsets_for_times(
    consumer: AsyncLitePullConsumer, timestamps: Mapping[MessageQueue, int]
) -> dict[MessageQueue, int]:
    """For each queue, the offset the broker finds for a store time in epoch ms."""
    return {mq: await consumer.search_offset(mq, ts) for mq, ts in timestamps.items()}
