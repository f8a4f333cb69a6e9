"""What ``rmqk status`` reads from a cluster about one consumer group.

Over any registered transport (``tcp`` by default), the way Apache's admin tools
do it:

1. the routes of ``%RETRY%<group>`` and of the topics name the brokers, and the
   name server's cluster info names every other broker (as Java's ``mqadmin
   consumerConnection`` falls back to): a member whose topics are missing has no
   route to be found by, yet may heartbeat to a broker of the cluster;
2. ``GET_CONSUMER_LIST_BY_GROUP`` on each broker gives the clients online;
3. ``GET_CONSUMER_RUNNING_INFO``, relayed by a broker to each client, gives the
   queues it holds, what it caches, its subscriptions and its rates;
4. per queue, the broker's max offset and the group's committed offset give lag.

A broker or client that does not answer becomes a problem in the result, not an
error: status is what you run when something is wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rmqk.model import RETRY_GROUP_TOPIC_PREFIX, MessageQueue, TopicRouteData
from rmqk.model.errors import BrokerError, RmqkError
from rmqk.spi.transport import Transport
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["ClientStatus", "GroupStatus", "QueueStatus", "group_status", "parse_running_info"]


@attrs.frozen
class QueueStatus:
    queue: MessageQueue
    broker_offset: int | None
    consumer_offset: int | None
    owner: str | None = None
    cached_messages: int | None = None
    locked: bool = False
    last_pull_ms: int | None = None

    @property
    def lag(self) -> int | None:
        if self.broker_offset is None:
            return None
        return max(self.broker_offset - max(self.consumer_offset or 0, 0), 0)

    @property
    def state(self) -> str:
        if self.owner is None:
            return "unassigned"
        return "locked" if self.locked else "consuming"


@attrs.frozen
class ClientStatus:
    client_id: str
    # RUNNING when it answered its running info, UNREACHABLE when it did not.
    state: str
    error: str | None = None
    queues: tuple[MessageQueue, ...] = ()
    topics: tuple[str, ...] = ()
    orderly: bool | None = None
    started_ms: int | None = None
    version: str | None = None
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    pull_tps: float = 0.0


@attrs.frozen
class GroupStatus:
    group: str
    topics: tuple[str, ...]
    clients: tuple[ClientStatus, ...]
    queues: tuple[QueueStatus, ...]
    problems: tuple[str, ...] = ()
    # The config table the group comes from, when read from a config file.
    name: str | None = None
    # No broker could be found to ask (no name server answered): members, queues and
    # lag are unknown, not none.
    unreachable: bool = False

    @property
    def lag(self) -> int:
        return sum(q.lag or 0 for q in self.queues)


@attrs.frozen
class RunningInfo:
    """The parts of a client's ConsumerRunningInfo that status shows."""

    queues: Mapping[MessageQueue, Mapping[str, Any]]
    topics: tuple[str, ...]
    properties: Mapping[str, str]
    status: Mapping[str, Mapping[str, Any]]


def _queue_of(key: Any) -> MessageQueue | None:
    """A mqTable key: rmqk writes ``topic@broker@id``, Java's fastjson the object itself."""
    try:
        if isinstance(key, str):
            topic, broker, qid = key.rsplit("@", 2)
            return MessageQueue(topic, broker, int(qid))
        fields = dict(key)
        return MessageQueue(str(fields["topic"]), str(fields["brokerName"]), int(fields["queueId"]))
    except (ValueError, KeyError, TypeError):
        return None


def parse_running_info(body: bytes) -> RunningInfo:
    """Read a ConsumerRunningInfo body, as rmqk or a Java client writes it."""
    from rmqk.wire.bodies import loads

    data = loads(body)
    if not isinstance(data, Mapping):
        raise RmqkError("running info is not a JSON object")
    queues: dict[MessageQueue, Mapping[str, Any]] = {}
    table = data.get("mqTable") or {}
    if isinstance(table, Mapping):
        for key, info in table.items():
            mq = _queue_of(key)
            if mq is not None and isinstance(info, Mapping):
                queues[mq] = info
    topics = []
    for sub in data.get("subscriptionSet") or ():
        if isinstance(sub, Mapping) and isinstance(sub.get("topic"), str):
            topics.append(sub["topic"])
    props = data.get("properties") or {}
    status = data.get("statusTable") or {}
    return RunningInfo(
        queues=queues,
        topics=tuple(sorted(set(topics))),
        properties={str(k): str(v) for k, v in props.items()} if isinstance(props, Mapping) else {},
        status=status if isinstance(status, Mapping) else {},
    )


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _float_sum(status: Mapping[str, Mapping[str, Any]], key: str) -> float:
    total = 0.0
    for figures in status.values():
        if isinstance(figures, Mapping):
            try:
                total += float(figures.get(key, 0.0))
            except (TypeError, ValueError):
                continue
    return total


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Reader:
    def __init__(self, transport: Transport, group: str, timeout_ms: int) -> None:
        self.transport = transport
        self.group = group
        self.timeout_ms = timeout_ms
        self.problems: list[str] = []
        self.routes: dict[str, TopicRouteData] = {}
        # broker name -> master address
        self.masters: dict[str, str] = {}
        self.unreadable: set[str] = set()

    async def route(self, topic: str) -> TopicRouteData | None:
        if topic in self.routes:
            return self.routes[topic]
        try:
            route = await self.transport.get_route(topic, self.timeout_ms)
        except RmqkError as exc:
            if topic not in self.unreadable:
                self.problems.append(f"route of {topic}: {_describe(exc)}")
            self.unreadable.add(topic)
            return None
        if route is not None:
            self.routes[topic] = route
            for broker in route.broker_datas:
                master = broker.master_addr()
                if master is not None:
                    self.masters[broker.broker_name] = master
        return route

    async def cluster_masters(self, namesrv_addrs: Iterable[str]) -> None:
        """Add every master the name server's cluster info lists (the first that answers)."""
        from rmqk.wire.bodies import loads

        errors = []
        for addr in namesrv_addrs:
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {})
            try:
                response = await self.transport.invoke(addr, request, self.timeout_ms)
                if response.code != ResponseCode.SUCCESS:
                    raise BrokerError(response.code, response.remark, addr)
                info = loads(response.body) if response.body else {}
            except RmqkError as exc:
                errors.append(f"cluster info from {addr}: {_describe(exc)}")
                continue
            table = info.get("brokerAddrTable") if isinstance(info, Mapping) else None
            for name, broker in (table or {}).items():
                addrs = broker.get("brokerAddrs") if isinstance(broker, Mapping) else None
                master = (addrs or {}).get("0", (addrs or {}).get(0))
                if master and str(name) not in self.masters:
                    self.masters[str(name)] = str(master)
            return
        # Say so only when it matters: no route named a broker, and the name server
        # was not already reported unreachable.
        if not self.masters and not self.unreadable:
            self.problems.extend(errors)

    async def client_ids(self) -> list[str]:
        found: list[str] = []
        errors = []
        for name, addr in sorted(self.masters.items()):
            try:
                ids = await self.transport.get_consumer_ids(addr, self.group, self.timeout_ms)
            except BrokerError:
                continue  # the broker knows no consumer of the group
            except RmqkError as exc:
                errors.append(f"consumers of {self.group} on {name} ({addr}): {_describe(exc)}")
                continue
            found.extend(i for i in ids if i not in found)
        self.problems.extend(errors)
        return sorted(found)

    async def running_info(self, client_id: str) -> tuple[ClientStatus, RunningInfo | None]:
        last_error = "no broker to relay through"
        for addr in [a for _, a in sorted(self.masters.items())]:
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": self.group, "clientId": client_id, "jstackEnable": False},
            )
            try:
                response = await self.transport.invoke(addr, request, self.timeout_ms)
            except RmqkError as exc:
                last_error = _describe(exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                last_error = response.remark or f"response code {response.code}"
                continue
            try:
                info = parse_running_info(response.body)
            except RmqkError as exc:
                last_error = f"unreadable running info: {_describe(exc)}"
                continue
            props = info.properties
            orderly = props.get("PROP_CONSUMEORDERLY")
            return ClientStatus(
                client_id=client_id,
                state="RUNNING",
                queues=tuple(sorted(info.queues)),
                topics=info.topics,
                orderly=None if orderly is None else orderly.lower() == "true",
                started_ms=_int(props.get("PROP_CONSUMER_START_TIMESTAMP")),
                version=props.get("PROP_CLIENT_VERSION"),
                consume_ok_tps=_float_sum(info.status, "consumeOKTPS"),
                consume_failed_tps=_float_sum(info.status, "consumeFailedTPS"),
                pull_tps=_float_sum(info.status, "pullTPS"),
            ), info
        return ClientStatus(client_id=client_id, state="UNREACHABLE", error=last_error), None

    async def offsets(self, mq: MessageQueue) -> QueueStatus:
        addr = self.masters.get(mq.broker_name)
        if addr is None:
            self.problems.append(f"{mq.topic}: broker {mq.broker_name} has no master online")
            return QueueStatus(mq, None, None)
        broker_offset: int | None = None
        consumer_offset: int | None = None
        try:
            broker_offset = await self.transport.get_max_offset(addr, mq, self.timeout_ms)
            consumer_offset = await self.transport.query_consumer_offset(
                addr, self.group, mq, self.timeout_ms
            )
        except RmqkError as exc:
            self.problems.append(
                f"offsets of {mq.topic} queue {mq.queue_id} on {mq.broker_name}: {_describe(exc)}"
            )
        return QueueStatus(mq, broker_offset, consumer_offset)


async def group_status(
    transport: Transport,
    group: str,
    topics: Iterable[str] = (),
    *,
    name: str | None = None,
    timeout_ms: int = 3000,
    namesrv_addrs: Iterable[str] = (),
) -> GroupStatus:
    """Read one group's clients, queues, offsets and lag from the cluster.

    ``topics`` are read even when no client is online (from a config file, or
    ``--topic``); the topics online clients subscribe to are added to them.
    ``namesrv_addrs``, when given, are asked for every broker of the cluster, so
    members are found even when none of the group's topics has a route.
    """
    reader = _Reader(transport, group, timeout_ms)
    wanted = list(dict.fromkeys(topics))
    # The brokers that know the group: its retry topic's, and those of its topics.
    await reader.route(RETRY_GROUP_TOPIC_PREFIX + group)
    for topic in wanted:
        await reader.route(topic)
    await reader.cluster_masters(namesrv_addrs)
    ids = await reader.client_ids()
    results = await asyncio.gather(*(reader.running_info(cid) for cid in ids))
    clients: list[ClientStatus] = []
    infos: list[tuple[str, RunningInfo]] = []
    for client, info in results:
        clients.append(client)
        if info is not None:
            infos.append((client.client_id, info))
            for topic in info.topics:
                if topic not in wanted and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    wanted.append(topic)
    queues: list[MessageQueue] = []
    missing: list[str] = []
    for topic in wanted:
        route = await reader.route(topic)
        if route is None:
            if topic not in reader.unreadable:
                missing.append(topic)
            continue
        queues.extend(sorted(route.subscribe_queues(topic)))
    # The missing topic first: it is the cause, "nobody online" may be its effect.
    reader.problems[:0] = [
        f"topic {t} does not exist: create it (rmqk admin topic create {t})" for t in missing
    ]
    unreachable = not reader.masters and bool(reader.unreadable)
    if not ids and unreachable:
        reader.problems.append(
            f"whether a consumer of group {group} is online is unknown: no broker could be asked"
        )
    elif not ids:
        reader.problems.append(f"no consumer of group {group} is online")
        if missing:
            reader.problems.append(
                "(a consumer of missing topics only talks to no broker: it may run unseen)"
            )
        if not wanted:
            reader.problems.append("name the topics (--topic, or a config file) to see offsets")
    statuses = await asyncio.gather(*(reader.offsets(mq) for mq in queues))
    owners: dict[MessageQueue, tuple[str, Mapping[str, Any]]] = {}
    for client_id, info in infos:
        for mq, pq in info.queues.items():
            owners[mq] = (client_id, pq)
    out: list[QueueStatus] = []
    for status in statuses:
        owner = owners.get(status.queue)
        if owner is None:
            out.append(status)
            continue
        client_id, pq = owner
        out.append(
            attrs.evolve(
                status,
                owner=client_id,
                cached_messages=_int(pq.get("cachedMsgCount")),
                locked=bool(pq.get("locked", False)),
                last_pull_ms=_int(pq.get("lastPullTimestamp")),
            )
        )
    return GroupStatus(
        group=group,
        topics=tuple(wanted),
        clients=tuple(clients),
        queues=tuple(out),
        problems=tuple(reader.problems),
        name=name,
        unreachable=unreachable,
    )
