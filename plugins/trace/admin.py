"""``rmqk admin trace MSG_ID``: who sent a message, when it was stored, who consumed it.

Reads the trace records Java's clients and rmqk's ``trace`` plugin write (the
same format), as ``mqadmin queryMsgTraceById`` does: the Pub record names the
producer group, its host, the send time, cost and status; each consumer group's
SubBefore/SubAfter pairs name the consuming client, the retry count, how long
the listener took and whether it succeeded. The store time comes from the
broker (the Pub record's offset message id), or is estimated as Java's
SendMessageTraceHookImpl estimates it when the message is gone.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rmqk.model.errors import RmqkError
from rmqk.plugins.trace.dispatcher import RMQ_SYS_TRACE_TOPIC
from rmqk.plugins.trace.lookup import TraceView, find_trace_messages, trace_views
from rmqk.plugins.trace.records import TraceType

if TYPE_CHECKING:
    from rmqk.plugins.admin.admin_client import AdminClient

__all__ = ["add_trace_arguments", "admin_trace", "trace_report"]


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("msg_id", metavar="MSG_ID", help="the message id (SendResult.msg_id)")
    parser.add_argument(
        "--trace-topic",
        "-t",
        default=RMQ_SYS_TRACE_TOPIC,
        help=f"the trace topic the clients write to (default: {RMQ_SYS_TRACE_TOPIC})",
    )


def _time(ms: int | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


async def _store_time(client: AdminClient, view: TraceView) -> tuple[int, bool]:
    """When the broker stored the message, and whether that is the broker's word."""
    ctx = view.context
    offset_id = ctx.beans[0].offset_msg_id
    if offset_id:
        try:
            stored = await client.view_message(offset_id.split(",")[0])
        except RmqkError:
            pass
        else:
            return stored.store_timestamp, True
    # SendMessageTraceHookImpl's estimate: half way through the send.
    return ctx.time_stamp + ctx.cost_time // 2, False


async def trace_report(client: AdminClient, msg_id: str, trace_topic: str) -> dict[str, Any]:
    """The trace of ``msg_id`` as a JSON-ready dict: ``sent`` and ``consumed`` records."""
    messages = await find_trace_messages(
        [client.namesrv_addr],
        trace_topic,
        msg_id,
        timeout_ms=int(client.timeout * 1000),
        client_options=client.client_options,
    )
    views = trace_views(msg_id, messages)
    sent: list[dict[str, Any]] = []
    befores = {v.context.request_id: v for v in views if v.trace_type is TraceType.SubBefore}
    consumed: list[dict[str, Any]] = []
    for view in views:
        ctx, bean = view.context, view.context.beans[0]
        if view.trace_type is TraceType.Pub:
            stored, exact = await _store_time(client, view)
            sent.append(
                {
                    "producerGroup": ctx.group_name,
                    "clientHost": view.client_host,
                    "topic": bean.topic,
                    "tags": bean.tags,
                    "keys": bean.keys,
                    "sendTime": ctx.time_stamp,
                    "storeTime": stored,
                    "storeTimeFromBroker": exact,
                    "storeHost": bean.store_host,
                    "offsetMsgId": bean.offset_msg_id,
                    "costMs": ctx.cost_time,
                    "status": view.status,
                }
            )
        elif view.trace_type is TraceType.SubAfter:
            before = befores.get(ctx.request_id)
            consumed.append(
                {
                    "consumerGroup": ctx.group_name,
                    "clientHost": view.client_host,
                    "consumeTime": before.context.time_stamp if before else ctx.time_stamp,
                    "retryTimes": before.context.beans[0].retry_times if before else None,
                    "costMs": ctx.cost_time,
                    "status": view.status,
                    "requestId": ctx.request_id,
                }
            )
    consumed.sort(key=lambda r: (str(r["consumerGroup"]), r["consumeTime"]))
    return {"msgId": msg_id, "traceTopic": trace_topic, "sent": sent, "consumed": consumed}


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


async def admin_trace(client: AdminClient, args: argparse.Namespace) -> int:
    report = await trace_report(client, args.msg_id.strip(), args.trace_topic)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    if not report["sent"] and not report["consumed"]:
        print(f"no trace of message {report['msgId']} in {report['traceTopic']}")
        return 1
    print(f"trace of message {report['msgId']} ({report['traceTopic']})")
    if report["sent"]:
        rows = [
            (
                "Pub",
                r["producerGroup"],
                r["clientHost"],
                _time(r["sendTime"]),
                _time(r["storeTime"]) + ("" if r["storeTimeFromBroker"] else " (est.)"),
                f"{r['costMs']}ms",
                r["status"],
            )
            for r in report["sent"]
        ]
        headers = ("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#StoreTime")
        print(_table((*headers, "#CostTimes", "#Status"), rows))
    if report["consumed"]:
        print()
        rows = [
            (
                "Sub",
                r["consumerGroup"],
                r["clientHost"],
                _time(r["consumeTime"]),
                "-" if r["retryTimes"] is None else r["retryTimes"],
                f"{r['costMs']}ms",
                r["status"],
            )
            for r in report["consumed"]
        ]
        headers = ("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumeTime", "#RetryTimes")
        print(_table((*headers, "#CostTimes", "#Status"), rows))
    return 0
