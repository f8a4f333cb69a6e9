"""The requests ``rmqk admin`` sends to a RocketMQ 4.9 name server and its brokers.

Works against the embedded name server and broker as well as Apache's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rmqk.model import RETRY_GROUP_TOPIC_PREFIX
from rmqk.model.errors import BrokerError, ConfigError, RemotingError, RmqkError
from rmqk.model.message import MessageExt, MessageProperty, decode_offset_msg_id
from rmqk.plugins.remoting import acl
from rmqk.spi.client_options import CLIENT_OPTIONS, ClientOptions, resolve_client_options
from rmqk.spi.options import Where
from rmqk.wire import jsonwire
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode
from rmqk.wire.tls import client_ssl_context, server_hostname

__all__ = [
    "ADMIN_CLIENT_OPTIONS",
    "LONG_MAX",
    "AdminClient",
    "BrokerInfo",
    "MessageIdKind",
    "QueryResult",
    "QueueProgress",
    "TopicInfo",
    "TopicQueueStatus",
    "decode_topic_stats",
    "message_id_kind",
]

log = logging.getLogger("rmqk.admin")

# Java's Long.MAX_VALUE: the open end of a time range, as mqadmin passes it.
LONG_MAX = (1 << 63) - 1
# MixAll.UNIQUE_MSG_QUERY_FLAG (the broker then bounds maxNum itself).
_UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

# Commit log offsets are far below 2**48 (256 TiB) on any broker; a unique id read
# as an offset id has its timestamp there instead, far above it.
_MAX_COMMIT_LOG_OFFSET = 1 << 48


class MessageIdKind(enum.Enum):
    """What a message id is, as far as its text tells."""

    # The broker's id (SendResult.offset_msg_id): store host and commit log offset.
    OFFSET = "offset"
    # The client's id (SendResult.msg_id, UNIQ_KEY): ip, pid, time and a counter.
    UNIQUE = "unique"
    INVALID = "invalid"


def message_id_kind(msg_id: str) -> MessageIdKind:
    """Tell an offset message id from a unique (client) one; both are 32 or 56 hex chars.

    An offset id holds a port (4 bytes, at most 65535) and a non-negative commit
    log offset; in a unique id those bytes are the pid, a hash, the time and a
    counter, which do not read as both.
    """
    text = msg_id.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return MessageIdKind.INVALID
    if len(raw) not in (16, 28):
        return MessageIdKind.INVALID
    rest = raw[len(raw) - 12 :]
    port = int.from_bytes(rest[:4], "big")
    offset = int.from_bytes(rest[4:], "big", signed=True)
    if 0 < port <= 0xFFFF and 0 <= offset < _MAX_COMMIT_LOG_OFFSET:
        return MessageIdKind.OFFSET
    return MessageIdKind.UNIQUE


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


@attrs.frozen
class TopicQueueStatus:
    """One queue of a topic as GET_TOPIC_STATS_INFO tells it (Java's TopicOffset).

    ``last_update_timestamp`` is the store time of the queue's last message, in epoch
    ms; 0 for a queue no message was written to.
    """

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@attrs.frozen
class QueryResult:
    """What a query by key found (Java's QueryResult), and the brokers that did not answer."""

    index_last_update_timestamp: int
    messages: tuple[MessageExt, ...]
    failures: tuple[str, ...] = ()  # "<address>: <why>" per broker that failed
    # Brokers (among the failures) that cannot query at all: REQUEST_CODE_NOT_SUPPORTED.
    unsupported: tuple[str, ...] = ()


# The client options an admin client acts on: where and how it connects, and as whom.
# Every other client option (instance name, intervals, trace, ...) means nothing to
# one-off admin requests and is refused, not ignored.
ADMIN_CLIENT_OPTIONS = (
    "namesrv_addr",
    "use_tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_verify",
    "access_key",
    "secret_key",
    "security_token",
)


class AdminClient:
    """Requests an admin tool sends, over one connection per address.

    Takes the client options of :data:`ADMIN_CLIENT_OPTIONS` by the names every
    client takes (or ``client_options=``): with ``use_tls`` and the ``tls_*`` files it
    connects over TLS; it signs each request with its ``access_key`` and
    ``secret_key``, else with the process defaults (the ``[acl]`` table or
    ``RMQK_ACCESS_KEY`` / ``RMQK_SECRET_KEY``), as an admin tool given an RPCHook does.
    """

    def __init__(
        self,
        namesrv_addr: str | None = None,
        *,
        timeout: float = 5.0,
        client_options: ClientOptions | None = None,
        **client: Any,
    ) -> None:
        where = Where("<admin client options>", "admin client")
        if namesrv_addr is not None and "namesrv_addr" in client:
            raise ConfigError([where.problem("namesrv_addr", "given twice")])
        options = resolve_client_options(client_options, client, where)
        default = ClientOptions()
        unused = [
            spec.name
            for spec in CLIENT_OPTIONS
            if spec.name not in ADMIN_CLIENT_OPTIONS
            and getattr(options, spec.attr) != getattr(default, spec.attr)
        ]
        if unused:
            raise ConfigError(
                [
                    where.problem(
                        name,
                        "an admin client does not use this option; it takes "
                        + ", ".join(ADMIN_CLIENT_OPTIONS),
                    )
                    for name in unused
                ]
            )
        if namesrv_addr is None:
            if not options.namesrv_addr:
                raise ConfigError([where.problem("namesrv_addr", "required: the name server")])
            namesrv_addr = ";".join(options.namesrv_addr)
        self.namesrv_addr = namesrv_addr
        self.timeout = timeout
        self.client_options = options
        self._tls = options.tls
        # Made once (a bad file is a ConfigError here, before any request).
        self._ssl = client_ssl_context(self._tls)
        self._credentials = options.credentials
        # The process defaults, read now as a transport reads them when it is made.
        acl.load_environment()
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
        self,
        addr: str,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        timeout: float | None = None,
    ) -> RemotingCommand:
        from rmqk.plugins.broker.commands import make_request
        from rmqk.plugins.broker.connection import connect

        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            host = addr.rpartition(":")[0]
            conn = await connect(
                addr,
                timeout=self.timeout,
                label="admin",
                ssl_context=self._ssl,
                server_hostname=server_hostname(self._tls, host) if self._ssl else None,
            )
            self._conns[addr] = conn
        request = make_request(code, fields, body)
        credentials = self._credentials or acl.signing_credentials()
        if credentials is not None:
            acl.sign(request, credentials)
        return await conn.request(request, self.timeout if timeout is None else timeout)

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
        """examineConsumeStats: ask every broker of the group's retry topic (or all masters).

        Like mqadmin, a group no broker has offsets of is an error (CONSUMER_NOT_ONLINE),
        not an empty table.
        """
        brokers = await self.route_brokers(RETRY_GROUP_TOPIC_PREFIX + group)
        if not brokers:
            brokers = await self.masters()
        rows: list[QueueProgress] = []
        for broker in brokers:
            if broker.master is not None:
                rows.extend(await self.consume_stats(broker, group, topic))
        if not rows:
            of_topic = f" of topic {topic!r}" if topic else ""
            raise RmqkError(
                f"consumer group {group!r} is not online and has no offsets{of_topic} on any "
                f"broker of {self.namesrv_addr} (mqadmin: CONSUMER_NOT_ONLINE); a group shows "
                "here once one of its consumers has committed an offset"
            )
        return sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id))

    async def topic_stats(self, addr: str, topic: str) -> list[TopicQueueStatus]:
        """GET_TOPIC_STATS_INFO to one broker: its queues of ``topic`` (a TopicStatsTable)."""
        response = await self.invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise RmqkError(
                f"topic {topic!r} does not exist on the broker {addr} (TOPIC_NOT_EXIST: "
                f"{response.remark}), though the name server routes it there"
            )
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr)
        return decode_topic_stats(response.body)

    async def topic_status(self, topic: str) -> list[TopicQueueStatus]:
        """mqadmin topicStatus (examineTopicStats): every queue of ``topic``, broker by broker.

        Asks each broker of the topic's route (its master, else a slave, as Java's
        selectBrokerAddr) and returns the queues sorted by broker name, then queue id.
        A topic the name server has no route for, or no queue of, is an error.
        """
        brokers = await self.route_brokers(topic)
        addrs = [a for a in (_select_addr(b) for b in brokers or ()) if a is not None]
        if not addrs:
            raise RmqkError(
                f"topic {topic!r} has no route on the name server {self.namesrv_addr} "
                "(TOPIC_NOT_EXIST)"
            )
        rows: list[TopicQueueStatus] = []
        for addr in addrs:
            rows.extend(await self.topic_stats(addr, topic))
        if not rows:
            # Java: "Not found the topic stats info".
            raise RmqkError(f"topic {topic!r} has no queues on any of its brokers ({addrs})")
        return sorted(rows, key=lambda r: (r.broker_name, r.queue_id))

    async def reset_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp: int | None = None,
        to: str | None = None,
        offset: int | None = None,
        queue: int | None = None,
        dry_run: bool = False,
    ) -> list[Any]:
        """mqadmin resetOffsetByTime and its kin: see :mod:`rmqk.plugins.admin.reset_offset`.

        Returns one ``OffsetReset`` (queue, offset before, after) per queue touched.
        """
        from rmqk.plugins.admin.reset_offset import reset_offset

        return list(
            await reset_offset(
                self,
                group,
                topic,
                timestamp=timestamp,
                to=to,
                offset=offset,
                queue=queue,
                dry_run=dry_run,
            )
        )

    async def broker_addrs(self) -> set[str]:
        """Every address a broker of the cluster registered, masters and slaves."""
        return {addr for broker in await self.brokers() for addr in broker.addrs.values()}

    async def view_message(self, msg_id: str, broker_addr: str | None = None) -> MessageExt:
        from rmqk.wire.message_codec import decode_message

        text = msg_id.strip()
        kind = message_id_kind(text)
        if kind is MessageIdKind.UNIQUE:
            raise RmqkError(
                f"{text} is a unique (client) message id; give --topic TOPIC to look it up in "
                "that topic's index (as mqadmin queryMsgByUniqueKey -t does); without a topic "
                "rmqk admin message needs an offset message id (32 hex chars from the broker: "
                "SendResult.offset_msg_id, the OffsetID of a consumed message), which names "
                "the broker and the commit log offset"
            )
        if kind is MessageIdKind.INVALID:
            raise _invalid_id(text)
        addr, offset = decode_offset_msg_id(text)
        target = broker_addr
        if target is None:
            # The id is only text: ask the cluster before dialing what it decodes to.
            known = await self.broker_addrs()
            if addr not in known:
                listed = ", ".join(sorted(known)) or "none"
                raise RmqkError(
                    f"message {text}: the id names {addr}, which is not a broker of the "
                    f"cluster at {self.namesrv_addr} (brokers: {listed}); pass --broker ADDR "
                    "to ask one of them"
                )
            target = addr
        try:
            response = await self._ok(target, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        except RemotingError as exc:
            raise RmqkError(f"message {text}: cannot reach the broker {target} ({exc})") from exc
        message, _ = decode_message(response.body, 0)
        return message

    async def find_message(
        self, msg_id: str, *, topic: str | None = None, broker_addr: str | None = None
    ) -> tuple[MessageIdKind, MessageExt]:
        """A message by either kind of id, and the kind its text shows.

        An offset id is read from the broker it names (VIEW_MESSAGE_BY_ID); a
        unique id is looked up in ``topic``'s index on every broker of the topic
        (QUERY_MESSAGE with UNIQ_KEY), as mqadmin's queryMsgByUniqueKey, which also
        needs the topic. Nothing is dialled for an id that is neither.
        """
        text = msg_id.strip()
        kind = message_id_kind(text)
        if kind is MessageIdKind.INVALID:
            raise _invalid_id(text)
        if kind is MessageIdKind.OFFSET or not topic:
            return kind, await self.view_message(text, broker_addr)
        message = await self.query_by_unique_id(topic, text)
        if message is None:
            raise RmqkError(
                f"no message with unique id {text} in topic {topic!r} (mqadmin: NO_MESSAGE); "
                "a unique id is indexed under the topic the message was sent to"
            )
        return kind, message

    async def query_by_unique_id(self, topic: str, uniq_id: str) -> MessageExt | None:
        """The message whose UNIQ_KEY is ``uniq_id``: the first stored, if it was sent twice."""
        result = await self.query_by_key(topic, uniq_id, max_num=32, unique=True)
        return result.messages[0] if result.messages else None

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 64,
        begin: int = 0,
        end: int = LONG_MAX,
        unique: bool = False,
    ) -> QueryResult:
        """Messages of ``topic`` with ``key`` stored in [begin, end] ms (MQAdminImpl.queryMessage).

        Every broker of the topic is asked (its master, else a slave); the index
        holds only hashes, so messages whose keys do not match are dropped here, as
        Java drops them. ``unique`` looks ``key`` up as a UNIQ_KEY and keeps the
        earliest stored match. Unlike Java, finding nothing is an empty result, not
        an error; a topic without a route is an error (TOPIC_NOT_EXIST).
        """
        brokers = await self.route_brokers(topic)
        addrs = [a for a in (_select_addr(b) for b in brokers or ()) if a is not None]
        if not addrs:
            raise RmqkError(
                f"topic {topic!r} has no route on the name server {self.namesrv_addr} "
                "(TOPIC_NOT_EXIST): is it the topic the message was sent to?"
            )
        fields: dict[str, object] = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": begin,
            "endTimestamp": end,
        }
        if unique:
            fields[_UNIQUE_MSG_QUERY_FLAG] = "true"
        answers = await asyncio.gather(
            *(self._query_broker(addr, fields) for addr in addrs), return_exceptions=True
        )
        failures: list[str] = []
        unsupported: list[str] = []
        found: list[MessageExt] = []
        last_update = 0
        for addr, answer in zip(addrs, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, RmqkError | OSError | asyncio.TimeoutError):
                    raise answer
                failures.append(f"{addr}: {answer}")
                if (
                    isinstance(answer, BrokerError)
                    and answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                ):
                    unsupported.append(addr)
                log.warning("query message by key at %s failed: %s", addr, answer)
                continue
            stamp, messages = answer
            last_update = max(last_update, stamp)
            found.extend(messages)
        matched = _matching(found, topic, key, unique)
        return QueryResult(last_update, tuple(matched), tuple(failures), tuple(unsupported))

    async def _query_broker(
        self, addr: str, fields: Mapping[str, object]
    ) -> tuple[int, list[MessageExt]]:
        from rmqk.wire.message_codec import decode_messages

        response = await self.invoke(
            addr, RequestCode.QUERY_MESSAGE, fields, timeout=self.timeout * 3
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return 0, []
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr)
        stamp = int(response.ext_fields.get("indexLastUpdateTimestamp") or 0)
        return stamp, decode_messages(response.body)


def decode_topic_stats(body: bytes) -> list[TopicQueueStatus]:
    """A TopicStatsTable body as fastjson writes it: MessageQueue objects as map keys."""
    data = jsonwire.loads(body) if body else {}
    out = []
    for key, offsets in _pairs(_mapping(data).get("offsetTable")):
        mq = _mapping(key)
        entry = _mapping(offsets)
        out.append(
            TopicQueueStatus(
                topic=str(mq["topic"]),
                broker_name=str(mq["brokerName"]),
                queue_id=int(mq["queueId"]),
                min_offset=int(entry.get("minOffset", 0)),
                max_offset=int(entry.get("maxOffset", 0)),
                last_update_timestamp=int(entry.get("lastUpdateTimestamp", 0)),
            )
        )
    return out


def _select_addr(broker: BrokerInfo) -> str | None:
    """BrokerData.selectBrokerAddr: the master, else any slave."""
    if broker.master is not None:
        return broker.master
    slaves = list(broker.addrs.values())
    return random.choice(slaves) if slaves else None


def _matching(found: list[MessageExt], topic: str, key: str, unique: bool) -> list[MessageExt]:
    """The messages that carry ``key`` (the index matched only its hash)."""
    if unique:
        hits = [m for m in found if m.msg_id == key]
        return [min(hits, key=lambda m: m.store_timestamp)] if hits else []
    separator = MessageProperty.KEY_SEPARATOR
    return [m for m in found if m.topic == topic and key in (m.keys or "").split(separator)]


def _invalid_id(text: str) -> RmqkError:
    return RmqkError(
        f"{text!r} is not an offset message id nor a unique (client) one: both are 32 hex "
        "chars (56 with an IPv6 address), SendResult.offset_msg_id or SendResult.msg_id"
    )


def _pairs(value: Any) -> Iterable[tuple[Any, Any]]:
    """The entries of a map whose keys may be JSON objects (fastjson's MessageQueue keys)."""
    if value is None:
        return ()
    if isinstance(value, jsonwire.ObjectKeyMap):
        return value.items
    if isinstance(value, Mapping):
        return value.items()
    raise RmqkError(f"unexpected JSON in a response body: {value!r:.80}")


def _mapping(value: Any) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    if isinstance(value, jsonwire.ObjectKeyMap):
        return dict(value.items)
    raise RmqkError(f"unexpected JSON in a response body: {value!r:.80}")
