"""consumeMessageDirectly: one message a console sends, consumed outside its queue, and the
result it is shown. Both consume services answer it this way, each with its own statuses."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rmqk.model import ConsumeStatus, MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.consume.status import normalize_status
from rmqk.spi.consume import ConsumeConcurrentlyContext, ConsumeHost
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = ["CONCURRENT_RESULTS", "consume_concurrently_directly", "consume_directly"]

S = TypeVar("S", bound=enum.Enum)

# The console's CMResult for each concurrent status; None is an answer not understood.
CONCURRENT_RESULTS: Mapping[ConsumeStatus | None, str] = {
    ConsumeStatus.CONSUME_SUCCESS: "CR_SUCCESS",
    ConsumeStatus.RECONSUME_LATER: "CR_LATER",
    None: "CR_RETURN_NULL",
}


async def consume_directly(
    host: ConsumeHost,
    msg: MessageExt,
    broker_name: str | None,
    *,
    context: Callable[[MessageQueue], object],
    read_status: Callable[[Any], S | None],
    results: Mapping[S | None, str],
    order: bool,
) -> ConsumeMessageDirectlyResult:
    """Call the listener once on ``msg``; ``results`` names what ``read_status`` makes of its
    answer (with a key for None), and an exception is CR_THROW_EXCEPTION with it as remark."""
    mq = MessageQueue(msg.topic, broker_name or msg.broker_name or "unknown", msg.queue_id)
    host.reset_retry_topic([msg])
    # Java runs no consume hooks on this debugging path.
    # The exception goes back to the asker as the remark, not to this log.
    outcome, _ = await host.listener.invoke(mq, [msg], context(mq), hooks=False, report=False)
    remark = None
    if outcome.exception is not None:
        result = "CR_THROW_EXCEPTION"
        remark = f"{type(outcome.exception).__name__}: {outcome.exception}"
    else:
        result = results[read_status(outcome.status)]
    return ConsumeMessageDirectlyResult(
        order=order,
        auto_commit=True,
        consume_result=result,
        remark=remark,
        spent_time_mills=int(outcome.duration_ms),
    )


async def consume_concurrently_directly(
    host: ConsumeHost, msg: MessageExt, broker_name: str | None
) -> ConsumeMessageDirectlyResult:
    return await consume_directly(
        host,
        msg,
        broker_name,
        context=ConsumeConcurrentlyContext,
        read_status=normalize_status,
        results=CONCURRENT_RESULTS,
        order=False,
    )
