"""Trace records as Java's TraceDataEncoder writes and reads them, byte for byte.

A record is its fields joined by CONTENT_SPLITOR (char 1) and ended by
FIELD_SPLITOR (char 2); a trace message's body is records one after the other.
Values print as Java's ``StringBuilder.append`` prints them: ``true``/``false``
for booleans, and ``null`` for a field never set (a message without tags or
keys), so tools written for Java read rmqk's records and the other way round.
The one quirk kept on purpose: with the CLOUD access channel a SubAfter record
ends with CONTENT_SPLITOR instead of FIELD_SPLITOR, as Java 4.9.8 writes it.

:func:`decode` is lenient where Java throws: a record that does not parse is
logged (which message, which record, why) and skipped, the others are kept.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable

import attrs

from rmqk.model.message import MessageProperty

__all__ = [
    "CONTENT_SPLITOR",
    "FIELD_SPLITOR",
    "ConsumeReturnType",
    "MessageType",
    "TraceBean",
    "TraceContext",
    "TraceType",
    "TransferBean",
    "decode",
    "encode",
]

log = logging.getLogger("rmqk.plugins.trace")

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"


class TraceType(enum.Enum):
    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """Java's MessageType; records carry its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3


class ConsumeReturnType(enum.IntEnum):
    """Java's ConsumeReturnType; a SubAfter record's context code is its ordinal."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@attrs.frozen
class TraceBean:
    """One message in a trace record (Java's TraceBean); None prints as ``null``."""

    msg_id: str | None = ""
    topic: str | None = ""
    offset_msg_id: str | None = ""
    tags: str | None = ""
    keys: str | None = ""
    store_host: str | None = ""
    client_host: str | None = ""
    retry_times: int = 0
    body_length: int = 0
    msg_type: MessageType = MessageType.Normal_Msg
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool = False


@attrs.frozen
class TraceContext:
    """One trace record's context (Java's TraceContext) with its messages."""

    trace_type: TraceType
    time_stamp: int
    beans: tuple[TraceBean, ...]
    region_id: str | None = ""
    group_name: str | None = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    cloud: bool = False


@attrs.frozen
class TransferBean:
    """The encoded records of one context and the keys its trace message is indexed by."""

    data: str
    keys: tuple[str, ...]


def _text(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _record(fields: Iterable[object], end: str = FIELD_SPLITOR) -> str:
    return CONTENT_SPLITOR.join(_text(f) for f in fields) + end


def encode(ctx: TraceContext) -> TransferBean:
    """Java's encoderFromContextBean: the records and the keys (message ids, then keys)."""
    parts: list[str] = []
    kind = ctx.trace_type
    if kind is TraceType.Pub:
        b = ctx.beans[0]
        parts.append(
            _record(
                (
                    kind.value, ctx.time_stamp, ctx.region_id, ctx.group_name, b.topic,
                    b.msg_id, b.tags, b.keys, b.store_host, b.body_length, ctx.cost_time,
                    int(b.msg_type), b.offset_msg_id, ctx.success,
                )
            )
        )  # fmt: skip
    elif kind is TraceType.SubBefore:
        for b in ctx.beans:
            parts.append(
                _record(
                    (
                        kind.value, ctx.time_stamp, ctx.region_id, ctx.group_name,
                        ctx.request_id, b.msg_id, b.retry_times, b.keys,
                    )
                )
            )  # fmt: skip
    elif kind is TraceType.SubAfter:
        for b in ctx.beans:
            head = (
                kind.value, ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys,
                ctx.context_code,
            )  # fmt: skip
            if ctx.cloud:
                parts.append(_record(head, CONTENT_SPLITOR))
            else:
                parts.append(_record((*head, ctx.time_stamp, ctx.group_name)))
    else:
        b = ctx.beans[0]
        parts.append(
            _record(
                (
                    kind.value, ctx.time_stamp, ctx.region_id, ctx.group_name, b.topic,
                    b.msg_id, b.tags, b.keys, b.store_host, int(b.msg_type),
                    b.transaction_id, b.transaction_state, b.from_transaction_check,
                )
            )
        )  # fmt: skip
    keys: list[str] = []
    for b in ctx.beans:
        keys.append(_text(b.msg_id))
        if b.keys:
            keys.extend(k for k in b.keys.split(MessageProperty.KEY_SEPARATOR) if k)
    return TransferBean("".join(parts), tuple(keys))


def _null(value: str) -> str | None:
    return None if value == "null" else value


def _bool(value: str) -> bool:
    # Java's Boolean.parseBoolean: anything but "true" (any case) is false.
    return value.lower() == "true"


def _decode_record(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == TraceType.Pub.value:
        offset_id = line[12] if len(line) >= 14 else ""
        success = line[13] if len(line) >= 14 else line[12]
        bean = TraceBean(
            topic=_null(line[4]),
            msg_id=_null(line[5]),
            tags=_null(line[6]),
            keys=_null(line[7]),
            store_host=_null(line[8]),
            body_length=int(line[9]),
            msg_type=MessageType(int(line[11])),
            offset_msg_id=_null(offset_id),
            client_host=_null(line[14]) if len(line) >= 15 else "",
        )
        return TraceContext(
            TraceType.Pub,
            int(line[1]),
            (bean,),
            region_id=_null(line[2]),
            group_name=_null(line[3]),
            cost_time=int(line[10]),
            success=_bool(success),
        )
    if kind == TraceType.SubBefore.value:
        bean = TraceBean(msg_id=_null(line[5]), retry_times=int(line[6]), keys=_null(line[7]))
        return TraceContext(
            TraceType.SubBefore,
            int(line[1]),
            (bean,),
            region_id=_null(line[2]),
            group_name=_null(line[3]),
            request_id=line[4],
        )
    if kind == TraceType.SubAfter.value:
        bean = TraceBean(msg_id=_null(line[2]), keys=_null(line[5]))
        return TraceContext(
            TraceType.SubAfter,
            int(line[7]) if len(line) >= 9 else 0,
            (bean,),
            request_id=line[1],
            cost_time=int(line[3]),
            success=_bool(line[4]),
            context_code=int(line[6]) if len(line) >= 7 else 0,
            group_name=_null(line[8]) if len(line) >= 9 else "",
            cloud=len(line) < 9,
        )
    if kind == TraceType.EndTransaction.value:
        bean = TraceBean(
            topic=_null(line[4]),
            msg_id=_null(line[5]),
            tags=_null(line[6]),
            keys=_null(line[7]),
            store_host=_null(line[8]),
            msg_type=MessageType(int(line[9])),
            transaction_id=_null(line[10]),
            transaction_state=_null(line[11]),
            from_transaction_check=_bool(line[12]),
        )
        return TraceContext(
            TraceType.EndTransaction,
            int(line[1]),
            (bean,),
            region_id=_null(line[2]),
            group_name=_null(line[3]),
        )
    return None


def decode(data: str, source: str = "trace data") -> list[TraceContext]:
    """Java's decoderFromTraceDataString, one context per record.

    A record of an unknown type is skipped, as Java skips it; one that does not
    parse (too few fields, a number that is not one) is logged with ``source``
    and skipped.
    """
    out: list[TraceContext] = []
    for index, record in enumerate(data.split(FIELD_SPLITOR)):
        if not record:
            continue
        line = record.split(CONTENT_SPLITOR)
        try:
            ctx = _decode_record(line)
        except (IndexError, ValueError) as exc:
            reason = "too few fields" if isinstance(exc, IndexError) else str(exc)
            log.warning(
                "trace record %d of %s does not parse (%s; %d fields): %r",
                index,
                source,
                reason,
                len(line),
                record[:120],
            )
            continue
        if ctx is None:
            log.info("trace record %d of %s has unknown type %r; skipped", index, source, line[0])
            continue
        out.append(ctx)
    return out
