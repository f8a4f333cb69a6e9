"""rmqk.plugins.broker: a RocketMQ 4.9 name server and broker in one asyncio process.

It speaks the remoting protocol on two ports (name server, default 9876; broker,
default 10911), stores messages on disk (``rmqk.plugins.broker.store``) and
follows what an Apache 4.9.8 broker does that a client can observe: routes,
auto-created topics, send and pull, long polling, consumer offsets,
heartbeats and NOTIFY_CONSUMER_IDS_CHANGED, queue locks, send-back to
``%RETRY%`` with delay levels and ``%DLQ%``.

In tests::

    async with EmbeddedBroker(tmp_path, namesrv_port=0, broker_port=0) as broker:
        consumer = PushConsumer("g", namesrv_addr=broker.namesrv_addr)

From synchronous code::

    with EmbeddedBroker.run_in_thread(tmp_path, namesrv_port=0, broker_port=0) as handle:
        ... handle.namesrv_addr ...

The plugin registers the ``rmqk broker`` command (``rmqk admin`` is the ``admin`` plugin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rmqk.model import PERM_INHERIT, PERM_READ, PERM_WRITE
from rmqk.model.errors import RmqkError
from rmqk.spi.hookspecs import Register, hookimpl
from rmqk.wire.protocol import ResponseCode

if TYPE_CHECKING:
    from rmqk.plugins.broker.acl import AccessValidator, AclConfig
    from rmqk.plugins.broker.tls import ServerTlsConfig

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "BrokerThread",
    "EmbeddedBroker",
    "rmqk_register_commands",
]

log = logging.getLogger("rmqk.broker")

T = TypeVar("T")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class EmbeddedBroker:
    """A name server and a broker on the current event loop.

    ``namesrv_port`` / ``broker_port`` 0 pick free ports; read the chosen ones
    from :attr:`namesrv_addr` and :attr:`broker_addr` after :meth:`start`.
    The time-based behaviours take their Apache defaults and can be shortened
    for tests: ``lock_expiry`` (queue locks, 60 s), ``channel_expiry`` (clients
    without a heartbeat, 120 s), ``idle_timeout`` (silent connections, 120 s),
    ``hold_check_interval`` (re-check of held pulls, 5 s), ``register_period``
    (the broker's registration with its name server, BrokerConfig's
    registerNameServerPeriod, 30 s) and ``delay_levels``.

    ``acl`` (an :class:`~rmqk.plugins.broker.acl.AclConfig` or the path of a
    ``.toml``/``.json`` file with plain_acl.yml's keys) makes the broker check every
    request as Apache's plain ACL does (``rmqk.plugins.broker.acl``). ``tls`` (a
    :class:`~rmqk.plugins.broker.tls.ServerTlsConfig`) serves TLS on both ports.
    ``enable_property_filter`` (BrokerConfig.enablePropertyFilter, off as in Apache)
    lets consumers subscribe by SQL92 over message properties.

    Old commit log segments are deleted as Apache's CleanCommitLogService does, with
    MessageStoreConfig's names and defaults: ``file_reserved_time`` (72 hours),
    ``delete_when`` ("04", hours of the day separated by ';'),
    ``disk_max_used_space_ratio`` (75 percent), ``clean_resource_interval``
    (10 s), ``disk_space_clean_forcibly_ratio`` (0.85) and
    ``disk_space_warning_level_ratio`` (0.90, above which puts are refused as
    disk full); see ``rmqk.plugins.broker.store.retention``.

    Transactional (half) messages are kept and checked as BrokerConfig does, in
    seconds: ``transaction_timeout`` (6, transactionTimeOut: how old a half message
    must be before its producers are asked), ``transaction_check_max`` (15, checks
    before it is discarded to TRANS_CHECK_MAX_TIME_TOPIC) and
    ``transaction_check_interval`` (60); ``reject_transaction_message`` refuses half
    messages instead. See ``rmqk.plugins.broker.transaction_check``.

    Like Apache's, the broker also listens on its port minus 2, the VIP channel
    (``rmqk.plugins.broker.vip``); ``vip_channel=False`` listens on one port only.
    The message index (QUERY_MESSAGE) takes ``message_index_enable``, ``max_hash_slot_num``
    and ``max_index_num`` (``rmqk.plugins.broker.store.index``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        namesrv_port: int = 9876,
        broker_port: int = 10911,
        broker_name: str = "broker-a",
        cluster: str = "DefaultCluster",
        advertised_host: str | None = None,
        flush: str = "async",
        delay_levels: str | Sequence[int] | None = None,
        auto_create_topic: bool = True,
        lock_expiry: float = 60.0,
        channel_expiry: float = 120.0,
        idle_timeout: float = 120.0,
        hold_check_interval: float = 5.0,
        register_period: float = 30.0,
        max_message_size: int = 4 * 1024 * 1024,
        segment_size: int | None = None,
        notify_consumer_ids_changed: bool = True,
        enable_property_filter: bool = False,
        acl: AclConfig | str | os.PathLike[str] | None = None,
        tls: ServerTlsConfig | None = None,
        file_reserved_time: float = 72.0,
        delete_when: str = "04",
        disk_max_used_space_ratio: int = 75,
        clean_resource_interval: float = 10.0,
        disk_space_clean_forcibly_ratio: float = 0.85,
        disk_space_warning_level_ratio: float = 0.90,
        transaction_timeout: float = 6.0,
        transaction_check_max: int = 15,
        transaction_check_interval: float = 60.0,
        reject_transaction_message: bool = False,
        vip_channel: bool = True,
        message_index_enable: bool = True,
        max_hash_slot_num: int = 500_000,
        max_index_num: int = 2_000_000,
    ) -> None:
        from rmqk.plugins.broker.store.index import IndexConfig
        from rmqk.plugins.broker.store.retention import RetentionPolicy
        from rmqk.plugins.broker.transaction_check import TransactionSettings

        try:
            self.transaction = TransactionSettings(
                transaction_timeout=transaction_timeout,
                transaction_check_max=transaction_check_max,
                transaction_check_interval=transaction_check_interval,
            )
        except ValueError as exc:
            raise RmqkError(str(exc)) from None
        self.reject_transaction_message = reject_transaction_message

        if flush not in ("async", "sync"):
            raise RmqkError(f"flush must be 'async' or 'sync', got {flush!r}")
        try:
            self.retention = RetentionPolicy(
                file_reserved_time=file_reserved_time,
                delete_when=delete_when,
                disk_max_used_space_ratio=disk_max_used_space_ratio,
                clean_resource_interval=clean_resource_interval,
                disk_space_clean_forcibly_ratio=disk_space_clean_forcibly_ratio,
                disk_space_warning_level_ratio=disk_space_warning_level_ratio,
            )
            self.index = IndexConfig(message_index_enable, max_hash_slot_num, max_index_num)
        except ValueError as exc:
            raise RmqkError(str(exc)) from None
        self.data_dir = Path(data_dir)
        self.host = host
        self._namesrv_port = namesrv_port
        self._broker_port = broker_port
        self.broker_name = broker_name
        self.cluster = cluster
        self._advertised_host = advertised_host
        self.flush = flush
        self.delay_levels = delay_levels
        self.auto_create_topic = auto_create_topic
        self.lock_expiry = lock_expiry
        self.channel_expiry = channel_expiry
        self.idle_timeout = idle_timeout
        self.hold_check_interval = hold_check_interval
        if not register_period > 0:
            raise RmqkError(f"register_period must be positive, got {register_period!r}")
        self.register_period = register_period
        self.max_message_size = max_message_size
        self.segment_size = segment_size
        self.notify_consumer_ids_changed = notify_consumer_ids_changed
        self.enable_property_filter = enable_property_filter
        self.acl = acl
        self.tls = tls
        self.vip_channel = vip_channel
        self._access: AccessValidator | None = None
        self.namesrv: Any = None
        self.processors: Any = None
        self.store: Any = None
        self._broker_server: Any = None
        self._vip_server: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._namesrv_addr: str | None = None
        self._broker_addr: str | None = None
        self.running = False

    # -- addresses ---------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        if self._namesrv_addr is None:
            raise RmqkError("the embedded broker is not started: no name server address yet")
        return self._namesrv_addr

    @property
    def broker_addr(self) -> str:
        if self._broker_addr is None:
            raise RmqkError("the embedded broker is not started: no broker address yet")
        return self._broker_addr

    @property
    def broker_server(self) -> Any:
        """The listener on the broker port (a ``RemotingServer``), None when stopped."""
        return self._broker_server

    @property
    def vip_server(self) -> Any:
        """The VIP channel's listener on the broker port minus 2, None when there is none."""
        return self._vip_server

    def _advertise(self, port: int) -> str:
        host = self._advertised_host
        if host is None:
            host = (
                "127.0.0.1"
                if self.host in _WILDCARD_HOSTS or self.host == "localhost"
                else self.host
            )
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> EmbeddedBroker:
        from rmqk.plugins.broker.acl import acl_from_option
        from rmqk.plugins.broker.namesrv import NameServer
        from rmqk.plugins.broker.processors import BrokerProcessors, BrokerSettings
        from rmqk.plugins.broker.server import RemotingServer
        from rmqk.plugins.broker.store import MessageStore
        from rmqk.plugins.broker.store.schedule import delay_levels_text
        from rmqk.plugins.broker.vip import listen

        if self.running:
            raise RmqkError("the embedded broker is already started")
        # Bad ACL or TLS settings fail here, before anything listens.
        self._access = acl_from_option(self.acl)
        if self.tls is not None:
            self.tls.ssl_context()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.namesrv = NameServer(idle_timeout=self.idle_timeout)
            if self.tls is not None:
                self.namesrv.server.use_tls(self.tls)
            port = await self.namesrv.start(self.host, self._namesrv_port)
            self._namesrv_addr = self._advertise(port)

            # The store stamps the broker's address into every record, so the
            # port must be bound before the store opens.
            listeners = await listen(
                lambda name, handle: RemotingServer(
                    name, handle, idle_timeout=self.idle_timeout, tls=self.tls
                ),
                self._handle,
                self.host,
                self._broker_port,
                vip=self.vip_channel,
            )
            self._broker_server, self._vip_server = listeners.main, listeners.vip
            port = listeners.main.port
            self._broker_addr = self._advertise(port)

            store_kwargs: dict[str, Any] = {
                "flush": self.flush,
                "store_host": self._broker_addr,
                "max_message_size": self.max_message_size,
                "retention": self.retention,
                "index": self.index,
            }
            if self.segment_size is not None:
                store_kwargs["segment_size"] = self.segment_size
            if self.delay_levels is not None:
                store_kwargs["delay_levels"] = delay_levels_text(self.delay_levels)
            self.store = MessageStore(self.data_dir, **store_kwargs)
            self.store.open()
            settings = BrokerSettings(
                broker_name=self.broker_name,
                cluster=self.cluster,
                broker_addr=self._broker_addr,
                auto_create_topic=self.auto_create_topic,
                max_message_size=self.max_message_size,
                notify_consumer_ids_changed=self.notify_consumer_ids_changed,
                enable_property_filter=self.enable_property_filter,
                reject_transaction_message=self.reject_transaction_message,
            )
            system = self._ensure_system_topics()
            self.processors = BrokerProcessors(
                settings,
                self.store,
                system_topics=system,
                on_topics_changed=self._register_routes,
                lock_expiry=self.lock_expiry,
                channel_expiry=self.channel_expiry,
                hold_check_interval=self.hold_check_interval,
                transaction=self.transaction,
                file_reserved_hours=self.retention.file_reserved_time,
            )
            self._broker_server.on_connection_closed(self.processors.connection_closed)
            if self._vip_server is not None:
                self._vip_server.on_connection_closed(self.processors.connection_closed)
            self.store.add_listener(self.processors.on_message_arrived)
            await self.processors.start()
            self.store.start()
            self._register_routes()
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._scan_clients(), name="rmqk-client-scan"))
            self._tasks.append(
                loop.create_task(self._register_periodically(), name="rmqk-register-broker")
            )
            self.running = True
        except BaseException:
            await self._shutdown()
            raise
        log.info(
            "embedded broker %s (%s) on %s, name server on %s, data in %s",
            self.broker_name,
            self.cluster,
            self._broker_addr,
            self._namesrv_addr,
            self.data_dir,
        )
        return self

    async def stop(self) -> None:
        if not self.running and self.namesrv is None:
            return
        self.running = False
        await self._shutdown()

    async def _shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._vip_server is not None:
            await self._vip_server.stop()
            self._vip_server = None
        if self._broker_server is not None:
            await self._broker_server.stop()
            self._broker_server = None
        if self.processors is not None:
            await self.processors.stop()
            self.processors = None
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.stop()
            self.store.close()
            self.store = None
        if self.namesrv is not None:
            await self.namesrv.stop()
            self.namesrv = None

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, conn: Any, request: Any, serialize_type: int) -> Any:
        processors = self.processors
        if processors is None:
            return None
        access = self._access
        if access is not None:
            denied = access.check(request, conn.remote_addr)
            if denied is not None:
                from rmqk.plugins.broker.commands import make_response

                # What Apache answers when its ACL hook throws; the request is not processed.
                log.warning(
                    "request code %d from %s refused: %s", request.code, conn.remote_addr,
                    denied.message,
                )  # fmt: skip
                return make_response(request, ResponseCode.SYSTEM_ERROR, denied.remark)
        return await processors.handle(conn, request, serialize_type)

    async def _scan_clients(self) -> None:
        period = max(0.05, min(10.0, self.channel_expiry / 4))
        while True:
            await asyncio.sleep(period)
            if self.processors is not None:
                self.processors.clients.scan_expired()

    async def _register_periodically(self) -> None:
        # BrokerController's registerBrokerAll task: whatever happened to the route
        # table, the broker's routes are whole again within one period.
        while True:
            await asyncio.sleep(self.register_period)
            try:
                self._register_routes()
            except Exception as exc:
                log.warning("registering broker %s with the name server failed: %r",
                            self.broker_name, exc)  # fmt: skip

    # -- topics ------------------------------------------------------------------

    def _ensure_system_topics(self) -> list[str]:
        """The topics Apache's TopicConfigManager always has (persisted values win)."""
        from rmqk.plugins.broker.store.topics import TopicConfig

        rw = PERM_READ | PERM_WRITE
        wanted = [
            TopicConfig("SELF_TEST_TOPIC", 1, 1),
            TopicConfig("BenchmarkTest", 1024, 1024),
            TopicConfig(self.cluster, 16, 16, perm=rw | PERM_INHERIT),
            TopicConfig(self.broker_name, 1, 1, perm=rw | PERM_INHERIT),
            TopicConfig("OFFSET_MOVED_EVENT", 1, 1),
            TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18),
            TopicConfig(f"{self.cluster}_REPLY_TOPIC", 1, 1),
        ]
        if self.auto_create_topic:
            wanted.append(TopicConfig("TBW102", 8, 8, perm=rw | PERM_INHERIT))
        names = [cfg.topic_name for cfg in wanted] + ["TBW102"]
        topics = self.store.topics
        for cfg in wanted:
            if topics.get(cfg.topic_name) is None:
                topics.put(cfg)
        return names

    def _register_routes(self) -> None:
        from rmqk.plugins.broker.namesrv import TopicQueueConfig

        if self.namesrv is None or self.store is None:
            return
        self.namesrv.routes.register_broker(
            self.cluster,
            self.broker_addr,
            self.broker_name,
            0,
            [
                TopicQueueConfig(
                    cfg.topic_name,
                    cfg.read_queue_nums,
                    cfg.write_queue_nums,
                    cfg.perm,
                    cfg.topic_sys_flag,
                )
                for cfg in self.store.topics.all()
            ],
        )

    async def create_topic(
        self,
        topic: str,
        *,
        queues: int = 4,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
    ) -> None:
        """Create or update a topic, as UPDATE_AND_CREATE_TOPIC does.

        A name UPDATE_AND_CREATE_TOPIC would refuse (blank, longer than 127
        characters, characters outside ``^[%|a-zA-Z0-9_-]+$``) raises RmqkError
        with the broker's remark.
        """
        from rmqk.plugins.broker.processors.topics import validate_topic
        from rmqk.plugins.broker.store.topics import TopicConfig

        problem = validate_topic(topic)
        if problem is not None:
            raise RmqkError(f"cannot create topic {topic!r}: {problem}")
        if self.store is None:
            raise RmqkError("the embedded broker is not started")
        self.store.topics.put(
            TopicConfig(
                topic,
                read_queues if read_queues is not None else queues,
                write_queues if write_queues is not None else queues,
                perm=perm,
                order=order,
            )
        )
        self._register_routes()

    # -- threads -----------------------------------------------------------------

    @classmethod
    def run_in_thread(
        cls, data_dir: str | os.PathLike[str], *, start_timeout: float = 30.0, **options: Any
    ) -> BrokerThread:
        """Start a broker on its own event loop in a daemon thread; returns once it listens."""
        handle = BrokerThread(cls(data_dir, **options))
        handle.start(start_timeout)
        return handle


class BrokerThread:
    """An :class:`EmbeddedBroker` running in a background thread (sync tests, the CLI)."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def namesrv_addr(self) -> str:
        return self.broker.namesrv_addr

    @property
    def broker_addr(self) -> str:
        return self.broker.broker_addr

    @property
    def broker_name(self) -> str:
        return self.broker.broker_name

    @property
    def cluster(self) -> str:
        return self.broker.cluster

    def start(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self._main, name="rmqk-embedded-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RmqkError(f"the embedded broker did not start within {timeout} s")
        if self._error is not None:
            raise RmqkError(f"the embedded broker failed to start: {self._error}") from self._error

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        try:
            await self.broker.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await self.broker.stop()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run a coroutine on the broker's loop and return its result."""
        if self.loop is None:
            raise RmqkError("the embedded broker thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        loop, stopped, thread = self.loop, self._stopped, self._thread
        if loop is None or stopped is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stopped.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RmqkError(f"the embedded broker thread did not stop within {timeout} s")
        self._thread = None

    def __enter__(self) -> BrokerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@hookimpl
def rmqk_register_commands(register: Register) -> None:
    from rmqk.plugins.broker.cli import BROKER_COMMAND

    register("broker", BROKER_COMMAND)
