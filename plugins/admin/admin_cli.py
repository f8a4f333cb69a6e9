"""``rmqk admin``: topics, consumer progress per queue, and messages by id or key.

Talks the remoting protocol to any 4.9 name server and its brokers (the embedded
ones or Apache's). Output is a table by default, JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rmqk.console.commandline import add_tls_arguments, tls_client_options
from rmqk.model import PERM_READ, PERM_WRITE
from rmqk.model.errors import BrokerError, RemotingError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.model.namespace import check_namespace, namespace_of, wrap
from rmqk.plugins.admin.admin_client import LONG_MAX, AdminClient, MessageIdKind, TopicInfo
from rmqk.plugins.admin.dlq import add_dlq_arguments
from rmqk.spi.commands import Command

__all__ = ["ADMIN_COMMAND", "DEFAULT_NAMESRV"]

DEFAULT_NAMESRV = "127.0.0.1:9876"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _perm_text(perm: int) -> str:
    from rmqk.model import perm_to_string

    return perm_to_string(perm)


def _time_text(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _namespace(args: argparse.Namespace) -> str | None:
    """The --namespace option, checked as a client's namespace option is."""
    namespace: str | None = getattr(args, "namespace", None)
    problem = check_namespace(namespace)
    if problem:
        raise RmqkError(f"--namespace: {problem}")
    return namespace or None


async def _admin_topic_create(client: AdminClient, args: argparse.Namespace) -> int:
    args.topic = wrap(_namespace(args), args.topic)
    read_queues = args.read_queues if args.read_queues is not None else args.queues
    write_queues = args.write_queues if args.write_queues is not None else args.queues
    if args.broker:
        targets = [args.broker]
    else:
        targets = [b.master for b in await client.masters(args.cluster) if b.master is not None]
        if not targets:
            where = f"cluster {args.cluster!r}" if args.cluster else "the name server"
            raise RmqkError(f"no master broker found in {where} ({client.namesrv_addr})")
    for addr in targets:
        await client.create_topic(
            addr,
            args.topic,
            read_queues=read_queues,
            write_queues=write_queues,
            perm=args.perm,
            order=args.order,
        )
    result = [
        {
            "topic": args.topic,
            "broker": addr,
            "readQueueNums": read_queues,
            "writeQueueNums": write_queues,
            "perm": args.perm,
            "order": args.order,
        }
        for addr in targets
    ]
    if args.json:
        _print_json(result)
    else:
        print(
            _table(
                ["TOPIC", "BROKER", "READ", "WRITE", "PERM", "ORDER"],
                [
                    [args.topic, addr, read_queues, write_queues, _perm_text(args.perm), args.order]
                    for addr in targets
                ],
            )
        )
        print(f"created or updated topic {args.topic} on {len(targets)} broker(s)")
    return 0


async def _admin_topic_list(client: AdminClient, args: argparse.Namespace) -> int:
    names = set(await client.topic_names())
    namespace = _namespace(args)
    if namespace:
        names = {name for name in names if namespace_of(name) == namespace}
    infos: list[TopicInfo] = []
    for broker in await client.masters(args.cluster):
        infos.extend(t for t in await client.topic_configs(broker) if t.topic in names)
    listed = {t.topic for t in infos}
    infos.sort(key=lambda t: (t.topic, t.broker_name))
    missing = sorted(names - listed) if args.cluster is None else []
    if args.json:
        rows = [attrs.asdict(t) for t in infos]
        rows += [{"topic": name} for name in missing]
        _print_json(rows)
        return 0
    rows_out: list[list[object]] = [
        [t.topic, t.broker_name, t.read_queue_nums, t.write_queue_nums, _perm_text(t.perm)]
        for t in infos
    ]
    rows_out += [[name, "-", "-", "-", "-"] for name in missing]
    print(_table(["TOPIC", "BROKER", "READ", "WRITE", "PERM"], rows_out))
    return 0


async def _admin_topic_status(client: AdminClient, args: argparse.Namespace) -> int:
    args.topic = wrap(_namespace(args), args.topic)
    rows = await client.topic_status(args.topic)
    if args.json:
        _print_json({"topic": args.topic, "queues": [attrs.asdict(r) for r in rows]})
        return 0
    print(
        _table(
            ["BROKER", "QID", "MIN OFFSET", "MAX OFFSET", "LAST UPDATED"],
            [
                [
                    r.broker_name,
                    r.queue_id,
                    r.min_offset,
                    r.max_offset,
                    _time_text(r.last_update_timestamp),
                ]
                for r in rows
            ],
        )
    )
    return 0


async def _admin_consumer_progress(client: AdminClient, args: argparse.Namespace) -> int:
    namespace = _namespace(args)
    args.group = wrap(namespace, args.group)
    if args.topic:
        args.topic = wrap(namespace, args.topic)
    rows = await client.consumer_progress(args.group, args.topic)
    if args.json:
        _print_json(
            {
                "group": args.group,
                "queues": [dict(attrs.asdict(r), diff=r.diff) for r in rows],
                "diffTotal": sum(r.diff for r in rows),
            }
        )
        return 0
    print(
        _table(
            ["TOPIC", "BROKER", "QID", "BROKER OFFSET", "CONSUMER OFFSET", "DIFF", "LAST TIME"],
            [
                [
                    r.topic,
                    r.broker_name,
                    r.queue_id,
                    r.broker_offset,
                    r.consumer_offset,
                    r.diff,
                    _time_text(r.last_timestamp),
                ]
                for r in rows
            ],
        )
    )
    print(f"diff total: {sum(r.diff for r in rows)}")
    return 0


_KIND_TEXT = {
    MessageIdKind.OFFSET: "offset id (store host and commit log offset)",
    MessageIdKind.UNIQUE: "unique id (the client's UNIQ_KEY), found in the topic's index",
}


def _message_dict(message: MessageExt, msg_id: str) -> dict[str, Any]:
    try:
        body: str = message.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body = base64.b64encode(message.body).decode("ascii")
        encoding = "base64"
    return {
        "msgId": message.msg_id,
        "offsetMsgId": msg_id.upper(),
        "topic": message.topic,
        "tags": message.tags,
        "keys": message.keys,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "commitLogOffset": message.commit_log_offset,
        "reconsumeTimes": message.reconsume_times,
        "bornTimestamp": message.born_timestamp,
        "storeTimestamp": message.store_timestamp,
        "bornHost": message.born_host,
        "storeHost": message.store_host,
        "sysFlag": message.sys_flag,
        "flag": message.flag,
        "bodyCRC": message.body_crc,
        "storeSize": message.store_size,
        "properties": dict(message.properties),
        "body": body,
        "bodyEncoding": encoding,
    }


def _time_arg(text: str) -> int:
    """Epoch milliseconds, or a local ISO date and time (``2024-05-02 08:12``)."""
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO date and time"
        ) from None


async def _admin_message(client: AdminClient, args: argparse.Namespace) -> int:
    if args.key is not None:
        return await _admin_message_by_key(client, args)
    if args.msg_id is None:
        raise RmqkError("give a message id, or --key KEY --topic TOPIC")
    kind, message = await client.find_message(
        args.msg_id, topic=args.topic, broker_addr=args.broker
    )
    info = _message_dict(message, message.offset_msg_id)
    info["idKind"] = kind.value
    if args.json:
        _print_json(info)
        return 0
    labels = [
        ("Id Kind", _KIND_TEXT[kind]),
        ("MsgId", info["msgId"]),
        ("OffsetID", info["offsetMsgId"]),
        ("Topic", info["topic"]),
        ("Tags", info["tags"] or "-"),
        ("Keys", info["keys"] or "-"),
        ("Queue ID", info["queueId"]),
        ("Queue Offset", info["queueOffset"]),
        ("CommitLog Offset", info["commitLogOffset"]),
        ("Reconsume Times", info["reconsumeTimes"]),
        ("Born Timestamp", _time_text(info["bornTimestamp"])),
        ("Store Timestamp", _time_text(info["storeTimestamp"])),
        ("Born Host", info["bornHost"]),
        ("Store Host", info["storeHost"]),
        ("System Flag", info["sysFlag"]),
        ("Properties", info["properties"]),
        ("Message Body", info["body"] if encoding_is_text(info) else f"(base64) {info['body']}"),
    ]
    width = max(len(label) for label, _ in labels) + 1
    for label, value in labels:
        print(f"{(label + ':').ljust(width)}  {value}")
    return 0


async def _admin_message_by_key(client: AdminClient, args: argparse.Namespace) -> int:
    if args.msg_id is not None:
        raise RmqkError("give either a message id or --key, not both")
    if not args.topic:
        raise RmqkError(
            "--key needs --topic: keys are indexed per topic (as mqadmin queryMsgByKey -t)"
        )
    if args.begin > args.end:
        raise RmqkError(f"--begin {args.begin} is after --end {args.end}")
    result = await client.query_by_key(
        args.topic, args.key, max_num=args.max_num, begin=args.begin, end=args.end
    )
    for failure in result.failures:
        print(f"rmqk: warning: broker {failure}", file=sys.stderr)
    if not result.messages:
        raise RmqkError(
            f"no message with key {args.key!r} in topic {args.topic!r} stored in the time range "
            "(mqadmin: NO_MESSAGE)"
        )
    ordered = sorted(result.messages, key=lambda m: (m.store_timestamp, m.commit_log_offset))
    if args.json:
        _print_json([_message_dict(m, m.offset_msg_id) for m in ordered])
        return 0
    print(
        _table(
            ["MSG ID", "OFFSET ID", "QID", "QUEUE OFFSET", "STORE TIME", "KEYS"],
            [
                [
                    m.msg_id,
                    m.offset_msg_id,
                    m.queue_id,
                    m.queue_offset,
                    _time_text(m.store_timestamp),
                    m.keys or "-",
                ]
                for m in ordered
            ],
        )
    )
    return 0


def encoding_is_text(info: Mapping[str, Any]) -> bool:
    return info.get("bodyEncoding") == "utf-8"


def _admin_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        "-n",
        default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV,
        metavar="ADDR",
        help=f"name server address (default: $NAMESRV_ADDR or {DEFAULT_NAMESRV})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="request timeout in seconds (default: 5)"
    )
    add_tls_arguments(parser)


def _namespace_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--namespace",
        default=None,
        help=f"a client namespace: {what} (names are shown as the broker holds them)",
    )


def _admin_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="admin_command", metavar="SUBCOMMAND")
    topic = sub.add_parser("topic", help="create, list or show the queues of topics")
    topic_sub = topic.add_subparsers(dest="topic_command", metavar="ACTION")

    create = topic_sub.add_parser("create", help="create or update a topic on the master brokers")
    _admin_common(create)
    create.add_argument("topic")
    create.add_argument(
        "--queues", type=int, default=4, help="read and write queues, 1 or more (default: 4)"
    )
    create.add_argument("--read-queues", type=int, default=None, help="overrides --queues")
    create.add_argument("--write-queues", type=int, default=None, help="overrides --queues")
    create.add_argument(
        "--perm",
        type=int,
        default=PERM_READ | PERM_WRITE,
        help="permission bits: 2 W, 4 R, 6 RW (default: 6)",
    )
    create.add_argument("--order", action="store_true", help="mark the topic ordered")
    _namespace_arg(create, "the topic created is <namespace>%%TOPIC")
    where = create.add_mutually_exclusive_group()
    where.add_argument("--broker", "-b", metavar="ADDR", help="only this broker")
    where.add_argument("--cluster", "-c", help="every master of this cluster (default: all)")
    create.set_defaults(_admin=_admin_topic_create)

    listing = topic_sub.add_parser("list", help="list topics with their queues per broker")
    _admin_common(listing)
    listing.add_argument("--cluster", "-c", default=None, help="only brokers of this cluster")
    _namespace_arg(listing, "list only its topics, retry and dead-letter topics included")
    listing.set_defaults(_admin=_admin_topic_list)

    status = topic_sub.add_parser(
        "status",
        help="per queue: min offset, max offset and last store time (mqadmin topicStatus)",
    )
    _admin_common(status)
    status.add_argument("topic")
    _namespace_arg(status, "the topic shown is <namespace>%%TOPIC")
    status.set_defaults(_admin=_admin_topic_status)

    consumer = sub.add_parser("consumer", help="consumer groups")
    consumer_sub = consumer.add_subparsers(dest="consumer_command", metavar="ACTION")
    progress = consumer_sub.add_parser(
        "progress", help="per queue: broker offset, consumer offset and their difference"
    )
    _admin_common(progress)
    progress.add_argument("group")
    progress.add_argument("--topic", "-t", default=None, help="only this topic")
    _namespace_arg(progress, "GROUP and --topic are taken as the namespace's clients name them")
    progress.set_defaults(_admin=_admin_consumer_progress)
    from rmqk.plugins.admin.reset_offset import add_reset_arguments, run_reset

    reset = consumer_sub.add_parser(
        "reset-offset", help="move a group's offsets on a topic to a time, an end or an offset"
    )
    _admin_common(reset)
    add_reset_arguments(reset)
    reset.set_defaults(_admin=run_reset)

    message = sub.add_parser(
        "message", help="show a message by offset id or unique id, or list messages by key"
    )
    _admin_common(message)
    message.add_argument(
        "msg_id",
        metavar="MSG_ID",
        nargs="?",
        default=None,
        help="an offset id (SendResult.offset_msg_id) or, with --topic, a unique id "
        "(SendResult.msg_id); which kind it is shows in the output",
    )
    message.add_argument(
        "--topic", "-t", default=None, help="the topic a unique id or --key is looked up in"
    )
    message.add_argument(
        "--key", "-k", default=None, help="list the messages of --topic with this key (KEYS)"
    )
    message.add_argument(
        "--begin",
        type=_time_arg,
        default=0,
        metavar="TIME",
        help="with --key: stored at or after (epoch ms or ISO time; default: the beginning)",
    )
    message.add_argument(
        "--end",
        type=_time_arg,
        default=LONG_MAX,
        metavar="TIME",
        help="with --key: stored at or before (epoch ms or ISO time; default: no end)",
    )
    message.add_argument(
        "--max-num",
        type=int,
        default=64,
        help="with --key: at most this many, 1 or more (default: 64)",
    )
    message.add_argument(
        "--broker",
        "-b",
        default=None,
        metavar="ADDR",
        help="ask this broker instead of the one an offset id names",
    )
    message.set_defaults(_admin=_admin_message)

    from rmqk.plugins.trace.admin import add_trace_arguments, admin_trace

    trace = sub.add_parser("trace", help="a message's trace: sent, stored, consumed by whom")
    _admin_common(trace)
    add_trace_arguments(trace)
    trace.set_defaults(_admin=admin_trace)

    add_dlq_arguments(sub, _admin_common)


# The perm values mqadmin updateTopic documents (-p 2|4|6); others are refused, not stored.
_TOPIC_PERMS = (PERM_WRITE, PERM_READ, PERM_READ | PERM_WRITE)


def _check_values(args: argparse.Namespace) -> None:
    """Refuse values no broker call should be made with, before connecting."""
    if not args.timeout > 0:
        raise RmqkError(f"--timeout must be more than 0 seconds, got {args.timeout:g}")
    for flag in ("queues", "read_queues", "write_queues", "max_num"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise RmqkError(f"--{flag.replace('_', '-')} must be 1 or more, got {value}")
    perm = getattr(args, "perm", None)
    if perm is not None and perm not in _TOPIC_PERMS:
        raise RmqkError(f"--perm must be 2 (W), 4 (R) or 6 (RW), got {perm}")


def _admin_run(args: argparse.Namespace) -> int:
    action = getattr(args, "_admin", None)
    if action is None:
        print(
            "rmqk admin: choose a subcommand: topic create|list|status, consumer progress, "
            "message, trace (see rmqk admin --help)",
            file=sys.stderr,
        )
        return 2

    _check_values(args)

    client_options = tls_client_options(args)

    async def run() -> int:
        async with AdminClient(args.namesrv, timeout=args.timeout, **client_options) as client:
            result: int = await action(client, args)
            return result

    try:
        return asyncio.run(run())
    except BrokerError as exc:
        raise RmqkError(str(exc)) from exc
    except RemotingError as exc:
        raise RmqkError(f"{exc} (name server {args.namesrv})") from exc


ADMIN_COMMAND = Command(
    help="administer topics and consumer groups of a RocketMQ 4.9 cluster",
    run=_admin_run,
    add_arguments=_admin_args,
    description=(
        "Talk to a RocketMQ 4.9 name server and its brokers (embedded or Apache) over the "
        "remoting protocol."
    ),
    examples=(
        "rmqk admin topic create Orders --queues 8",
        "rmqk admin topic list --json",
        "rmqk admin topic status Orders",
        "rmqk admin consumer progress order-analytics",
        "rmqk admin consumer progress order-analytics --namespace ns1",
        "rmqk admin consumer reset-offset --group order-analytics --topic Orders --to earliest "
        "--dry-run",
        "rmqk admin message 7F00000100002A9F0000000000000000",
        "rmqk admin trace 7F0000011F8B18B4AAC2536A7E3D0000",
        "rmqk admin message 0A0000016F2A18B4AAC2620D7BE40000 --topic Orders",
        "rmqk admin message --key order-1001 --topic Orders",
        "rmqk admin dlq list --group order-analytics",
        "rmqk admin dlq resend --group order-analytics --to-topic %RETRY%order-analytics",
    ),
)
