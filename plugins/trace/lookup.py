"""Finding a message's trace: the trace messages keyed by its id, and what they say.

:func:`find_trace_messages` is the one place that knows how trace messages are
found. Apache's tools ask the broker's index (QUERY_MESSAGE by key); until the
embedded broker answers that, it reads the trace topic's queues from their
first offset and keeps the messages whose keys name the id, which works on any
4.9 broker, only slower on a large trace topic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import attrs

from rmqk.errors import ClientError
from rmqk.message import MessageExt, MessageProperty
from rmqk.model import MessageQueue, PullStatus
from rmqk.plugins.trace.records import TraceContext, TraceType, decode
from rmqk.protocol import PullSysFlag
from rmqk.transport import PullMessageRequest, Transport, TransportConfig

__all__ = ["TraceView", "find_trace_messages", "trace_views"]

# What the reads call themselves on the broker (a pull with the subscription flag
# needs no group membership).
READER_GROUP = "rmqk_trace_reader"
MAX_PULL = 32


@attrs.frozen
class TraceView:
    """One record of a message's trace (Java's TraceView) and the trace message's born host."""

    context: TraceContext
    client_host: str
    trace_type: TraceType = attrs.field(init=False)

    @trace_type.default
    def _type(self) -> TraceType:
        return self.context.trace_type

    @property
    def status(self) -> str:
        return "success" if self.context.success else "failed"


async def find_trace_messages(
    namesrv_addrs: Iterable[str], trace_topic: str, msg_id: str, *, timeout_ms: int = 5000
) -> list[MessageExt]:
    """Every message of ``trace_topic`` whose keys include ``msg_id``, in store order."""
    from rmqk.pluginmanager import get_plugin_manager, registries

    addrs = tuple(namesrv_addrs)
    transport: Transport = registries().transports.create(
        "tcp",
        TransportConfig(
            namesrv_addrs=addrs, client_id="127.0.0.1@rmqk-trace", request_timeout_ms=timeout_ms
        ),
        get_plugin_manager().hook,
    )
    await transport.start()
    try:
        route = await transport.get_route(trace_topic, timeout_ms)
        if route is None:
            raise ClientError(
                f"trace topic {trace_topic!r} does not exist on the name server(s) "
                f"{';'.join(addrs)}: no client has written a trace there"
            )
        found: list[MessageExt] = []
        for mq in sorted(route.subscribe_queues(trace_topic)):
            broker = route.broker(mq.broker_name)
            addr = broker.select_addr() if broker is not None else None
            if addr is None:
                continue
            async for msg in _read_queue(transport, addr, mq, timeout_ms):
                keys = (msg.keys or "").split(MessageProperty.KEY_SEPARATOR)
                if msg_id in keys:
                    found.append(msg)
        found.sort(key=lambda m: (m.store_timestamp, m.queue_offset))
        return found
    finally:
        await transport.close()


async def _read_queue(
    transport: Transport, addr: str, mq: MessageQueue, timeout_ms: int
) -> AsyncIterator[MessageExt]:
    offset = await transport.get_min_offset(addr, mq, timeout_ms)
    end = await transport.get_max_offset(addr, mq, timeout_ms)
    while offset < end:
        request = PullMessageRequest(
            consumer_group=READER_GROUP,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=MAX_PULL,
            sys_flag=int(PullSysFlag.SUBSCRIPTION),
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            broker_name=mq.broker_name,
        )
        result = await transport.pull_message(addr, request, timeout_ms)
        if result.status is PullStatus.FOUND:
            for msg in result.messages:
                yield msg
            last = max((m.queue_offset for m in result.messages), default=offset)
            offset = max(result.next_begin_offset, last + 1)
        elif result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
            offset = result.min_offset
        else:
            return


def trace_views(msg_id: str, messages: Iterable[MessageExt]) -> list[TraceView]:
    """The records about ``msg_id`` in ``messages`` (Java's TraceView.decodeFromTraceTransData)."""
    views: list[TraceView] = []
    for message in messages:
        source = f"trace message {message.msg_id} ({message.topic})"
        body = message.body.decode("utf-8", "replace")
        # Java shows the born host's address without the port.
        host = message.born_host.rpartition(":")[0] or message.born_host
        for ctx in decode(body, source):
            if ctx.beans and ctx.beans[0].msg_id == msg_id:
                views.append(TraceView(ctx, host))
    return views
