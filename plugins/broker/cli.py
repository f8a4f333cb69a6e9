"""``rmqk broker`` and ``rmqk admin``.

``rmqk broker`` runs the embedded name server and broker until interrupted.
``rmqk admin`` talks the remoting protocol to any 4.9 name server and its
brokers (the embedded ones or Apache's): topics, consumer progress per queue,
and messages by offset message id. Output is a table by default, JSON with
``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import json
import os
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqk.cli import Command
from rmqk.errors import BrokerError, RemotingError, RmqkError
from rmqk.message import MessageExt, decode_offset_msg_id
from rmqk.model import PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmqk.plugins.broker import jsonwire
from rmqk.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = [
    "ADMIN_COMMAND",
    "BROKER_COMMAND",
    "AdminClient",
    "BrokerInfo",
    "QueueProgress",
    "TopicInfo",
]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_DATA_DIR = "~/.rmqk/broker"


# ----------------------------------------------------------------------------- broker


def _broker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"store directory (default: {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--namesrv-port",
        type=int,
        default=9876,
        metavar="PORT",
        help="name server port (default: 9876)",
    )
    parser.add_argument(
        "--broker-port",
        type=int,
        default=10911,
        metavar="PORT",
        help="broker port (default: 10911)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="PORT",
        help="name server on PORT and broker on PORT+1; 0 picks two free ports and prints them",
    )
    parser.add_argument("--broker-name", default="broker-a", help="broker name (default: broker-a)")
    parser.add_argument(
        "--cluster", default="DefaultCluster", help="cluster name (default: DefaultCluster)"
    )
    parser.add_argument(
        "--advertised-host",
        default=None,
        help="host written into routes and message ids (default: --host)",
    )
    parser.add_argument(
        "--flush",
        choices=["async", "sync"],
        default="async",
        help="commit log flushing (default: async)",
    )
    parser.add_argument(
        "--delay-levels",
        default=None,
        metavar="LEVELS",
        help='delay levels, e.g. "1s 5s 10s" (default: Apache\'s 18 levels, 1s to 2h)',
    )
    parser.add_argument(
        "--no-auto-create-topic",
        dest="auto_create_topic",
        action="store_false",
        help="refuse sends to unknown topics (autoCreateTopicEnable=false)",
    )
    parser.add_argument(
        "--acl",
        default=None,
        metavar="FILE",
        help="check every request against this ACL file (.toml or .json with the keys of "
        "Apache's plain_acl.yml)",
    )
    parser.add_argument(
        "--tls-cert", default=None, metavar="PEM", help="serve TLS with this certificate chain"
    )
    parser.add_argument("--tls-key", default=None, metavar="PEM", help="the certificate's key")
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="PEM",
        help="CA that client certificates must chain to (with --tls-client-auth)",
    )
    parser.add_argument(
        "--tls-mode",
        choices=["enforcing", "permissive"],
        default="enforcing",
        help="enforcing: TLS only; permissive: TLS and plain on one port (default: enforcing)",
    )
    parser.add_argument(
        "--tls-client-auth",
        choices=["none", "optional", "require"],
        default="none",
        help="ask clients for a certificate (default: none)",
    )


def _broker_tls(args: argparse.Namespace) -> Any:
    from rmqk.plugins.broker.server import ServerTlsConfig

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_ca is not None or args.tls_client_auth != "none":
            raise RmqkError("--tls-ca and --tls-client-auth need --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise RmqkError("TLS needs both --tls-cert and --tls-key")
    return ServerTlsConfig(
        cert_file=os.path.expanduser(args.tls_cert),
        key_file=os.path.expanduser(args.tls_key),
        ca_file=os.path.expanduser(args.tls_ca) if args.tls_ca else None,
        mode=args.tls_mode,
        client_auth=args.tls_client_auth,
    )


def _broker_run(args: argparse.Namespace) -> int:
    from rmqk.plugins.broker import EmbeddedBroker

    namesrv_port, broker_port = args.namesrv_port, args.broker_port
    if args.port is not None:
        namesrv_port = args.port
        broker_port = 0 if args.port == 0 else args.port + 1
    broker = EmbeddedBroker(
        Path(os.path.expanduser(args.data)),
        host=args.host,
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        broker_name=args.broker_name,
        cluster=args.cluster,
        advertised_host=args.advertised_host,
        flush=args.flush,
        delay_levels=args.delay_levels,
        auto_create_topic=args.auto_create_topic,
        acl=os.path.expanduser(args.acl) if args.acl else None,
        tls=_broker_tls(args),
    )

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await broker.start()
        except OSError as exc:
            raise RmqkError(f"cannot start the broker: {exc}") from exc
        try:
            print(f"rmqk broker: name server listening on {broker.namesrv_addr}", flush=True)
            print(
                f"rmqk broker: broker {broker.broker_name} (cluster {broker.cluster}) "
                f"listening on {broker.broker_addr}",
                flush=True,
            )
            if broker.acl is not None:
                print(f"rmqk broker: ACL from {args.acl}", flush=True)
            if broker.tls is not None:
                print(f"rmqk broker: TLS ({broker.tls.mode}) on both ports", flush=True)
            print(f"rmqk broker: data in {broker.data_dir}; stop with Ctrl+C", flush=True)
            await stop.wait()
        finally:
            await broker.stop()
            print("rmqk broker: stopped", flush=True)

    asyncio.run(serve())
    return 0


BROKER_COMMAND = Command(
    help="run an embedded RocketMQ 4.9 name server and broker",
    run=_broker_run,
    add_arguments=_broker_args,
    description=(
        "Run a name server and a broker in one process, speaking the RocketMQ 4.9 "
        "remoting protocol and storing messages under --data."
    ),
    examples=(
        "rmqk broker",
        "rmqk broker --port 0 --data /tmp/rmqk",
        'rmqk broker --delay-levels "100ms 200ms 500ms" --no-auto-create-topic',
        "rmqk broker --acl plain_acl.toml --tls-cert server.crt --tls-key server.key",
    ),
)


# ----------------------------------------------------------------------------- admin client


@attrs.frozen
class BrokerInfo:
    cluster: str
    broker_name: str
    addrs: Mapping[int, str]

    @property
    def master(self) -> str | None:
        return self.addrs.get(0)


@attrs.frozen
class TopicInfo:
    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool = False


@attrs.frozen
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


class AdminClient:
    """Requests an admin tool sends, over one connection per address."""

    def __init__(self, namesrv_addr: str, *, timeout: float = 5.0) -> None:
        self.namesrv_addr = namesrv_addr
        self.timeout = timeout
        self._conns: dict[str, Any] = {}

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def invoke(
        self, addr: str, code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        from rmqk.plugins.broker.server import connect, make_request

        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = await connect(addr, timeout=self.timeout, label="admin")
            self._conns[addr] = conn
        request = make_request(code, fields, body)
        return await conn.request(request, self.timeout)

    async def _ok(
        self, addr: str, code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        response = await self.invoke(addr, code, fields, body)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr)
        return response

    async def brokers(self) -> list[BrokerInfo]:
        response = await self._ok(self.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        data = jsonwire.loads(response.body) if response.body else {}
        out: list[BrokerInfo] = []
        for name, info in sorted(_mapping(data.get("brokerAddrTable")).items()):
            addrs = {int(k): str(v) for k, v in _mapping(info.get("brokerAddrs")).items()}
            out.append(BrokerInfo(str(info.get("cluster", "")), str(name), addrs))
        return out

    async def masters(self, cluster: str | None = None) -> list[BrokerInfo]:
        return [
            b
            for b in await self.brokers()
            if b.master is not None and (cluster is None or b.cluster == cluster)
        ]

    async def topic_names(self) -> list[str]:
        response = await self._ok(self.namesrv_addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        data = jsonwire.loads(response.body) if response.body else {}
        return sorted(str(t) for t in jsonwire.as_list(data.get("topicList")))

    async def route_brokers(self, topic: str) -> list[BrokerInfo] | None:
        response = await self.invoke(
            self.namesrv_addr,
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": topic, "acceptStandardJsonOnly": True},
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, self.namesrv_addr)
        data = jsonwire.loads(response.body)
        return [
            BrokerInfo(
                str(b.get("cluster", "")),
                str(b["brokerName"]),
                {int(k): str(v) for k, v in _mapping(b.get("brokerAddrs")).items()},
            )
            for b in jsonwire.as_list(data.get("brokerDatas"))
        ]

    async def topic_configs(self, broker: BrokerInfo) -> list[TopicInfo]:
        assert broker.master is not None
        response = await self._ok(broker.master, RequestCode.GET_ALL_TOPIC_CONFIG)
        data = jsonwire.loads(response.body) if response.body else {}
        out = []
        for name, cfg in _mapping(data.get("topicConfigTable")).items():
            out.append(
                TopicInfo(
                    topic=str(cfg.get("topicName") or name),
                    broker_name=broker.broker_name,
                    read_queue_nums=int(cfg.get("readQueueNums", 0)),
                    write_queue_nums=int(cfg.get("writeQueueNums", 0)),
                    perm=int(cfg.get("perm", 0)),
                    order=bool(cfg.get("order", False)),
                )
            )
        return sorted(out, key=lambda t: t.topic)

    async def create_topic(
        self,
        broker_addr: str,
        topic: str,
        *,
        read_queues: int,
        write_queues: int,
        perm: int,
        order: bool,
    ) -> None:
        await self._ok(
            broker_addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": read_queues,
                "writeQueueNums": write_queues,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": order,
            },
        )

    async def consume_stats(
        self, broker: BrokerInfo, group: str, topic: str | None = None
    ) -> list[QueueProgress]:
        assert broker.master is not None
        fields: dict[str, object] = {"consumerGroup": group}
        if topic:
            fields["topic"] = topic
        response = await self._ok(broker.master, RequestCode.GET_CONSUME_STATS, fields)
        data = jsonwire.loads(response.body) if response.body else {}
        table = data.get("offsetTable")
        items: Iterable[tuple[Any, Any]]
        if isinstance(table, jsonwire.ObjectKeyMap):
            items = table.items
        elif isinstance(table, Mapping):
            items = table.items()
        else:
            items = ()
        out = []
        for key, wrapper in items:
            mq = key if isinstance(key, Mapping) else {}
            out.append(
                QueueProgress(
                    topic=str(mq.get("topic", "")),
                    broker_name=str(mq.get("brokerName", broker.broker_name)),
                    queue_id=int(mq.get("queueId", 0)),
                    broker_offset=int(wrapper.get("brokerOffset", 0)),
                    consumer_offset=int(wrapper.get("consumerOffset", 0)),
                    last_timestamp=int(wrapper.get("lastTimestamp", 0)),
                )
            )
        return out

    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """examineConsumeStats: ask every broker of the group's retry topic (or all masters)."""
        brokers = await self.route_brokers(RETRY_GROUP_TOPIC_PREFIX + group)
        if not brokers:
            brokers = await self.masters()
        rows: list[QueueProgress] = []
        for broker in brokers:
            if broker.master is not None:
                rows.extend(await self.consume_stats(broker, group, topic))
        return sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id))

    async def view_message(self, msg_id: str, broker_addr: str | None = None) -> MessageExt:
        from rmqk.plugins.remoting.message_codec import decode_message

        try:
            addr, offset = decode_offset_msg_id(msg_id.strip())
        except ValueError:
            raise RmqkError(
                f"{msg_id!r} is not an offset message id (hex of the broker's address and the "
                "commit log offset, as in SendResult.offset_msg_id)"
            ) from None
        target = broker_addr or addr
        try:
            response = await self._ok(target, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        except RemotingError as exc:
            raise RmqkError(
                f"message {msg_id}: cannot reach the broker {target} its id names ({exc}); "
                "is it an offset message id?"
            ) from exc
        message, _ = decode_message(response.body, 0)
        return message


def _mapping(value: Any) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    if isinstance(value, jsonwire.ObjectKeyMap):
        return dict(value.items)
    raise RmqkError(f"unexpected JSON in a response body: {value!r:.80}")


# ----------------------------------------------------------------------------- admin output


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _perm_text(perm: int) -> str:
    from rmqk.plugins.broker.processors import perm_to_string

    return perm_to_string(perm)


def _time_text(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


async def _admin_topic_create(client: AdminClient, args: argparse.Namespace) -> int:
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


async def _admin_consumer_progress(client: AdminClient, args: argparse.Namespace) -> int:
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


def _message_dict(message: MessageExt, msg_id: str) -> dict[str, Any]:
    try:
        body: str = message.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body = base64.b64encode(message.body).decode("ascii")
        encoding = "base64"
    return {
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


async def _admin_message(client: AdminClient, args: argparse.Namespace) -> int:
    message = await client.view_message(args.msg_id, args.broker)
    info = _message_dict(message, args.msg_id)
    if args.json:
        _print_json(info)
        return 0
    labels = [
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


def _admin_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="admin_command", metavar="SUBCOMMAND")
    topic = sub.add_parser("topic", help="create or list topics")
    topic_sub = topic.add_subparsers(dest="topic_command", metavar="ACTION")

    create = topic_sub.add_parser("create", help="create or update a topic on the master brokers")
    _admin_common(create)
    create.add_argument("topic")
    create.add_argument("--queues", type=int, default=4, help="read and write queues (default: 4)")
    create.add_argument("--read-queues", type=int, default=None)
    create.add_argument("--write-queues", type=int, default=None)
    create.add_argument(
        "--perm",
        type=int,
        default=PERM_READ | PERM_WRITE,
        help="permission bits: 2 W, 4 R, 6 RW (default: 6)",
    )
    create.add_argument("--order", action="store_true", help="mark the topic ordered")
    where = create.add_mutually_exclusive_group()
    where.add_argument("--broker", "-b", metavar="ADDR", help="only this broker")
    where.add_argument("--cluster", "-c", help="every master of this cluster (default: all)")
    create.set_defaults(_admin=_admin_topic_create)

    listing = topic_sub.add_parser("list", help="list topics with their queues per broker")
    _admin_common(listing)
    listing.add_argument("--cluster", "-c", default=None, help="only brokers of this cluster")
    listing.set_defaults(_admin=_admin_topic_list)

    consumer = sub.add_parser("consumer", help="consumer groups")
    consumer_sub = consumer.add_subparsers(dest="consumer_command", metavar="ACTION")
    progress = consumer_sub.add_parser(
        "progress", help="per queue: broker offset, consumer offset and their difference"
    )
    _admin_common(progress)
    progress.add_argument("group")
    progress.add_argument("--topic", "-t", default=None, help="only this topic")
    progress.set_defaults(_admin=_admin_consumer_progress)

    message = sub.add_parser("message", help="show a message by its offset message id")
    _admin_common(message)
    message.add_argument("msg_id", metavar="OFFSET_MSG_ID")
    message.add_argument(
        "--broker",
        "-b",
        default=None,
        metavar="ADDR",
        help="ask this broker instead of the one the id names",
    )
    message.set_defaults(_admin=_admin_message)


def _admin_run(args: argparse.Namespace) -> int:
    action = getattr(args, "_admin", None)
    if action is None:
        print(
            "rmqk admin: choose a subcommand: topic create|list, consumer progress, message "
            "(see rmqk admin --help)",
            file=sys.stderr,
        )
        return 2

    async def run() -> int:
        async with AdminClient(args.namesrv, timeout=args.timeout) as client:
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
        "rmqk admin consumer progress order-analytics",
        "rmqk admin message 7F00000100002A9F0000000000000000",
    ),
)
