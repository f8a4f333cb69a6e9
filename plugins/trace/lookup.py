"""Finding a message's trace: the trace messages keyed by its id, and what they say.

:func:`find_trace_messages` is the one place that knows how trace messages are
found. As ``mqadmin queryMsgTraceById``, it asks each broker of the trace topic
its message index (QUERY_MESSAGE with the message id as key). A broker that
cannot query (REQUEST_CODE_NOT_SUPPORTED: a 4.x broker built without the index)
has its queues of the trace topic read from their first offset instead, which
works on any broker, only slower on a large trace topic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from rmqk import RangeReader, ReaderSettings
from rmqk.model.errors import ClientError, RemotingError
from rmqk.model.message import MessageExt, MessageProperty
from rmqk.plugins.trace.records import TraceContext, TraceType, decode
from rmqk.spi.client_options import ClientOptions

if TYPE_CHECKING:
    from rmqk.plugins.admin.admin_client import BrokerInfo, QueryResult

__all__ = ["TraceView", "find_trace_messages", "trace_views"]

log = logging.getLogger("rmqk.plugins.trace")

# What the reads call themselves on the broker (a pull with the subscription flag
# needs no group membership).
READER_GROUP = "rmqk_trace_reader"
# The maxNum queryMsgTraceById asks for (the broker caps it at maxMsgsNumBatch, 64 too).
MAX_QUERY = 64


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
    namesrv_addrs: Iterable[str],
    trace_topic: str,
    msg_id: str,
    *,
    timeout_ms: int = 5000,
    transport: str = "tcp",
    client_options: ClientOptions | None = None,
) -> list[MessageExt]:
    """Every message of ``trace_topic`` whose keys include ``msg_id``, in store order.

    ``transport`` is the registered transport a scan reads with; ``client_options``
    the TLS settings and account both the index queries and the scan connect with
    (the process defaults when None).
    """
    addrs = tuple(namesrv_addrs)
    options = client_options if client_options is not None else ClientOptions()
    brokers, result = await _query_index(addrs, trace_topic, msg_id, timeout_ms, options)
    found = list(result.messages)
    if result.unsupported:
        cannot = set(result.unsupported)
        names = {b.broker_name for b in brokers if cannot.intersection(b.addrs.values())}
        log.warning(
            "broker(s) %s cannot query messages by key (QUERY_MESSAGE: request code not "
            "supported): reading trace topic %s there from its first offset instead",
            ", ".join(sorted(cannot)),
            trace_topic,
        )
        found.extend(
            await _scan(addrs, trace_topic, msg_id, names, timeout_ms, transport, options)
        )
    if not found and len(result.failures) > len(result.unsupported):
        raise ClientError(
            f"cannot look up the trace of {msg_id} in {trace_topic!r}: "
            + "; ".join(result.failures)
        )
    found.sort(key=lambda m: (m.store_timestamp, m.queue_offset))
    return found


async def _query_index(
    addrs: tuple[str, ...],
    trace_topic: str,
    msg_id: str,
    timeout_ms: int,
    options: ClientOptions,
) -> tuple[list[BrokerInfo], QueryResult]:
    """The trace topic's brokers and what their indexes hold under ``msg_id``.

    The name servers are tried in turn, as a client fails over between them.
    """
    from rmqk.plugins.admin.admin_client import AdminClient

    unreachable: list[str] = []
    for addr in addrs:
        # What an admin client uses of the options: the TLS settings and the account.
        admin_options = ClientOptions(
            use_tls=options.use_tls,
            tls_ca_file=options.tls_ca_file,
            tls_cert_file=options.tls_cert_file,
            tls_key_file=options.tls_key_file,
            tls_verify=options.tls_verify,
            access_key=options.access_key,
            secret_key=options.secret_key,
            security_token=options.security_token,
        )
        admin = AdminClient(addr, timeout=timeout_ms / 1000, client_options=admin_options)
        async with admin:
            try:
                brokers = await admin.route_brokers(trace_topic)
            except (RemotingError, OSError, TimeoutError) as exc:
                unreachable.append(f"{addr}: {exc}")
                continue
            if not brokers:
                raise ClientError(
                    f"trace topic {trace_topic!r} does not exist on the name server(s) "
                    f"{';'.join(addrs)}: no client has written a trace there"
                )
            return brokers, await admin.query_by_key(trace_topic, msg_id, max_num=MAX_QUERY)
    raise ClientError(
        "no name server answers: " + ("; ".join(unreachable) or "namesrv_addr is not set")
    )


async def _scan(
    addrs: tuple[str, ...],
    trace_topic: str,
    msg_id: str,
    broker_names: set[str],
    timeout_ms: int,
    transport: str,
    options: ClientOptions,
) -> list[MessageExt]:
    """The messages keyed by ``msg_id`` in the queues of ``broker_names``, read in full.

    Through the engine's range reader, so ``transport`` and the filter hooks apply.
    """
    settings = ReaderSettings(
        namesrv_addrs=addrs,
        group=READER_GROUP,
        transport=transport,
        timeout_ms=timeout_ms,
        instance_name="rmqk-trace",
        use_tls=options.use_tls,
        tls=options.tls,
        credentials=options.credentials,
    )
    found: list[MessageExt] = []
    async with RangeReader.open(settings) as reader:
        for mq in await reader.queues(trace_topic):
            if mq.broker_name not in broker_names:
                continue
            start = await reader.min_offset(mq)
            end = await reader.max_offset(mq)
            # Offsets deleted while reading are gone for the lookup too: read what is left.
            async for msgs in reader.read(mq, start, end, skip_gaps=True):
                for msg in msgs:
                    keys = (msg.keys or "").split(MessageProperty.KEY_SEPARATOR)
                    if msg_id in keys:
                        found.append(msg)
    return found


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
