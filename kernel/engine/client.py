"""The client instance (Java's MQClientInstance): one per client id and event loop.

It owns the transport, the route and broker-address tables, and the scheduled
tasks every consumer and producer of the process share: route refresh, heartbeat
with offline-broker cleanup, offset persistence, and the rebalance service. It is
also the transport's InboundHandler for broker-pushed requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs

from rmqk.engine.request_reply import ReplyFutures
from rmqk.model import (
    MASTER_ID,
    MessageQueue,
    ServiceState,
    SubscriptionData,
    TopicRouteData,
)
from rmqk.model.errors import ClientError, RemotingError, RmqkError
from rmqk.model.message import MessageExt, MessageProperty
from rmqk.pluginmanager import get_plugin_manager, registries
from rmqk.spi.transport import (
    CheckTransactionStateRequest,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    Credentials,
    HeartbeatData,
    ProducerData,
    TlsConfig,
    Transport,
    TransportConfig,
)

__all__ = [
    "NAMESRV_RETRY_MS",
    "ClientConfig",
    "ClientInstance",
    "FindBrokerResult",
    "build_client_id",
    "client_ip",
]

log = logging.getLogger("rmqk.engine.client")

# How soon routes are asked for again while no name server answers.
NAMESRV_RETRY_MS = 3000


def client_ip() -> str:
    """The address other members of the group see us as (RemotingUtil.getLocalAddress)."""
    override = os.environ.get("RMQK_CLIENT_IP")
    if override:
        return override
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(socket.gethostname())
        if ip and not ip.startswith("0."):
            return ip
    return "127.0.0.1"


def build_client_id(instance_name: str, unit_name: str | None = None, ip: str | None = None) -> str:
    """clientIP@instanceName[@unitName], as Java's buildMQClientId."""
    cid = f"{ip or client_ip()}@{instance_name}"
    if unit_name:
        cid += f"@{unit_name}"
    return cid


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class ClientConfig:
    """The per-instance settings (Java's ClientConfig).

    An instance is shared only by clients whose settings are all equal: clients
    with other name servers, TLS settings, credentials or intervals get an
    instance (and connections) of their own, even under one client id, so no
    client's settings silently give way to another's.
    """

    namesrv_addrs: tuple[str, ...] = attrs.field(converter=_str_tuple)
    transport: str = "tcp"
    transport_options: Mapping[str, Any] = attrs.field(factory=dict)
    poll_name_server_interval_ms: int = 30_000
    heartbeat_broker_interval_ms: int = 30_000
    persist_consumer_offset_interval_ms: int = 5_000
    rebalance_interval_ms: int = 20_000
    request_timeout_ms: int = 3_000
    use_tls: bool = False
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    vip_channel_enabled: bool = False
    # The client's own ACL credentials; None: the process defaults (the acl plugin).
    credentials: Credentials | None = None


# A dict class, built once a pull: see PullMessageRequest (rmqk.spi.transport).
@attrs.frozen(slots=False)
class FindBrokerResult:
    broker_addr: str
    slave: bool
    broker_version: int = 0


class MemberInner(Protocol):
    """What the instance needs from a registered consumer."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscriptions(self) -> list[SubscriptionData]: ...

    def update_topic_subscribe_info(self, topic: str, mqs: frozenset[MessageQueue]) -> None: ...

    def is_subscribe_topic_need_update(self, topic: str) -> bool: ...

    async def do_rebalance(self) -> None: ...

    async def persist_consumer_offset(self) -> None: ...

    async def reset_offset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None: ...

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]: ...

    def running_info(self) -> ConsumerRunningInfo: ...

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult: ...


class ProducerInner(Protocol):
    group: str

    def publish_topics(self) -> list[str]: ...

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None: ...

    def is_publish_topic_need_update(self, topic: str) -> bool: ...


class ClientInstance:
    # By event loop and client id: the instances of that id, each with other settings.
    _instances: dict[tuple[int, str], list[ClientInstance]] = {}

    def __init__(self, client_id: str, config: ClientConfig) -> None:
        self.client_id = client_id
        self.config = config
        tconf = TransportConfig(
            namesrv_addrs=config.namesrv_addrs,
            client_id=client_id,
            request_timeout_ms=config.request_timeout_ms,
            # use_tls alone means TLS with the default settings: verified against the
            # system CA store (SSL_CERT_FILE / SSL_CERT_DIR name another one).
            tls=(
                (config.tls if config.tls.enabled else attrs.evolve(config.tls, enabled=True))
                if config.use_tls
                else TlsConfig()
            ),
            # The transport reads ClientConfig.vipChannelEnabled from its options.
            options=(
                {**config.transport_options, "vip_channel_enabled": True}
                if config.vip_channel_enabled
                else config.transport_options
            ),
            credentials=config.credentials,
        )
        self.transport: Transport = registries().transports.create(
            config.transport, attrs.evolve(tconf, hook=get_plugin_manager().hook), tconf.options
        )
        self.transport.set_inbound_handler(self)
        self.consumers: dict[str, MemberInner] = {}
        self.producers: dict[str, ProducerInner] = {}
        self.route_table: dict[str, TopicRouteData] = {}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        self.broker_version_table: dict[str, dict[str, int]] = {}
        self.state = ServiceState.CREATE_JUST
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_wakeup = asyncio.Event()
        self._heartbeat_lock = asyncio.Lock()
        self._route_lock = asyncio.Lock()
        self._loop_id = id(asyncio.get_running_loop())
        self.inner_producer: Any = None
        # Requests of this client's producers waiting for their reply (request-reply).
        self.reply_futures = ReplyFutures()
        # Why no name server answered the last route request; None once one did.
        self.namesrv_error: str | None = None

    # -- instance table ---------------------------------------------------------

    @classmethod
    def get_or_create(cls, client_id: str, config: ClientConfig) -> ClientInstance:
        """The running instance of ``client_id`` with exactly ``config``, else a new one.

        Java shares one MQClientInstance per client id whatever the second client's
        settings; here a client with other settings (another cluster, account or TLS
        setup) gets its own instance, so each client talks as it was configured.
        """
        key = (id(asyncio.get_running_loop()), client_id)
        live = [
            i
            for i in cls._instances.get(key, [])
            if i.state is not ServiceState.SHUTDOWN_ALREADY
        ]
        for inst in live:
            if inst.config == config:
                return inst
        inst = cls(client_id, config)
        cls._instances[key] = [*live, inst]
        return inst

    def _siblings(self) -> list[ClientInstance]:
        """The other live instances of this client id on this loop (other settings)."""
        return [
            i
            for i in self._instances.get((self._loop_id, self.client_id), [])
            if i is not self and i.state is not ServiceState.SHUTDOWN_ALREADY
        ]

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        if self.state is ServiceState.RUNNING:
            return
        if self.state is ServiceState.START_FAILED:
            raise ClientError(
                f"The Factory object[{self.client_id}] has been created before, and failed."
            )
        self.state = ServiceState.START_FAILED
        await self.transport.start()
        c = self.config
        self._tasks = [
            self._every(
                10,
                c.poll_name_server_interval_ms,
                self.update_all_routes,
                "route refresh",
                # While no name server answers, ask again soon: consuming starts as soon
                # as one does, not a whole poll interval later.
                lambda: NAMESRV_RETRY_MS if self.namesrv_error is not None else None,
            ),
            self._every(1000, c.heartbeat_broker_interval_ms, self._heartbeat_task, "heartbeat"),
            self._every(
                10_000, c.persist_consumer_offset_interval_ms, self.persist_all_offsets, "offsets"
            ),
            asyncio.get_running_loop().create_task(self._rebalance_service(), name="rebalance"),
        ]
        self.state = ServiceState.RUNNING

    async def shutdown_if_unused(self) -> None:
        """Stop when the last consumer and producer have gone (MQClientInstance.shutdown)."""
        if self.consumers or self.producers:
            return
        if self.state is not ServiceState.RUNNING:
            return
        self.state = ServiceState.SHUTDOWN_ALREADY
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self.inner_producer is not None:
            with contextlib.suppress(Exception):
                await self.inner_producer.shutdown()
        await self.transport.close()
        key = (self._loop_id, self.client_id)
        rest = [i for i in self._instances.get(key, []) if i is not self]
        if rest:
            self._instances[key] = rest
        else:
            self._instances.pop(key, None)

    def _every(
        self,
        initial_ms: int,
        period_ms: int,
        fn: Callable[[], Awaitable[Any]],
        what: str,
        sooner_ms: Callable[[], int | None] = lambda: None,
    ) -> asyncio.Task[None]:
        async def loop() -> None:
            await asyncio.sleep(initial_ms / 1000)
            while True:
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("scheduled task %s failed", what, exc_info=True)
                sooner = sooner_ms()
                await asyncio.sleep(
                    (period_ms if sooner is None else min(period_ms, sooner)) / 1000
                )

        return asyncio.get_running_loop().create_task(loop(), name=f"rmqk {what}")

    # -- members ------------------------------------------------------------------

    def register_consumer(self, group: str, consumer: MemberInner) -> bool:
        # A group is one member per client id: brokers know members by client id, so a
        # second instance of this id (other settings) must not run the group as well.
        if group in self.consumers or any(group in i.consumers for i in self._siblings()):
            return False
        self.consumers[group] = consumer
        return True

    async def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)
        await self._unregister_client(None, group)

    def register_producer(self, group: str, producer: ProducerInner) -> bool:
        if group in self.producers or any(group in i.producers for i in self._siblings()):
            return False
        self.producers[group] = producer
        return True

    async def unregister_producer(self, group: str) -> None:
        self.producers.pop(group, None)
        await self._unregister_client(group, None)

    async def _unregister_client(
        self, producer_group: str | None, consumer_group: str | None
    ) -> None:
        for addrs in list(self.broker_addr_table.values()):
            for addr in addrs.values():
                try:
                    await self.transport.unregister_client(
                        addr, self.client_id, producer_group, consumer_group, 3000
                    )
                except Exception as exc:
                    log.warning(
                        "unregister client %s from %s failed: %s", self.client_id, addr, exc
                    )

    # -- routes -------------------------------------------------------------------

    async def update_all_routes(self) -> None:
        topics: set[str] = set()
        for consumer in list(self.consumers.values()):
            topics.update(s.topic for s in consumer.subscriptions())
        for producer in list(self.producers.values()):
            topics.update(producer.publish_topics())
        for topic in sorted(topics):
            await self.update_topic_route(topic)

    async def update_topic_route(self, topic: str) -> bool:
        """Fetch a topic's route; push queue sets to members when it changed."""
        async with self._route_lock:
            try:
                route = await self.transport.get_route(topic, 3000)
            except RemotingError as exc:
                # No name server answered: one notice for the client, not one per topic.
                self._namesrv_unreachable(exc)
                return False
            except RmqkError as exc:
                self._namesrv_reachable()
                if not topic.startswith("%RETRY%"):
                    log.warning("route of topic %s not available: %s", topic, exc)
                return False
            self._namesrv_reachable()
            if route is None:
                if not topic.startswith("%RETRY%"):
                    log.debug("topic %s has no route", topic)
                return False
            old = self.route_table.get(topic)
            changed = old is None or not _same_route(old, route)
            if not changed:
                # isNeedUpdateTopicRouteInfo: a producer new to a topic the consumers know.
                changed = any(
                    p.is_publish_topic_need_update(topic) for p in list(self.producers.values())
                ) or any(
                    c.is_subscribe_topic_need_update(topic) for c in list(self.consumers.values())
                )
            if not changed:
                return False
            for b in route.broker_datas:
                self.broker_addr_table[b.broker_name] = dict(b.broker_addrs)
            subscribe = route.subscribe_queues(topic)
            for consumer in list(self.consumers.values()):
                consumer.update_topic_subscribe_info(topic, subscribe)
            for producer in list(self.producers.values()):
                producer.update_topic_publish_info(topic, route)
            self.route_table[topic] = route
            return True

    @property
    def namesrv_text(self) -> str:
        return ", ".join(self.config.namesrv_addrs) or "(none configured)"

    def _namesrv_unreachable(self, exc: RmqkError) -> None:
        # The transport logs each name server's failure once; the state is kept here
        # for the summary line and `rmqk status`.
        self.namesrv_error = str(exc)

    def _namesrv_reachable(self) -> None:
        self.namesrv_error = None

    def _clean_offline_brokers(self) -> None:
        referenced = {
            addr
            for route in self.route_table.values()
            for b in route.broker_datas
            for addr in b.broker_addrs.values()
        }
        for name in list(self.broker_addr_table):
            addrs = {i: a for i, a in self.broker_addr_table[name].items() if a in referenced}
            if addrs:
                self.broker_addr_table[name] = addrs
            else:
                del self.broker_addr_table[name]

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FindBrokerResult | None:
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and not only_this_broker:
            # Fall back to the first entry of the group, not only the master.
            first_id = next(iter(addrs))
            addr = addrs[first_id]
            slave = first_id != MASTER_ID
        if addr is None:
            return None
        return FindBrokerResult(addr, slave)

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        addrs = self.broker_addr_table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_broker_address_in_admin(self, broker_name: str) -> FindBrokerResult | None:
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        if MASTER_ID in addrs:
            return FindBrokerResult(addrs[MASTER_ID], False)
        bid, addr = next(iter(addrs.items()))
        return FindBrokerResult(addr, bid != MASTER_ID)

    async def find_broker_addr_for_admin(self, broker_name: str, topic: str) -> str:
        found = self.find_broker_address_in_admin(broker_name)
        if found is None:
            await self.update_topic_route(topic)
            found = self.find_broker_address_in_admin(broker_name)
        if found is None:
            raise ClientError(f"The broker[{broker_name}] not exist")
        return found.broker_addr

    async def find_broker_addr_for_offsets(self, broker_name: str, topic: str) -> str:
        """Where RemoteBrokerOffsetStore sends a commit or a query: Java's sequence.

        The master only, from the table as it is; when the table has no master of
        the group, the topic's route is refreshed first and then any broker of the
        group will do (the slave while the master is down). Refreshing whenever the
        master is missing is what brings commits back to a returning master at the
        next commit instead of at the next periodic route refresh (up to 30 s later),
        during which a crash would re-deliver everything committed only to the slave.
        """
        found = self.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        if found is None:
            await self.update_topic_route(topic)
            found = self.find_broker_address_in_subscribe(broker_name, MASTER_ID, False)
        if found is None:
            raise ClientError(f"The broker[{broker_name}] not exist")
        return found.broker_addr

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        route = self.route_table.get(topic)
        if route is None:
            await self.update_topic_route(topic)
            route = self.route_table.get(topic)
        if route is None or not route.broker_datas:
            return None
        # Java picks a random broker of the topic; every broker knows the whole group.
        broker = random.choice(route.broker_datas)
        addr = broker.select_addr()
        if addr is None:
            return None
        try:
            return await self.transport.get_consumer_ids(addr, group, 3000)
        except Exception as exc:
            log.warning("getConsumerIdListByGroup from %s failed: %s", addr, exc)
            return None

    # -- heartbeat ------------------------------------------------------------------

    async def _heartbeat_task(self) -> None:
        self._clean_offline_brokers()
        await self.send_heartbeat_to_all_brokers()

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            producers=[ProducerData(g) for g in self.producers],
            consumers=[c.consumer_data() for c in self.consumers.values()],
        )

    async def send_heartbeat_to_all_brokers(self) -> None:
        if self._heartbeat_lock.locked():
            return  # Java's tryLock: a concurrent heartbeat is skipped, not queued
        async with self._heartbeat_lock:
            data = self.heartbeat_data()
            if not data.consumers and not data.producers:
                return
            for name, addrs in list(self.broker_addr_table.items()):
                for bid, addr in list(addrs.items()):
                    if not data.consumers and bid != MASTER_ID:
                        continue  # producers only talk to masters
                    try:
                        version = await self.transport.send_heartbeat(addr, data, 3000)
                        self.broker_version_table.setdefault(name, {})[addr] = version
                    except Exception as exc:
                        log.warning("heartbeat to %s (%s) failed: %s", name, addr, exc)

    # -- offsets and rebalance --------------------------------------------------------

    async def persist_all_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.persist_consumer_offset()
            except Exception:
                log.warning("persisting offsets of %s failed", consumer.group, exc_info=True)

    def rebalance_immediately(self) -> None:
        self._rebalance_wakeup.set()

    async def _rebalance_service(self) -> None:
        interval = self.config.rebalance_interval_ms / 1000
        while self.state is ServiceState.RUNNING:
            # asyncio.timeout rather than wait_for: on 3.11, wait_for can swallow a
            # cancellation that races with the event being set, hanging shutdown.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._rebalance_wakeup.wait()
            # Cleared before the pass: a wakeup during the pass causes exactly one more.
            self._rebalance_wakeup.clear()
            await self.do_rebalance()

    async def do_rebalance(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.do_rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", consumer.group)

    # -- InboundHandler (broker-pushed requests) ----------------------------------------

    async def notify_consumer_ids_changed(self, group: str) -> None:
        log.info(
            "receive broker's notification, the consumer group %s changed, rebalance immediately",
            group,
        )
        self.rebalance_immediately()

    async def reset_offset(
        self, topic: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None:
        consumer = self.consumers.get(group)
        if consumer is None:
            log.info("reset offset: group %s is not in this client", group)
            return
        await consumer.reset_offset(topic, offsets)

    async def get_consumer_status(self, topic: str, group: str) -> dict[MessageQueue, int]:
        consumer = self.consumers.get(group)
        return consumer.consumer_status(topic) if consumer is not None else {}

    async def get_consumer_running_info(self, group: str, jstack: bool) -> ConsumerRunningInfo:
        """MQClientInstance.consumerRunningInfo: the member's report and the client's properties."""
        consumer = self.consumers.get(group)
        if consumer is None:
            raise LookupError("The Consumer Group not exist in this consumer")
        info = consumer.running_info()
        props = dict(info.properties)
        # Java's ConsumerRunningInfo.PROP_NAMESERVER_ADDR: each name server followed by ';'.
        props["PROP_NAMESERVER_ADDR"] = "".join(f"{a};" for a in self.config.namesrv_addrs)
        props["PROP_CONSUME_TYPE"] = consumer.consumer_data().consume_type.value
        props["PROP_CLIENT_VERSION"] = "V4_9_8"
        props.setdefault("PROP_CONSUMER_START_TIMESTAMP", str(int(time.time() * 1000)))
        return attrs.evolve(info, properties=props, jstack=_jstack() if jstack else None)

    async def consume_message_directly(
        self, group: str, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        consumer = self.consumers.get(group)
        if consumer is None:
            raise LookupError("The Consumer Group not exist in this consumer")
        return await consumer.consume_message_directly(msg, broker_name)

    async def check_transaction_state(
        self, addr: str, header: CheckTransactionStateRequest, msg: MessageExt
    ) -> None:
        # ClientRemotingProcessor.checkTransactionState: the producer group is the
        # half message's PGROUP property; only a transactional producer can answer.
        group = msg.properties.get(MessageProperty.PRODUCER_GROUP)
        if group is None:
            log.warning("checkTransactionState, pick producer group failed")
            return
        producer = self.producers.get(group)
        answer = getattr(producer, "check_transaction_state", None)
        if answer is None:
            log.debug("checkTransactionState, pick producer by group[%s] failed", group)
            return
        answer(addr, msg, header)

    async def receive_reply_message(self, msg: MessageExt) -> None:
        # ClientRemotingProcessor.processReplyMessage: matched by CORRELATION_ID.
        self.reply_futures.deliver(msg)


def _jstack() -> str:
    """UtilAll.jstack's layout for this process's threads (jstackEnable of a running-info request).

    Java lists every thread's stack, innermost frame first, each line led by the
    thread's name padded to 40. Python threads have no Java state: every thread
    listed is alive (``threading.enumerate`` lists no other), and says so.
    """
    frames = sys._current_frames()
    out: list[str] = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None:
            continue
        name = thread.name
        tid = thread.native_id if thread.native_id is not None else thread.ident
        out.append(f"{name:<40}TID: {tid} STATE: ALIVE\n")
        for summary in reversed(traceback.extract_stack(frame)):
            where = f"{summary.name}({os.path.basename(summary.filename)}:{summary.lineno})"
            out.append(f"{name:<40}{where}\n")
        out.append("\n")
    return "".join(out)


def _same_route(a: TopicRouteData, b: TopicRouteData) -> bool:
    def key(r: TopicRouteData) -> tuple[Any, ...]:
        return (
            sorted(
                (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                for q in r.queue_datas
            ),
            sorted((d.broker_name, sorted(d.broker_addrs.items())) for d in r.broker_datas),
        )

    return key(a) == key(b)
