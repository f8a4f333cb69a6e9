"""``rmqk admin consumer reset-offset``: move a consumer group's offsets on a topic.

Only 4.9.8 wire requests are used, as mqadmin uses them:

* ``--timestamp`` and ``--to earliest|latest`` send INVOKE_BROKER_TO_RESET_OFFSET (222,
  ResetOffsetRequestHeader topic/group/timestamp/isForce=true) to every master of the
  topic's route; ``earliest`` is timestamp 0 and ``latest`` is timestamp -1, which the
  4.9.8 broker maps to the queue's max offset. The broker pushes
  RESET_CONSUMER_CLIENT_OFFSET to each running member of the group, which repositions and
  persists. When the broker answers CONSUMER_NOT_ONLINE (the group is stopped), mqadmin's
  old path is taken: the target offset of each queue is looked up
  (SEARCH_OFFSET_BY_TIMESTAMP, GET_MIN_OFFSET or GET_MAX_OFFSET) and written with
  UPDATE_CONSUMER_OFFSET.
* ``--offset N --queue Q`` has no broker-side request in 4.9.8 other than
  UPDATE_CONSUMER_OFFSET, which running members would overwrite with their next commit;
  so it is refused while the group has members online (GET_CONSUMER_CONNECTION_LIST).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import attrs

from rmqk.model.errors import BrokerError, RmqkError
from rmqk.plugins.admin.admin_client import AdminClient, BrokerInfo
from rmqk.wire.bodies import decode_reset_offset
from rmqk.wire.protocol import RequestCode, ResponseCode

__all__ = ["OffsetReset", "parse_timestamp", "reset_offset"]

TO_TIMESTAMP: Mapping[str, int] = {"earliest": 0, "latest": -1}


@attrs.frozen
class OffsetReset:
    """One queue's consumer offset before and after a reset (after == before: unchanged)."""

    topic: str
    broker_name: str
    queue_id: int
    before: int
    after: int


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds, or ISO 8601 (a time without a zone is local time, as mqadmin's)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < 0:
            raise RmqkError(f"--timestamp must be epoch milliseconds >= 0, got {text}")
        return value
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise RmqkError(
            f"--timestamp {text!r} is neither epoch milliseconds nor ISO 8601 "
            "(e.g. 2026-11-28T16:00:00+00:00)"
        ) from exc
    return int(moment.timestamp() * 1000)


async def reset_offset(
    client: AdminClient,
    group: str,
    topic: str,
    *,
    timestamp: int | None = None,
    to: str | None = None,
    offset: int | None = None,
    queue: int | None = None,
    dry_run: bool = False,
) -> list[OffsetReset]:
    """Reset ``group``'s offsets on ``topic``; with ``dry_run`` only compute them."""
    chosen = [x is not None for x in (timestamp, to, offset)]
    if sum(chosen) != 1:
        raise RmqkError("choose exactly one of timestamp, to (earliest|latest), offset")
    if (offset is None) != (queue is None):
        raise RmqkError("offset and queue go together: --offset N --queue Q")
    if to is not None and to not in TO_TIMESTAMP:
        raise RmqkError(f"--to must be earliest or latest, got {to!r}")
    if offset is not None and offset < 0:
        raise RmqkError(f"--offset must be >= 0, got {offset}")
    brokers = [b for b in (await client.route_brokers(topic) or []) if b.master is not None]
    if not brokers:
        raise RmqkError(f"topic {topic!r} has no route with a master on {client.namesrv_addr}")
    if offset is not None and not dry_run:
        online = await client.invoke(
            brokers[0].master or "",
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": group},
        )
        if online.code == ResponseCode.SUCCESS:
            raise RmqkError(
                f"consumer group {group!r} has members online: --offset --queue writes the "
                "stored offset, which running members overwrite; stop the group first or use "
                "--timestamp / --to, which the running members obey"
            )
    out: list[OffsetReset] = []
    for broker in brokers:
        out.extend(
            await _reset_on(client, broker, group, topic, timestamp, to, offset, queue, dry_run)
        )
    if offset is not None and not out:
        raise RmqkError(f"topic {topic!r} has no queue {queue} on any broker")
    return sorted(out, key=lambda r: (r.broker_name, r.queue_id))


async def _reset_on(
    client: AdminClient,
    broker: BrokerInfo,
    group: str,
    topic: str,
    timestamp: int | None,
    to: str | None,
    offset: int | None,
    queue: int | None,
    dry_run: bool,
) -> list[OffsetReset]:
    addr = broker.master or ""
    before = {
        p.queue_id: p.consumer_offset
        for p in await client.consume_stats(broker, group, topic)
        if p.topic == topic
    }
    if not before:
        raise RmqkError(
            f"consumer group {group!r} has no offsets of topic {topic!r} on broker "
            f"{broker.broker_name} (mqadmin: THe consumer group not exist)"
        )
    if offset is not None:
        if queue not in before:
            return []
        targets = {queue: offset}
    else:
        targets = {q: await _target(client, addr, topic, q, timestamp, to) for q in before}
    if not dry_run:
        targets = await _apply(client, addr, group, topic, timestamp, to, targets)
    return [
        OffsetReset(topic, broker.broker_name, q, before[q], after) for q, after in targets.items()
    ]


async def _target(
    client: AdminClient, addr: str, topic: str, queue_id: int, timestamp: int | None, to: str | None
) -> int:
    if to == "latest":
        code, fields = RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id}
    elif to == "earliest":
        code, fields = RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id}
    else:
        code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        fields = {"topic": topic, "queueId": queue_id, "timestamp": timestamp}
    response = await client.invoke(addr, code, fields)
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark, addr)
    return int(response.field("offset") or 0)


async def _apply(
    client: AdminClient,
    addr: str,
    group: str,
    topic: str,
    timestamp: int | None,
    to: str | None,
    targets: dict[int, int],
) -> dict[int, int]:
    if timestamp is not None or to is not None:
        wire_ts = timestamp if timestamp is not None else TO_TIMESTAMP[to or ""]
        response = await client.invoke(
            addr,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": topic, "group": group, "timestamp": wire_ts, "isForce": True},
        )
        if response.code == ResponseCode.SUCCESS:
            pushed = decode_reset_offset(response.body) if response.body else {}
            return {
                q: next((o for mq, o in pushed.items() if mq.queue_id == q), t)
                for q, t in targets.items()
            }
        if response.code != ResponseCode.CONSUMER_NOT_ONLINE:
            raise BrokerError(response.code, response.remark, addr)
    # The group is stopped (or --offset): write the stored offsets, mqadmin's old path.
    for queue_id, target in targets.items():
        response = await client.invoke(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": target},
        )
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr)
    return targets


def add_reset_arguments(parser: object) -> None:
    """The reset-offset subcommand's own options (admin_cli adds the common ones)."""
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    parser.add_argument("--group", "-g", required=True, help="the consumer group")
    parser.add_argument("--topic", "-t", required=True, help="the topic")
    parser.add_argument(
        "--timestamp", "-s", default=None, help="epoch milliseconds or ISO 8601 time"
    )
    parser.add_argument("--to", choices=sorted(TO_TIMESTAMP), default=None)
    parser.add_argument("--offset", type=int, default=None, help="an offset, with --queue")
    parser.add_argument("--queue", type=int, default=None, help="the queue id of --offset")
    parser.add_argument(
        "--dry-run", action="store_true", help="change nothing; print each queue's offsets"
    )


async def run_reset(client: AdminClient, args: object) -> int:
    """CLI action: exactly one way to choose the offsets, else a usage error (exit 2)."""
    import argparse
    import json
    import sys

    assert isinstance(args, argparse.Namespace)
    ways = [args.timestamp is not None, args.to is not None, args.offset is not None]
    if sum(ways) != 1 or (args.offset is None) != (args.queue is None):
        print(
            "rmqk admin consumer reset-offset: give exactly one of --timestamp, --to, "
            "--offset N --queue Q",
            file=sys.stderr,
        )
        return 2
    timestamp = parse_timestamp(args.timestamp) if args.timestamp is not None else None
    rows = await reset_offset(
        client,
        args.group,
        args.topic,
        timestamp=timestamp,
        to=args.to,
        offset=args.offset,
        queue=args.queue,
        dry_run=args.dry_run,
    )
    if args.json:
        print(json.dumps([attrs.asdict(r) for r in rows], indent=2))
        return 0
    print("DRY RUN: nothing changed" if args.dry_run else "offsets reset")
    width = max(len(r.broker_name) for r in rows)
    print(f"{'BROKER'.ljust(width)}  QUEUE  BEFORE  AFTER")
    for r in rows:
        print(f"{r.broker_name.ljust(width)}  {r.queue_id:<5}  {r.before:<6}  {r.after}")
    return 0
