"""rmqk.plugins.trace: message traces in Apache RocketMQ's format (Java's message trace).

A push consumer, lite pull consumer or producer created with
``enable_msg_trace=True`` gets a dispatcher of its own when it starts
(``rmqk_client_started``): its sends write Pub records, its consumed batches
SubBefore and SubAfter records, to ``customized_trace_topic`` (default
``RMQ_SYS_TRACE_TOPIC``), encoded as Java's TraceDataEncoder encodes them and
keyed by message id and keys, so ``mqadmin queryMsgTraceById`` and the
dashboard read them. Shutting the client down flushes its records.

The consume and send hooks are registered only while some client traces,
because any consume hook takes the concurrent consume service off its
hook-free fast path. ``rmqk admin trace MSG_ID`` prints a message's trace.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rmqk.model.namespace import unwrap
from rmqk.plugins.trace.dispatcher import RMQ_SYS_TRACE_TOPIC, AsyncTraceDispatcher
from rmqk.plugins.trace.hooks import TracedClient, TraceRuntime
from rmqk.plugins.trace.records import TraceContext, TraceType, decode, encode
from rmqk.spi.client_options import AccessChannel, ClientOptions
from rmqk.spi.contexts import ClientContext, ClientRole
from rmqk.spi.hookspecs import hookimpl

__all__ = [
    "RMQ_SYS_TRACE_TOPIC",
    "AsyncTraceDispatcher",
    "TraceContext",
    "TraceRuntime",
    "TraceType",
    "decode",
    "dispatcher_of",
    "encode",
    "rmqk_client_shutdown",
    "rmqk_client_started",
]

log = logging.getLogger("rmqk.plugins.trace")

# The name the runtime hooks are registered under in the plugin manager.
RUNTIME_PLUGIN_NAME = "trace-runtime"

_lock = threading.Lock()
_runtime = TraceRuntime()


def _traced_table(context: ClientContext) -> dict[str, TracedClient] | None:
    """The traced clients of ``context``'s kind, or None when this client traces nothing."""
    if not getattr(context.options, "enable_msg_trace", False):
        return None
    if context.role is ClientRole.PRODUCER:
        return _runtime.producers
    return _runtime.consumers


def dispatcher_of(group: str, producer: bool = False) -> AsyncTraceDispatcher | None:
    """The dispatcher of the traced client of wire group ``group`` (for tests and tools)."""
    traced = (_runtime.producers if producer else _runtime.consumers).get(group)
    return traced.dispatcher if traced is not None else None


# The client options the trace producer takes from its client: it reaches the same
# cluster the same way (TLS and its files) and signs as the same account (Java gives
# the trace producer its client's RPCHook).
_CONNECTION_OPTIONS = (
    "use_tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_verify",
    "access_key",
    "secret_key",
    "security_token",
    "vip_channel_enabled",
    "mq_client_api_timeout",
)


def _connection_of(client: ClientOptions | None) -> dict[str, Any]:
    if client is None:
        return {}
    return {name: getattr(client, name) for name in _CONNECTION_OPTIONS}


@hookimpl
async def rmqk_client_started(context: ClientContext) -> None:
    table = _traced_table(context)
    if table is None:
        return
    if context.group in table:
        table[context.group].clients += 1
        return
    options = context.options
    client = context.client_options
    channel = client.access_channel if client is not None else AccessChannel.LOCAL
    cloud = channel is AccessChannel.CLOUD
    dispatcher = AsyncTraceDispatcher(
        unwrap(context.namespace, context.group),
        "PRODUCE" if context.role is ClientRole.PRODUCER else "CONSUME",
        getattr(options, "customized_trace_topic", None),
        context.namesrv_addrs,
        cloud=cloud,
        transport=context.transport,
        transport_options=context.transport_options,
        connection=_connection_of(client),
    )
    try:
        await dispatcher.start()
    except Exception as exc:
        log.warning("the trace dispatcher of %s did not start, no traces: %s", context.group, exc)
        return
    table[context.group] = TracedClient(dispatcher, context.namespace, cloud)
    from rmqk.spi.registry import get_plugin_manager

    manager = get_plugin_manager()
    with _lock:
        if manager.get_plugin(RUNTIME_PLUGIN_NAME) is None:
            manager.register(_runtime, name=RUNTIME_PLUGIN_NAME)


@hookimpl
async def rmqk_client_shutdown(context: ClientContext) -> None:
    table = _traced_table(context)
    traced = table.get(context.group) if table is not None else None
    if table is None or traced is None:
        return
    traced.clients -= 1
    if traced.clients > 0:
        return
    del table[context.group]
    from rmqk.spi.registry import get_plugin_manager

    manager = get_plugin_manager()
    with _lock:
        if _runtime.empty and manager.get_plugin(RUNTIME_PLUGIN_NAME) is _runtime:
            manager.unregister(name=RUNTIME_PLUGIN_NAME)
    await traced.dispatcher.shutdown()
