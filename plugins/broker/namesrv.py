"""The embedded name server: route tables and the requests clients send it.

Answers GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO,
GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, DELETE_TOPIC_IN_NAMESRV,
REGISTER_BROKER (uncompressed bodies) and UNREGISTER_BROKER as Apache 4.9.8 does,
including the route JSON dialect: clients older than 4.9.4 that do not ask for
standard JSON get fastjson's unquoted integer ``brokerAddrs`` keys. Like
Apache's name server, it sends no answer at all to a request code it does not
know.

The embedded broker registers itself in-process (:meth:`RouteInfoManager.register_broker`),
at start, on every topic change and every ``register_period`` seconds as Apache's
broker does; no client request may register, unregister or redirect it
(:meth:`RouteInfoManager.refusal`), and DELETE_TOPIC_IN_NAMESRV leaves its queues,
which follow its own topic table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rmqk.plugins.broker.commands import FAQ_SUFFIX, Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.server import RemotingServer
from rmqk.wire import jsonwire
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["NameServer", "RouteInfoManager", "TopicQueueConfig"]

log = logging.getLogger("rmqk.broker.namesrv")

# MQVersion.Version.V4_9_4.ordinal(): from this client version on, route data is standard JSON.
V4_9_4 = 401
MASTER_ID = 0


@attrs.frozen
class TopicQueueConfig:
    """What the name server keeps of a broker's topic (QueueData)."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@attrs.define
class _BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = attrs.field(factory=dict)


class RouteInfoManager:
    """Clusters, brokers and the queues each broker has of each topic."""

    def __init__(self) -> None:
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_addr_table: dict[str, _BrokerData] = {}
        self.topic_queue_table: dict[str, dict[str, TopicQueueConfig]] = {}
        self._live: dict[str, Any] = {}  # broker address → registering channel (None in-process)
        # (broker name, id) → address of the brokers registered in-process: the
        # embedded broker's own entry, which no client request may replace or remove.
        self._owned: dict[tuple[str, int], str] = {}

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        topics: Iterable[TopicQueueConfig],
        channel: Any = None,
    ) -> str | None:
        """Register (or refresh) a broker; returns the master's address for a slave.

        ``channel`` None registers the in-process broker, whose entry then belongs to
        it for good: see :meth:`refusal`.
        """
        if channel is None:
            self._owned[(broker_name, broker_id)] = broker_addr
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        data = self.broker_addr_table.get(broker_name)
        if data is None:
            data = _BrokerData(cluster, broker_name)
            self.broker_addr_table[broker_name] = data
        for bid, addr in list(data.addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del data.addrs[bid]
        data.addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID:
            # A master's registration carries all its topics: one it no longer
            # lists was deleted on it.
            listed = {cfg.topic: cfg for cfg in topics}
            for topic in list(self.topic_queue_table) if listed else ():
                if topic not in listed:
                    self.remove_topic(topic, broker_name)
            for cfg in listed.values():
                self.topic_queue_table.setdefault(cfg.topic, {})[broker_name] = cfg
        self._live[broker_addr] = channel
        if broker_id != MASTER_ID:
            return data.addrs.get(MASTER_ID)
        return None

    def refusal(self, broker_name: str, broker_id: int, broker_addr: str) -> str | None:
        """Why a client may not register or unregister this broker, or None when it may.

        Apache's name server believes every REGISTER_BROKER, and its brokers repair a
        forged entry at their next periodic registration; a forged entry for the
        in-process broker would instead redirect its producers until then, and take
        its routes with it when the forging connection closes. So the in-process
        broker's name and id, and its address, are its own.
        """
        owned_addr = self._owned.get((broker_name, broker_id))
        if owned_addr is None and broker_addr not in self._owned.values():
            return None
        return (
            f"broker {broker_name} (id {broker_id}) at {broker_addr}: the embedded broker "
            f"{owned_addr or broker_addr} of this name server registers itself; "
            "no client may register or unregister it"
        )

    def delete_topic(self, topic: str) -> None:
        """DELETE_TOPIC_IN_NAMESRV: every broker's queues of the topic but the in-process one's.

        The in-process broker's queues mirror its own topic table, so they go when
        the topic is deleted on that broker (DELETE_TOPIC_IN_BROKER), not before.
        """
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        owned = {name for name, _ in self._owned}
        for name in list(queues):
            if name not in owned:
                del queues[name]
        if not queues:
            del self.topic_queue_table[topic]

    def update_topic(self, broker_name: str, cfg: TopicQueueConfig) -> None:
        self.topic_queue_table.setdefault(cfg.topic, {})[broker_name] = cfg

    def remove_topic(self, topic: str, broker_name: str | None = None) -> None:
        if broker_name is None:
            self.topic_queue_table.pop(topic, None)
            return
        queues = self.topic_queue_table.get(topic)
        if queues is not None:
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        self._live.pop(broker_addr, None)
        data = self.broker_addr_table.get(broker_name)
        if data is None:
            return
        if data.addrs.get(broker_id) == broker_addr:
            del data.addrs[broker_id]
        if data.addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
        for topic in list(self.topic_queue_table):
            self.remove_topic(topic, broker_name)

    def channel_closed(self, channel: Any) -> None:
        for addr, ch in list(self._live.items()):
            if ch is not None and ch is channel:
                for name, data in list(self.broker_addr_table.items()):
                    for bid, baddr in list(data.addrs.items()):
                        if baddr == addr:
                            self.unregister_broker(data.cluster, addr, name, bid)

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData as a JSON-ready mapping, or None when no broker has the topic."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        queue_datas: list[dict[str, Any]] = []
        broker_datas: list[dict[str, Any]] = []
        for name in sorted(queues):
            cfg = queues[name]
            queue_datas.append(
                {
                    "brokerName": name,
                    "perm": cfg.perm,
                    "readQueueNums": cfg.read_queue_nums,
                    "topicSysFlag": cfg.topic_sys_flag,
                    "writeQueueNums": cfg.write_queue_nums,
                }
            )
            data = self.broker_addr_table.get(name)
            if data is not None:
                broker_datas.append(
                    {"brokerAddrs": dict(data.addrs), "brokerName": name, "cluster": data.cluster}
                )
        if not broker_datas:
            return None
        return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {
                name: {"brokerAddrs": dict(d.addrs), "brokerName": name, "cluster": d.cluster}
                for name, d in self.broker_addr_table.items()
            },
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, q in self.topic_queue_table.items() if names.intersection(q))


class NameServer:
    """The name server's request processors on their own port."""

    def __init__(self, *, idle_timeout: float = 120.0) -> None:
        self.routes = RouteInfoManager()
        self.server = RemotingServer("namesrv", self.handle, idle_timeout=idle_timeout)
        self.server.on_connection_closed(self.routes.channel_closed)

    async def start(self, host: str, port: int) -> int:
        return await self.server.start(host, port)

    async def stop(self) -> None:
        await self.server.stop()

    async def handle(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        code = request.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return self._get_route(request)
        if code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return make_response(request, body=jsonwire.dumps(self.routes.cluster_info()))
        if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return make_response(request, body=jsonwire.dumps({"topicList": self.routes.topics()}))
        if code == RequestCode.GET_TOPICS_BY_CLUSTER:
            cluster = Headers(request).text("cluster")
            body = jsonwire.dumps({"topicList": self.routes.topics_of_cluster(cluster)})
            return make_response(request, body=body)
        if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
            self.routes.delete_topic(Headers(request).text("topic"))
            return make_response(request)
        if code == RequestCode.REGISTER_BROKER:
            return self._register_broker(conn, request)
        if code == RequestCode.UNREGISTER_BROKER:
            h = Headers(request)
            h.require("brokerName", "brokerAddr", "clusterName", "brokerId")
            name, addr, broker_id = h.text("brokerName"), h.text("brokerAddr"), h.number("brokerId")
            refused = self.routes.refusal(name, broker_id, addr)
            if refused is not None:
                log.warning("name server: UNREGISTER_BROKER from %s refused: %s",
                            conn.remote_addr, refused)  # fmt: skip
                return make_response(request, ResponseCode.SYSTEM_ERROR, refused)
            self.routes.unregister_broker(h.text("clusterName"), addr, name, broker_id)
            return make_response(request)
        # Apache's name server processor returns null for codes it does not know,
        # so the client gets no response at all.
        log.info(
            "name server: no answer to unsupported request code %d from %s", code, conn.remote_addr
        )
        return None

    def _get_route(self, request: RemotingCommand) -> RemotingCommand:
        h = Headers(request)
        topic = h.text("topic")
        route = self.routes.route(topic)
        if route is None:
            return make_response(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{FAQ_SUFFIX}",
            )
        standard = request.version >= V4_9_4 or bool(h.opt_boolean("acceptStandardJsonOnly"))
        return make_response(request, body=jsonwire.dumps(route, standard=standard))

    def _register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = Headers(request)
        h.require("brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId")
        refused = self.routes.refusal(
            h.text("brokerName"), h.number("brokerId"), h.text("brokerAddr")
        )
        if refused is not None:
            log.warning(
                "name server: REGISTER_BROKER from %s refused: %s", conn.remote_addr, refused
            )
            return make_response(request, ResponseCode.SYSTEM_ERROR, refused)
        if h.boolean("compressed"):
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                "org.apache.rocketmq.remoting.exception.RemotingCommandException: "
                "Failed to decode RegisterBrokerBody (compressed bodies are not supported "
                "by the embedded name server)",
            )
        topics: list[TopicQueueConfig] = []
        if request.body:
            try:
                body = jsonwire.loads(request.body)
                table = (body.get("topicConfigSerializeWrapper") or {}).get(
                    "topicConfigTable"
                ) or {}
                topics = [_topic_queue_config(name, cfg) for name, cfg in _items(table)]
            except (ValueError, AttributeError, KeyError, TypeError) as exc:
                return make_response(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    "org.apache.rocketmq.remoting.exception.RemotingCommandException: "
                    f"Failed to decode RegisterBrokerBody ({exc})",
                )
        master = self.routes.register_broker(
            h.text("clusterName"),
            h.text("brokerAddr"),
            h.text("brokerName"),
            h.number("brokerId"),
            topics,
            channel=conn,
        )
        fields = {"masterAddr": master} if master else {}
        return make_response(request, fields=fields)


def _items(table: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(table, Mapping):
        return table.items()
    if isinstance(table, jsonwire.ObjectKeyMap):
        return table.items
    raise TypeError("topicConfigTable is not a map")


def _topic_queue_config(name: Any, cfg: Mapping[str, Any]) -> TopicQueueConfig:
    return TopicQueueConfig(
        topic=str(cfg.get("topicName") or name),
        read_queue_nums=int(cfg.get("readQueueNums", 16)),
        write_queue_nums=int(cfg.get("writeQueueNums", 16)),
        perm=int(cfg.get("perm", 6)),
        topic_sys_flag=int(cfg.get("topicSysFlag", 0)),
    )
