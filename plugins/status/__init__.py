"""rmqk.plugins.status: the ``rmqk status`` command.

``rmqk status CONFIG`` shows, for every consumer a config file composes, the
clients of its group that are online, the queues each holds, the committed and
broker offsets of every queue, the lag, and what each client caches, read from
the brokers and from the clients' running info (relayed by the brokers, so it
works for Java clients of the group too). ``rmqk status --namesrv ADDR --group G``
does the same without a config file. ``--watch [SECONDS]`` redraws it until
Ctrl-C, with each group's total lag over time as a sparkline.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from rmqk.console.termchart import use_unicode
from rmqk.model import MessageQueue
from rmqk.model.errors import RmqkError
from rmqk.model.namespace import check_namespace, effective_namespace, wrap
from rmqk.plugins.status.collect import ClientStatus, GroupStatus, QueueStatus, group_status
from rmqk.plugins.status.watch import CLEAR_SCREEN, LagHistory, format_watch
from rmqk.spi.commands import Command
from rmqk.spi.hookspecs import Register, hookimpl
from rmqk.spi.transport import Credentials, TlsConfig, Transport

__all__ = ["STATUS_COMMAND", "format_status", "rmqk_register_commands", "status_json"]


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", nargs="?", help="TOML config file: show every consumer it composes"
    )
    parser.add_argument(
        "--consumer",
        action="append",
        default=None,
        metavar="NAME",
        help="with CONFIG: only this consumer table (repeatable)",
    )
    parser.add_argument("--namesrv", help="without CONFIG: name server address(es), ';'-separated")
    parser.add_argument("--group", action="append", help="without CONFIG: the consumer group")
    parser.add_argument(
        "--namespace",
        default=None,
        help="without CONFIG: the consumers' namespace; --group and --topic are wrapped in it "
        "(a config's consumers use their own namespace option)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        help="also show this topic's queues (repeatable; needed when no consumer is online)",
    )
    parser.add_argument(
        # None, not "tcp", so one given next to CONFIG (which names its own) can be refused.
        "--transport",
        default=None,
        help="without CONFIG: the transport (default: tcp)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="per request (default: 3)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--watch",
        nargs="?",
        # Read as text: `--watch CONFIG` must not fail on the optional number (see _run).
        const="2",
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) with each group's lag over time, until Ctrl-C",
    )


@attrs.frozen
class _Target:
    group: str
    topics: tuple[str, ...]
    namesrv_addrs: tuple[str, ...]
    transport: str
    transport_options: Any
    use_tls: bool
    name: str | None
    # The consumer's own TLS files and account, so status reads as the consumer talks.
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    credentials: Credentials | None = None


def _targets(args: argparse.Namespace) -> list[_Target]:
    if args.config and (args.namesrv or args.group):
        raise RmqkError("give either a config file or --namesrv with --group, not both")
    if args.config:
        import rmqk

        config = rmqk.load_config(args.config)
        # The acl plugin reads its [acl] table here, so requests are signed as the consumers'.
        config.announce()
        specs = [s for s in config.consumers if not args.consumer or s.name in args.consumer]
        missing = sorted(set(args.consumer or ()) - {s.name for s in specs})
        if missing:
            known = ", ".join(s.name for s in config.consumers)
            raise RmqkError(
                f"no consumer named {', '.join(missing)} in {config.path}; consumers: {known}"
            )
        if args.namespace:
            raise RmqkError("--namespace goes without CONFIG; a config names it per consumer")
        if args.transport is not None:
            raise RmqkError("--transport goes without CONFIG; a config names it per consumer")
        targets = []
        for s in specs:
            ns = effective_namespace(s.options.namespace, s.namesrv_addrs)
            names = [*(sub.topic for sub in s.subscriptions), *args.topic]
            targets.append(
                _Target(
                    group=wrap(ns, s.group),
                    topics=tuple(dict.fromkeys(wrap(ns, t) for t in names)),
                    namesrv_addrs=s.namesrv_addrs,
                    transport=s.transport,
                    transport_options=s.transport_options,
                    use_tls=s.options.use_tls,
                    name=s.name,
                    tls=s.options.tls,
                    credentials=s.options.credentials,
                )
            )
        return targets
    if not args.namesrv or not args.group:
        raise RmqkError("give a config file, or --namesrv ADDR and --group GROUP")
    addrs = tuple(a.strip() for a in args.namesrv.split(";") if a.strip())
    problem = check_namespace(args.namespace)
    if problem:
        raise RmqkError(f"--namespace: {problem}")
    ns = effective_namespace(args.namespace, addrs)
    topics = tuple(wrap(ns, t) for t in args.topic)
    return [
        _Target(wrap(ns, g), topics, addrs, args.transport or "tcp", {}, False, None)
        for g in args.group
    ]


async def _open(target: _Target, timeout_ms: int) -> Transport:
    from rmqk.spi.registry import get_plugin_manager, registries
    from rmqk.spi.transport import TransportConfig

    config = TransportConfig(
        namesrv_addrs=target.namesrv_addrs,
        client_id="rmqk-status",
        request_timeout_ms=timeout_ms,
        tls=target.tls if target.use_tls else TlsConfig(),
        options=dict(target.transport_options),
        credentials=target.credentials,
    )
    transport = registries().transports.create(
        target.transport, attrs.evolve(config, hook=get_plugin_manager().hook), config.options
    )
    await transport.start()
    return transport


async def _read(target: _Target, transport: Transport, timeout_ms: int) -> GroupStatus:
    return await group_status(
        transport,
        target.group,
        target.topics,
        name=target.name,
        timeout_ms=timeout_ms,
        namesrv_addrs=target.namesrv_addrs,
    )


async def _read_all(targets: Sequence[_Target], timeout_ms: int) -> list[GroupStatus]:
    out = []
    for target in targets:
        transport = await _open(target, timeout_ms)
        try:
            out.append(await _read(target, transport, timeout_ms))
        finally:
            await transport.close()
    return out


def _watch_seconds(args: argparse.Namespace) -> float | None:
    """``--watch [SECONDS]``: the optional number may be followed by, or be taken for, CONFIG.

    ``rmqk status --watch examples/jsonl.toml`` reads as a watch every 2 s of that config,
    as a person means it, not as a bad number of seconds.
    """
    if args.watch is None:
        return None
    try:
        seconds = float(args.watch)
    except ValueError:
        if args.config is not None:
            raise RmqkError(f"--watch takes a number of seconds, got {args.watch!r}") from None
        args.config, seconds = args.watch, 2.0
    if not seconds > 0:
        raise RmqkError("--watch needs a positive number of seconds")
    return seconds


def _run(args: argparse.Namespace) -> int:
    seconds = _watch_seconds(args)
    if not args.timeout > 0:
        raise RmqkError(f"--timeout must be more than 0 seconds, got {args.timeout:g}")
    targets = _targets(args)
    timeout_ms = max(int(args.timeout * 1000), 1)
    if seconds is not None:
        if args.json:
            raise RmqkError("--watch draws for a person and --json is for scripts: give one")
        return watch(targets, seconds, timeout_ms)
    statuses = asyncio.run(_read_all(targets, timeout_ms))
    if args.json:
        print(json.dumps(status_json(statuses), indent=2))
    else:
        print(format_status(statuses))
    healthy = all(s.clients and not s.problems for s in statuses)
    return 0 if healthy else 1


def watch(targets: Sequence[_Target], seconds: float, timeout_ms: int) -> int:
    """Redraw the status every ``seconds`` with each group's lag history, until Ctrl-C."""
    stream = sys.stdout
    live = stream.isatty()
    history = LagHistory()

    async def loop() -> None:
        transports = [await _open(t, timeout_ms) for t in targets]
        try:
            while True:
                started = time.monotonic()
                statuses = [
                    await _read(t, tr, timeout_ms)
                    for t, tr in zip(targets, transports, strict=True)
                ]
                history.add(statuses)
                columns = shutil.get_terminal_size((100, 24)).columns
                screen = format_watch(
                    statuses,
                    history,
                    tables=format_status(statuses),
                    seconds=seconds,
                    width=min(columns, 100),
                    unicode=use_unicode(stream),
                    now=datetime.datetime.now(),
                )
                # Home and clear: the next screen replaces this one instead of scrolling.
                stream.write((CLEAR_SCREEN if live else "") + screen + "\n")
                stream.flush()
                await asyncio.sleep(max(seconds - (time.monotonic() - started), 0.0))
        finally:
            for transport in transports:
                await transport.close()

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        # Ctrl-C is how a watch ends: the last screen stays, and that is success.
        stream.write("\n")
        stream.flush()
    return 0


# -- output ---------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        (indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in cells
    )


def _time(ms: int | None) -> str:
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000)
    # Today's date says nothing and costs eleven columns.
    if moment.date() == datetime.date.today():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _client_rows(clients: Sequence[ClientStatus]) -> list[list[object]]:
    return [
        [
            f"#{n}",
            c.client_id,
            c.state,
            len(c.queues) if c.state == "RUNNING" else "-",
            "-" if c.orderly is None else ("orderly" if c.orderly else "concurrent"),
            f"{c.consume_ok_tps:.1f}",
            f"{c.consume_failed_tps:.1f}",
            _time(c.started_ms),
        ]
        for n, c in enumerate(clients, 1)
    ]


def _queue_rows(
    queues: Sequence[QueueStatus], clients: Sequence[ClientStatus]
) -> list[list[object]]:
    # Owners by their row in the consumer table: a client id is ~30 columns, and
    # the queue table would no longer fit a terminal.
    numbers = {c.client_id: f"#{n}" for n, c in enumerate(clients, 1)}
    return [
        [
            q.queue.topic,
            q.queue.broker_name,
            q.queue.queue_id,
            _opt(q.broker_offset),
            _opt(q.consumer_offset),
            _opt(q.lag),
            _opt(q.cached_messages),
            q.state,
            "-" if q.owner is None else numbers.get(q.owner, q.owner),
        ]
        for q in queues
    ]


def _answering(online: int, members: int) -> str:
    if members == 0:
        return "no consumer answering"
    return f"{online} of {members} consumer(s) answering"


def format_status(statuses: Sequence[GroupStatus]) -> str:
    """The tables ``rmqk status`` prints."""
    blocks = []
    for s in statuses:
        where = f"[consumers.{s.name}] " if s.name else ""
        online = sum(1 for c in s.clients if c.state == "RUNNING")
        if s.unreachable:
            headline = f"{where}group {s.group}: the cluster could not be reached"
        else:
            headline = (
                f"{where}group {s.group}: {_answering(online, len(s.clients))}, "
                f"{len(s.queues)} queue(s), lag {s.lag}"
            )
        lines = [headline]
        if s.clients:
            lines.append("")
            lines.append(
                _table(
                    ["#", "consumer", "state", "queues", "mode", "ok/s", "failed/s", "started"],
                    _client_rows(s.clients),
                )
            )
            for c in s.clients:
                if c.error:
                    lines.append(f"  {c.client_id}: {c.error}")
        if s.queues:
            lines.append("")
            lines.append(
                _table(
                    [
                        "topic",
                        "broker",
                        "queue",
                        "broker offset",
                        "consumer offset",
                        "lag",
                        "cached",
                        "state",
                        "owner",
                    ],
                    _queue_rows(s.queues, s.clients),
                )
            )
        if s.problems:
            lines.append("")
            lines.append("  problems:")
            lines.extend(f"    - {p}" for p in s.problems)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _mq(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker": mq.broker_name, "queue": mq.queue_id}


def status_json(statuses: Sequence[GroupStatus]) -> list[dict[str, Any]]:
    """The JSON ``rmqk status --json`` prints: one object per group."""
    out = []
    for s in statuses:
        out.append(
            {
                "name": s.name,
                "group": s.group,
                "topics": list(s.topics),
                # Unknown, not 0, when no broker could be asked.
                "lag": None if s.unreachable else s.lag,
                "unreachable": s.unreachable,
                "clients": [
                    {
                        "client_id": c.client_id,
                        "state": c.state,
                        "error": c.error,
                        "queues": [_mq(q) for q in c.queues],
                        "topics": list(c.topics),
                        "orderly": c.orderly,
                        "started_ms": c.started_ms,
                        "version": c.version,
                        "consume_ok_tps": c.consume_ok_tps,
                        "consume_failed_tps": c.consume_failed_tps,
                        "pull_tps": c.pull_tps,
                    }
                    for c in s.clients
                ],
                "queues": [
                    {
                        **_mq(q.queue),
                        "broker_offset": q.broker_offset,
                        "consumer_offset": q.consumer_offset,
                        "lag": q.lag,
                        "cached_messages": q.cached_messages,
                        "state": q.state,
                        "owner": q.owner,
                        "last_pull_ms": q.last_pull_ms,
                    }
                    for q in s.queues
                ],
                "problems": list(s.problems),
            }
        )
    return out


STATUS_COMMAND = Command(
    help="show each consumer's queues, offsets, lag and state, read from the brokers",
    run=_run,
    add_arguments=_args,
    description=(
        "Show, for each consumer group, the clients online, the queues each holds, the "
        "broker and committed offset of every queue, the lag, and what each client caches. "
        "Offsets come from the brokers; the rest from each client's running info, which the "
        "brokers relay (Java clients answer it too). Exit status 1 when a group has no "
        "client online or something did not answer."
    ),
    examples=(
        "rmqk status examples/jsonl.toml",
        "rmqk status consumers.toml --consumer orders --json",
        "rmqk status --namesrv 127.0.0.1:9876 --group order-analytics",
        "rmqk status --namesrv 127.0.0.1:9876 --group order-analytics --topic Orders",
        "rmqk status examples/jsonl.toml --watch 1",
    ),
)


@hookimpl
def rmqk_register_commands(register: Register) -> None:
    register("status", STATUS_COMMAND)
