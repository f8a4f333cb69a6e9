"""The producer's hook calls: the send hooks around one send attempt (Java's
sendKernelImpl with a SendMessageHook) and the client lifecycle hooks.

Kept out of the producer so that a producer nobody hooks pays one look at the
plugin manager per attempt and nothing else.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING

from rmqk.engine.send_request import CommunicationMode, Payload
from rmqk.model import MessageQueue, SendResult
from rmqk.model.message import MessageProperty, parse_properties
from rmqk.pluginmanager import call_event_hook, hook_has_impls
from rmqk.spi.contexts import ClientContext, ClientRole, SendMessageContext
from rmqk.spi.transport import SendMessageRequest

if TYPE_CHECKING:
    from rmqk.engine.producer import AsyncProducer

__all__ = ["announce", "hooked_send", "message_type"]

log = logging.getLogger("rmqk.engine.producer")

BEFORE = "rmqk_send_message_before"
AFTER = "rmqk_send_message_after"


def message_type(properties: dict[str, str]) -> str:
    """Java's MessageType name as sendKernelImpl decides it."""
    if properties.get(MessageProperty.TRANSACTION_PREPARED) == "true":
        return "Trans_Msg_Half"
    if properties.get(MessageProperty.DELAY_TIME_LEVEL) is not None:
        return "Delay_Msg"
    return "Normal_Msg"


async def hooked_send(
    producer: AsyncProducer,
    broker_name: str,
    addr: str,
    header: SendMessageRequest,
    payload: Payload,
    timeout_ms: int,
    mode: CommunicationMode,
) -> SendResult | None:
    """``transport.send_message`` with the send hooks around it when a plugin has them."""
    transport = producer.client.transport
    oneway = mode is CommunicationMode.ONEWAY
    own = producer.send_hooks
    only = producer.hook_plugins
    if not own and not (hook_has_impls(BEFORE, only=only) or hook_has_impls(AFTER, only=only)):
        return await transport.send_message(
            addr, broker_name, header, payload.body, timeout_ms, oneway=oneway
        )
    properties = parse_properties(payload.properties)
    context = SendMessageContext(
        producer_group=producer.group,
        topic=payload.topic,
        properties=properties,
        body_length=len(payload.body),
        queue=MessageQueue(header.topic, broker_name, header.queue_id),
        broker_addr=addr,
        mode=mode.value,
        msg_type=message_type(properties),
        namespace=producer.namespace,
    )
    await call_event_hook(BEFORE, context=context, only=only)
    await _own_hooks(producer, "send_message_before", context)
    try:
        result = await transport.send_message(
            addr, broker_name, header, payload.body, timeout_ms, oneway=oneway
        )
    except Exception as exc:
        context.exception = exc
        await call_event_hook(AFTER, context=context, only=only)
        await _own_hooks(producer, "send_message_after", context)
        raise
    context.send_result = result
    await call_event_hook(AFTER, context=context, only=only)
    await _own_hooks(producer, "send_message_after", context)
    return result


async def _own_hooks(producer: AsyncProducer, method: str, context: SendMessageContext) -> None:
    """The producer's own send hooks (register_send_message_hook), after the plugins',
    in registration order; one that raises is logged and the send goes on."""
    for hook in list(producer.send_hooks):
        call = getattr(hook, method, None)
        if call is None:
            continue
        try:
            result = call(context)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("send hook %r of producer %s failed in %s", hook, producer.group, method)


async def announce(producer: AsyncProducer, hook: str) -> None:
    """Call ``rmqk_client_started`` or ``rmqk_client_shutdown`` for ``producer``."""
    context = ClientContext(
        role=ClientRole.PRODUCER,
        group=producer.group,
        namespace=producer.namespace,
        namesrv_addrs=producer.namesrv_addrs,
        options=producer.options,
        client=producer,
        transport=producer.transport_name,
        transport_options=dict(producer.transport_options),
        use_tls=producer.client_options.use_tls,
        client_options=producer.client_options,
    )
    await call_event_hook(hook, context=context)
