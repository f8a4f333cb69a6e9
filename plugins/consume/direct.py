"""consumeMessageDirectly for the ``concurrent`` service: one message a console sends, consumed
outside its queue, and the result it is shown."""

from __future__ import annotations

from rmqk.consume_host import ConsumeHost
from rmqk.engine.listener import ConsumeConcurrentlyContext
from rmqk.message import MessageExt
from rmqk.model import ConsumeStatus, MessageQueue
from rmqk.plugins.consume.status import normalize_status
from rmqk.transport import ConsumeMessageDirectlyResult

__all__ = ["consume_concurrently_directly"]


async def consume_concurrently_directly(
    host: ConsumeHost, msg: MessageExt, broker_name: str | None
) -> ConsumeMessageDirectlyResult:
    mq = MessageQueue(msg.topic, broker_name or msg.broker_name or "unknown", msg.queue_id)
    ctx = ConsumeConcurrentlyContext(mq)
    host.reset_retry_topic([msg])
    # Java runs no consume hooks on this debugging path.
    outcome, _ = await host.listener.invoke(mq, [msg], ctx, hooks=False)
    remark = None
    if outcome.exception is not None:
        result = "CR_THROW_EXCEPTION"
        remark = f"{type(outcome.exception).__name__}: {outcome.exception}"
    else:
        status = normalize_status(outcome.status)
        if status is ConsumeStatus.CONSUME_SUCCESS:
            result = "CR_SUCCESS"
        elif status is ConsumeStatus.RECONSUME_LATER:
            result = "CR_LATER"
        else:
            result = "CR_RETURN_NULL"
    return ConsumeMessageDirectlyResult(
        order=False,
        auto_commit=True,
        consume_result=result,
        remark=remark,
        spent_time_mills=int(outcome.duration_ms),
    )
