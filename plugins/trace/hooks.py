"""The trace hooks: Java's ConsumeMessageTraceHookImpl and SendMessageTraceHookImpl.

One :class:`TraceRuntime` per process holds a dispatcher per traced client
(by wire group); its hooks ignore every client that did not enable tracing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from rmqk.model import SendStatus
from rmqk.model.message import MessageExt
from rmqk.model.namespace import unwrap
from rmqk.plugins.trace.dispatcher import AsyncTraceDispatcher
from rmqk.plugins.trace.records import (
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
)
from rmqk.spi.contexts import ConsumeMessageContext, SendMessageContext
from rmqk.spi.hookspecs import hookimpl
from rmqk.wire.uniq_id import create_uniq_id

__all__ = ["TraceRuntime", "TracedClient"]

# Java's MessageConst.PROPERTY_MSG_REGION and PROPERTY_TRACE_SWITCH.
MSG_REGION = "MSG_REGION"
TRACE_ON = "TRACE_ON"

# Where the before hooks leave what the after hooks need.
_REQUEST_ID = "rmqk.trace.requestId"
_BEGIN = "rmqk.trace.begin"
_REGION = "rmqk.trace.region"
_PUB = "rmqk.trace.pub"


def _now_ms() -> int:
    return int(time.time() * 1000)


@attrs.define
class TracedClient:
    """One traced consumer or producer: its dispatcher and how to name it in records."""

    dispatcher: AsyncTraceDispatcher
    namespace: str | None
    cloud: bool = False
    clients: int = 1


class TraceRuntime:
    """The consume and send hooks, registered while some client has tracing on."""

    def __init__(self) -> None:
        self.consumers: dict[str, TracedClient] = {}
        self.producers: dict[str, TracedClient] = {}

    @property
    def empty(self) -> bool:
        return not self.consumers and not self.producers

    # -- consuming -----------------------------------------------------------------------

    @staticmethod
    def _beans(msgs: Sequence[MessageExt], namespace: str | None) -> list[TraceBean]:
        beans = []
        for msg in msgs:
            if msg.properties.get(TRACE_ON) == "false":
                continue
            beans.append(
                TraceBean(
                    topic=unwrap(namespace, msg.topic),
                    msg_id=msg.msg_id,
                    tags=msg.tags,
                    keys=msg.keys,
                    retry_times=msg.reconsume_times,
                    body_length=msg.store_size,
                )
            )
        return beans

    @hookimpl
    def rmqk_consume_message_before(self, context: ConsumeMessageContext) -> None:
        traced = self.consumers.get(context.consumer_group)
        if traced is None or not context.messages:
            return
        beans = self._beans(context.messages, traced.namespace)
        if not beans:
            return
        # Java takes the region of the batch's last traced message.
        region = None
        for msg in context.messages:
            if msg.properties.get(TRACE_ON) != "false":
                region = msg.properties.get(MSG_REGION)
        request_id, begin = create_uniq_id(), _now_ms()
        context.props[_REQUEST_ID] = request_id
        context.props[_BEGIN] = str(begin)
        if region is not None:
            context.props[_REGION] = region
        traced.dispatcher.append(
            TraceContext(
                TraceType.SubBefore,
                begin,
                tuple(beans),
                region_id=region,
                group_name=unwrap(traced.namespace, context.consumer_group),
                request_id=request_id,
            )
        )

    @hookimpl
    def rmqk_consume_message_after(self, context: ConsumeMessageContext) -> None:
        traced = self.consumers.get(context.consumer_group)
        request_id = context.props.get(_REQUEST_ID)
        if traced is None or request_id is None or not context.messages:
            return
        beans = self._beans(context.messages, traced.namespace)
        now = _now_ms()
        cost = (now - int(context.props[_BEGIN])) // len(context.messages)
        traced.dispatcher.append(
            TraceContext(
                TraceType.SubAfter,
                now,
                tuple(beans),
                region_id=context.props.get(_REGION),
                group_name=unwrap(traced.namespace, context.consumer_group),
                cost_time=int(cost),
                success=context.success,
                request_id=request_id,
                context_code=int(_return_type(context)),
                cloud=traced.cloud,
            )
        )

    # -- producing -----------------------------------------------------------------------

    @hookimpl
    def rmqk_send_message_before(self, context: SendMessageContext) -> None:
        traced = self.producers.get(context.producer_group)
        if traced is None or context.topic.startswith(traced.dispatcher.trace_topic):
            return
        context.props[_PUB] = _now_ms()

    @hookimpl
    def rmqk_send_message_after(self, context: SendMessageContext) -> None:
        traced = self.producers.get(context.producer_group)
        begin = context.props.get(_PUB)
        result = context.send_result
        if traced is None or begin is None or result is None or result.region_id is None:
            return
        props = context.properties
        bean = TraceBean(
            topic=unwrap(traced.namespace, context.topic),
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            tags=props.get("TAGS"),
            keys=props.get("KEYS"),
            store_host=context.broker_addr,
            body_length=context.body_length,
            msg_type=MessageType[context.msg_type],
        )
        traced.dispatcher.append(
            TraceContext(
                TraceType.Pub,
                int(begin),
                (bean,),
                region_id=result.region_id,
                group_name=unwrap(traced.namespace, context.producer_group),
                cost_time=_now_ms() - int(begin),
                success=result.status is SendStatus.SEND_OK,
            )
        )


def _return_type(context: ConsumeMessageContext) -> ConsumeReturnType:
    """The context's ConsumeReturnType; derived as Java's orderly service does when unset."""
    if context.return_type in ConsumeReturnType.__members__:
        return ConsumeReturnType[context.return_type]  # type: ignore[misc]
    if context.exception is not None:
        return ConsumeReturnType.EXCEPTION
    return ConsumeReturnType.SUCCESS if context.success else ConsumeReturnType.FAILED
