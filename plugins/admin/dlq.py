"""``rmqk admin dlq list|show|resend``: a consumer group's dead letters (``%DLQ%<group>``).

A message lands in ``%DLQ%G`` when the broker takes it back from G once more than
G's max reconsume times (CONSUMER_SEND_MSG_BACK, or a client's own send to
``%RETRY%G`` past the limit). The broker keeps its properties and records the
topic it was first consumed from in ``RETRY_TOPIC`` and the first message id in
``ORIGIN_MESSAGE_ID``; its reconsume times count the deliveries.

Reading goes through a lite pull consumer of the group ``rmqk-dlq-resend-<G>`` in
assign mode. ``list`` and ``show`` commit nothing. ``resend`` commits that
group's offset on ``%DLQ%G`` past each dead letter right after the send of it
succeeded, so a second resend starts after the last one sent: nothing is sent
twice, except the one message whose send succeeded when the process died before
its commit (at least once, never lost).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from rmqk import AsyncLitePullConsumer, AsyncProducer
from rmqk.console.commandline import message_json, positive_int
from rmqk.model import DLQ_GROUP_TOPIC_PREFIX, MessageQueue
from rmqk.model.errors import RmqkError
from rmqk.model.message import Message, MessageExt
from rmqk.spi.client_options import ClientOptions

__all__ = ["add_dlq_arguments", "resend_group"]

# Properties the broker or the sending producer sets afresh for each stored copy.
_NOT_RESENT = frozenset(
    {
        "UNIQ_KEY",
        "DELAY",
        "WAIT",
        "REAL_TOPIC",
        "REAL_QID",
        "CLUSTER",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "TAGS",
        "KEYS",
    }
)


def resend_group(group: str) -> str:
    """The group whose committed offset on ``%DLQ%<group>`` records what was resent."""
    return f"rmqk-dlq-resend-{group}"


def original_topic(msg: MessageExt) -> str | None:
    return msg.properties.get("RETRY_TOPIC")


def _connection_options(client: Any) -> dict[str, Any]:
    """The admin client's TLS settings and account (``--tls*``, its keys) that differ from
    the defaults, for the consumer and producer a dlq command makes: they must connect
    as the admin client does, not silently in plain text."""
    given: ClientOptions = client.client_options
    default = ClientOptions()
    return {
        name: getattr(given, name)
        for name in _CONNECTION_OPTIONS
        if getattr(given, name) != getattr(default, name)
    }


_CONNECTION_OPTIONS = (
    "use_tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_verify",
    "access_key",
    "secret_key",
    "security_token",
)


async def _dead_letters(
    namesrv: str,
    group: str,
    *,
    from_committed: bool,
    commit: bool = False,
    connection: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[AsyncLitePullConsumer, MessageQueue, MessageExt]]:
    """Every dead letter of ``group`` stored when this starts, queue by queue, in order."""
    consumer = AsyncLitePullConsumer(
        resend_group(group), namesrv_addr=namesrv, auto_commit=False, **(connection or {})
    )
    await consumer.start()
    try:
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        route = await consumer.client.transport.get_route(
            topic, consumer.options.mq_client_api_timeout
        )
        if route is None or not route.queue_datas:
            return  # no DLQ topic: the group has no dead letters
        if not all(q.readable for q in route.queue_datas):
            # Apache 4.9.8 creates %DLQ% topics write-only (perm 2): nothing can pull them.
            raise RmqkError(
                f"topic {topic} is not readable (Apache 4.9 creates dead-letter topics "
                f"write-only): make it readable first, e.g. rmqk admin topic create {topic} "
                "--queues 1 --perm 6"
            )
        queues = await consumer.fetch_message_queues(topic)
        for mq in queues:
            end = await consumer.max_offset(mq)
            start = await consumer.min_offset(mq)
            consumer.assign([mq])
            if from_committed:
                committed = await consumer.committed(mq)
                start = max(start, committed)
            if start >= end:
                continue
            await consumer.seek(mq, start)
            done = False
            while not done:
                for msg in await consumer.poll(1000):
                    if msg.queue_offset >= end:
                        done = True
                        break
                    yield consumer, mq, msg
                    if msg.queue_offset + 1 >= end:
                        done = True
                        break
    finally:
        await consumer.close()


def _since(text: str) -> int:
    """``--since``: epoch ms or ISO 8601 (local time without an offset); else a usage error."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since must be epoch milliseconds or an ISO 8601 time, got {text!r}"
        ) from None
    return int((when if when.tzinfo else when.astimezone()).timestamp() * 1000)


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


async def admin_dlq_list(client: Any, args: argparse.Namespace) -> int:
    stats: dict[str, list[int]] = {}
    async for _c, _mq, msg in _dead_letters(
        args.namesrv, args.group, from_committed=False, connection=_connection_options(client)
    ):
        topic = original_topic(msg) or "(unknown)"
        row = stats.setdefault(topic, [0, msg.store_timestamp, msg.store_timestamp])
        row[0] += 1
        row[1] = min(row[1], msg.store_timestamp)
        row[2] = max(row[2], msg.store_timestamp)
    if args.json:
        print(
            json.dumps(
                [
                    {"topic": t, "count": c, "oldest": lo, "newest": hi}
                    for t, (c, lo, hi) in sorted(stats.items())
                ]
            )
        )
        return 0
    if not stats:
        print(f"no dead letters for group {args.group}")
        return 0
    print("ORIGINAL TOPIC\tCOUNT\tOLDEST\tNEWEST")
    for topic, (count, lo, hi) in sorted(stats.items()):
        print(f"{topic}\t{count}\t{_time(lo)}\t{_time(hi)}")
    return 0


def _row(msg: MessageExt) -> dict[str, Any]:
    row: dict[str, Any] = json.loads(message_json(msg))
    row["original_topic"] = original_topic(msg)
    row["reconsume_times"] = msg.reconsume_times
    row["store_timestamp"] = msg.store_timestamp
    return row


async def admin_dlq_show(client: Any, args: argparse.Namespace) -> int:
    shown = 0
    async for _c, _mq, msg in _dead_letters(
        args.namesrv, args.group, from_committed=False, connection=_connection_options(client)
    ):
        if args.json:
            print(json.dumps(_row(msg), ensure_ascii=False))
        else:
            body = msg.body.decode("utf-8", errors="replace").replace("\n", "\\n")
            print(
                f"{_time(msg.store_timestamp)} topic={original_topic(msg)} "
                f"msg_id={msg.properties.get('ORIGIN_MESSAGE_ID', msg.msg_id)} "
                f"tags={msg.tags} keys={msg.keys} reconsumed={msg.reconsume_times} body={body}"
            )
        shown += 1
        if args.count is not None and shown >= args.count:
            break
    return 0


def _copy(msg: MessageExt, topic: str) -> Message:
    props = {k: v for k, v in msg.properties.items() if k not in _NOT_RESENT}
    return Message(topic, msg.body, tags=msg.tags, keys=msg.keys, flag=msg.flag, properties=props)


async def admin_dlq_resend(client: Any, args: argparse.Namespace) -> int:
    since: int | None = args.since
    sent: dict[str, int] = {}
    passed = 0
    connection = _connection_options(client)
    async with AsyncProducer(
        resend_group(args.group), namesrv_addr=args.namesrv, **connection
    ) as producer:
        async for consumer, mq, msg in _dead_letters(
            args.namesrv, args.group, from_committed=True, connection=connection
        ):
            if since is not None and msg.store_timestamp < since:
                passed += 1
            else:
                topic = args.to_topic or original_topic(msg)
                if topic is None:
                    raise RmqkError(
                        f"dead letter at offset {msg.queue_offset} of {mq.topic} has no "
                        "RETRY_TOPIC property, so its original topic is unknown: give "
                        f"--to-topic; {sum(sent.values())} were resent before it"
                    )
                try:
                    await producer.send(_copy(msg, topic))
                except RmqkError as exc:
                    raise RmqkError(
                        f"sending the dead letter at offset {msg.queue_offset} of {mq.topic} to "
                        f"{topic} failed: {exc}; {sum(sent.values())} were resent before it and "
                        "a new resend starts at this one"
                    ) from exc
                sent[topic] = sent.get(topic, 0) + 1
            # Recorded at once: a second resend starts after this one.
            await consumer.commit({mq: msg.queue_offset + 1})
    where = ", ".join(f"{n} to {t}" for t, n in sorted(sent.items())) or "none"
    print(f"resent {sum(sent.values())} dead letter(s) of group {args.group}: {where}")
    if passed:
        print(
            f"passed over {passed} dead letter(s) stored before --since; they are recorded as "
            "handled and a later resend does not send them"
        )
    return 0


def add_dlq_arguments(sub: Any, common: Any) -> None:
    """Register ``dlq list|show|resend`` under ``rmqk admin``."""
    dlq = sub.add_parser("dlq", help="a consumer group's dead letters: list, show, resend")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", metavar="ACTION")
    listing = dlq_sub.add_parser("list", help="per original topic: how many, oldest, newest")
    show = dlq_sub.add_parser("show", help="the dead letters, oldest first")
    resend = dlq_sub.add_parser(
        "resend", help="send each dead letter once back to its original topic (or --to-topic)"
    )
    for parser in (listing, show, resend):
        common(parser)
        parser.add_argument("--group", "-g", required=True, help="the consumer group")
    show.add_argument("--count", type=positive_int, default=None, help="show at most N (1 or more)")
    resend.add_argument(
        "--since",
        type=_since,
        default=None,
        help="only those stored at or after this time (epoch ms or ISO)",
    )
    resend.add_argument(
        "--to-topic", default=None, help="send all to this topic (e.g. %%RETRY%%<group>)"
    )
    listing.set_defaults(_admin=admin_dlq_list)
    show.set_defaults(_admin=admin_dlq_show)
    resend.set_defaults(_admin=admin_dlq_resend)
