"""``rmqk consume``: print a topic's messages one a line as they arrive (kafka-console-consumer).

Without ``--group`` nothing is registered with the brokers: no consumer member
joins the client instance, so the client sends no heartbeat (the broker never
hears of a group, so no retry topic is made) and no offset is committed. Each
readable queue of the topic is read by the shared pull path
(:class:`rmqk.engine.pull.PullAPI`, the one both consumers use) from a start
offset found by ``--from``. With ``--group`` a lite pull consumer subscribes
as a member of that group and commits the offset past each printed message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from rmqk.console.commandline import message_json, tls_client_options
from rmqk.engine.client_check import check_client_in_broker
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.pull import PullAPI
from rmqk.engine.startup import client_for, resolve_namesrv
from rmqk.model import ExpressionType, MessageModel, MessageQueue, PullResult, build_subscription
from rmqk.model.errors import ClientError, RmqkError
from rmqk.model.message import MessageExt
from rmqk.spi.transport import Transport

__all__ = ["consume", "from_arg", "message_text", "parse_from"]

log = logging.getLogger("rmqk.consume")

# The group name the group-less reader puts in its pull requests: the broker needs
# one to look up a subscription, but with no heartbeat it never registers it.
ANONYMOUS_GROUP = "rmqk-console"
# How long the broker may hold a pull while the queue has nothing new.
_SUSPEND_MS = 15_000
_PULL_TIMEOUT_MS = 30_000


def parse_from(value: str) -> str | int:
    """``earliest``, ``latest`` or a store time in epoch ms (digits, or ISO 8601)."""
    if value in ("earliest", "latest"):
        return value
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise RmqkError(
            f"must be earliest, latest, epoch milliseconds or an ISO 8601 time "
            f"(e.g. 2026-11-28T16:00:00+00:00), got {value!r}"
        ) from None
    if when.tzinfo is None:
        # A time without an offset is the local time, as `date` shows it.
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def from_arg(text: str) -> str | int:
    """An argparse type for ``--from``: :func:`parse_from`, its error a usage error."""
    try:
        return parse_from(text)
    except RmqkError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def message_text(msg: MessageExt) -> str:
    """The body as UTF-8 (bad bytes replaced by U+FFFD), newlines escaped to keep one line."""
    text = msg.body.decode("utf-8", errors="replace")
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


class _Printer:
    def __init__(self, fmt: str, count: int | None) -> None:
        self.render = message_json if fmt == "json" else message_text
        self.left = count

    def show(self, msg: MessageExt) -> bool:
        """Print ``msg``; False once --count messages were printed."""
        sys.stdout.write(self.render(msg) + "\n")
        sys.stdout.flush()
        if self.left is not None:
            self.left -= 1
            return self.left > 0
        return True


def _expression(args: argparse.Namespace) -> tuple[str, ExpressionType]:
    if args.sql is not None:
        return args.sql, ExpressionType.SQL92
    return (args.tags if args.tags is not None else "*"), ExpressionType.TAG


async def _start_offset(
    transport: Transport, addr: str, mq: MessageQueue, start: str | int, timeout: int
) -> int:
    if start == "earliest":
        return await transport.get_min_offset(addr, mq, timeout)
    if start == "latest":
        return await transport.get_max_offset(addr, mq, timeout)
    assert isinstance(start, int)
    return await transport.search_offset(addr, mq, start, timeout)


async def _anonymous(args: argparse.Namespace, printer: _Printer) -> None:
    from rmqk.options.consumer import validate_options
    from rmqk.spi.options import Where

    options, problems = validate_options(
        {"namesrv_addr": args.namesrv, **tls_client_options(args)}, Where("rmqk consume")
    )
    if problems:
        raise ClientError(str(problems[0]))
    client = client_for(options, MessageModel.CLUSTERING, resolve_namesrv(options))
    await client.start()
    try:
        await client.update_topic_route(args.topic)
        route = await client.transport.get_route(args.topic, options.mq_client_api_timeout)
        queues = sorted(route.subscribe_queues(args.topic)) if route is not None else []
        if not queues:
            raise ClientError(f"topic {args.topic!r} has no readable queue (does it exist?)")
        expression, etype = _expression(args)
        try:
            sub = build_subscription(args.topic, expression, etype, int(time.time() * 1000))
        except ValueError as exc:
            raise ClientError(f"--tags/--sql {expression!r}: {exc}") from None
        # A broker that cannot filter by SQL92 would refuse every pull: ask once, and stop.
        await check_client_in_broker(client, ANONYMOUS_GROUP, [sub])
        pull = PullAPI(
            client,
            ANONYMOUS_GROUP,
            log,
            batch_size=32,
            suspend_ms=_SUSPEND_MS,
            timeout_ms=_PULL_TIMEOUT_MS,
            exception_delay_ms=1000,
            unit_mode=False,
            # A lite pull needs no registered subscription: the request carries its own.
            lite=True,
            on_subscription_missing=lambda: None,
        )
        start = args.from_
        out: asyncio.Queue[MessageExt] = asyncio.Queue(maxsize=1024)

        async def read(mq: MessageQueue) -> None:
            addr = await client.find_broker_addr_for_admin(mq.broker_name, mq.topic)
            offset = await _start_offset(
                client.transport, addr, mq, start, options.mq_client_api_timeout
            )
            # The broker's search answers with the nearest message, which may be stored
            # before the time asked for (past a queue's newest message: that message).
            since = start if isinstance(start, int) else None
            while True:
                result = await pull.pull(mq, sub, offset, post_subscription=True)
                if not isinstance(result, PullResult):
                    await asyncio.sleep(result / 1000)
                    continue
                for msg in await pull.process(mq, sub, result):
                    if since is not None:
                        if msg.store_timestamp < since:
                            continue
                        since = None
                    await out.put(msg)
                offset = result.next_begin_offset

        readers = [asyncio.create_task(read(mq)) for mq in queues]
        try:
            while True:
                getter = asyncio.create_task(out.get())
                done, _ = await asyncio.wait(
                    [getter, *readers], return_when=asyncio.FIRST_COMPLETED
                )
                if getter not in done:
                    getter.cancel()
                    for task in done:
                        task.result()  # a reader failed: say why
                    continue
                if not printer.show(getter.result()):
                    return
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    finally:
        await client.shutdown_if_unused()


async def _grouped(args: argparse.Namespace, printer: _Printer) -> None:
    start = args.from_
    where: dict[str, Any] = {}
    if start == "earliest":
        where["consume_from_where"] = "CONSUME_FROM_FIRST_OFFSET"
    elif start == "latest":
        where["consume_from_where"] = "CONSUME_FROM_LAST_OFFSET"
    else:
        assert isinstance(start, int)
        stamp = datetime.fromtimestamp(start / 1000, tz=UTC).astimezone()
        where["consume_from_where"] = "CONSUME_FROM_TIMESTAMP"
        where["consume_timestamp"] = stamp.strftime("%Y%m%d%H%M%S")
    consumer = AsyncLitePullConsumer(
        args.group,
        namesrv_addr=args.namesrv,
        auto_commit=False,
        **where,
        **tls_client_options(args),
    )
    expression, etype = _expression(args)
    consumer.subscribe(args.topic, expression, etype.value)
    await consumer.start()
    try:
        while True:
            for msg in await consumer.poll(1000):
                more = printer.show(msg)
                mq = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
                # Committed message by message: what was printed is what is committed.
                await consumer.commit({mq: msg.queue_offset + 1})
                if not more:
                    return
    finally:
        await consumer.close()


async def consume(args: argparse.Namespace) -> int:
    printer = _Printer(args.format, args.count)
    with contextlib.suppress(asyncio.CancelledError):
        if args.group is None:
            await _anonymous(args, printer)
        else:
            await _grouped(args, printer)
    return 0
