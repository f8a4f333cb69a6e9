"""What every call of the ``tcp`` transport goes through: connections, RPC hooks, raw calls.

:class:`RemotingClient` owns the :class:`~rmqk.plugins.remoting.connection.ConnectionPool`
(opened on first use), runs the RPC hooks exactly where Java's NettyRemotingClient
calls its RPCHook (``rmqk_before_request`` before every request sent,
``rmqk_after_response`` after a sync call's response arrived), and remembers
which broker name the routes seen so far give each address. The calls grouped by
role (name server, consumer, producer, admin) are mixins over it, and
``TcpTransport`` composes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rmqk.model.errors import ConfigError, RemotingConnectError
from rmqk.plugins.remoting import acl
from rmqk.plugins.remoting.connection import Connection, ConnectionPool
from rmqk.plugins.remoting.inbound import serve
from rmqk.plugins.remoting.options import CLOSE_SOCKET_IF_TIMEOUT, VIP_CHANNEL_ENABLED
from rmqk.spi.registry import all_idle
from rmqk.spi.transport import InboundHandler, TransportConfig
from rmqk.wire.frame import SerializeType
from rmqk.wire.protocol import RemotingCommand
from rmqk.wire.tls import client_ssl_context, server_hostname

__all__ = ["CLOSE_SOCKET_IF_TIMEOUT", "VIP_CHANNEL_ENABLED", "RemotingClient", "vip_address"]


def vip_address(addr: str) -> str:
    """A broker's VIP channel: its address with the port minus 2 (MixAll.brokerVIPChannel)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return addr
    return f"{host}:{int(port) - 2}"


def _serialize_type(name: str) -> SerializeType:
    try:
        return SerializeType[name.strip().upper()]
    except KeyError:
        raise ConfigError(f"serialize_type {name!r} is not one of JSON, ROCKETMQ") from None


def _flag(config: TransportConfig, key: str, default: bool) -> bool:
    value = config.options.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"transport option {key} must be true or false, got {value!r}")
    return value


def _close_socket_if_timeout(config: TransportConfig) -> bool:
    return _flag(config, CLOSE_SOCKET_IF_TIMEOUT, True)


class RemotingClient:
    """Connections, hooks and raw calls; ``timeout_ms=None`` means ``config.request_timeout_ms``."""

    def __init__(self, config: TransportConfig, hook: Any | None = None) -> None:
        self.config = config
        self._hook = hook
        self._serialize_type = _serialize_type(config.serialize_type)
        self._ssl = client_ssl_context(config.tls)
        self._close_socket_if_timeout = _close_socket_if_timeout(config)
        self._vip_channel = _flag(config, VIP_CHANNEL_ENABLED, False)
        self._handler: InboundHandler | None = None
        self._pool: ConnectionPool | None = None
        self._closed = False
        self._broker_names: dict[str, str] = {}
        # The hook callers, looked up once: the relay's attributes never change.
        self._before: Any = None if hook is None else hook.rmqk_before_request
        self._after: Any = None if hook is None else hook.rmqk_after_response
        self._credentials = config.credentials
        # The acl plugin reads its environment variables here, not per request.
        acl.load_environment()

    # -- lifecycle

    async def start(self) -> None:
        self._ensure_pool()

    def _ensure_pool(self) -> ConnectionPool:
        if self._closed:
            raise RemotingConnectError("the tcp transport is closed")
        if self._pool is None:
            tls = self.config.tls
            self._pool = ConnectionPool(
                connect_timeout_ms=self.config.connect_timeout_ms,
                channel_max_idle_s=self.config.channel_max_idle_s,
                async_permits=self.config.async_permits,
                oneway_permits=self.config.oneway_permits,
                serialize_type=self._serialize_type,
                ssl_context=self._ssl,
                tls_server_hostname=lambda host: server_hostname(tls, host),
                on_request=self._on_request,
                close_socket_if_timeout=self._close_socket_if_timeout,
            )
        return self._pool

    @property
    def pool(self) -> ConnectionPool:
        """The connections (started on first use)."""
        return self._ensure_pool()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            await self._pool.close()

    def set_inbound_handler(self, handler: InboundHandler | None) -> None:
        self._handler = handler

    # -- the broker names routes give addresses

    def broker_name_of(self, addr: str) -> str:
        """The broker name the routes seen so far give ``addr`` ("" when unknown)."""
        return self._broker_names.get(addr, "")

    def vip(self, addr: str) -> str:
        """Where a request Java sends through brokerVIPChannel goes: ``addr``, or its VIP port."""
        return vip_address(addr) if self._vip_channel else addr

    # -- hooks

    def before_request(self, addr: str, request: RemotingCommand) -> None:
        caller = self._before
        # Skipped while every plugin implementing it has nothing to do (the acl plugin
        # without credentials): a pluggy call costs about 1.5 us per request. Checked
        # at every call, so a plugin registered or configured later is called.
        if caller is not None and not all_idle(caller):
            caller(address=addr, request=request)
        credentials = self._credentials
        if credentials is not None:
            # The client's own account (its access_key option), signed last so that the
            # signature covers every field the hooks added and replaces the process
            # default's (Java: the client's own AclClientRPCHook).
            acl.sign(request, credentials)

    def after_response(
        self, addr: str, request: RemotingCommand, response: RemotingCommand | None
    ) -> None:
        caller = self._after
        # No plugin implements it by default: skipped likewise.
        if caller is None or all_idle(caller):
            return
        caller(address=addr, request=request, response=response)

    # -- raw calls

    def _timeout(self, timeout_ms: int | None) -> int:
        return self.config.request_timeout_ms if timeout_ms is None else timeout_ms

    async def invoke(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> RemotingCommand:
        """Send ``request`` and wait for the response (invokeSync)."""
        return await self._call(addr, request, timeout_ms, swept=False)

    async def invoke_swept(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None
    ) -> RemotingCommand:
        """invokeSync without a timer of its own: the pool's sweep enforces the timeout,
        and a timeout leaves the connection open (what Java's invokeAsync pulls get)."""
        pool = self._ensure_pool()
        conn = pool.connection(addr)
        if conn is None:
            return await self._call(addr, request, timeout_ms, swept=True)
        # The usual case, a connection already open: the same steps as _call and
        # ConnectionPool.request_swept in one coroutine (this runs for every pull).
        self.before_request(addr, request)
        future = conn.request_async(request, self._timeout(timeout_ms), pool.serialize_type)
        try:
            response = await future
        finally:
            # Cancelling the waiter cancels the future too; withdraw it either way.
            if not future.done() or future.cancelled():
                conn.withdraw(request, future)
        self.after_response(addr, request, response)
        return response

    async def _call(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None, *, swept: bool
    ) -> RemotingCommand:
        pool = self._ensure_pool()
        send = pool.request_swept if swept else pool.request
        self.before_request(addr, request)
        response = await send(addr, request, self._timeout(timeout_ms))
        self.after_response(addr, request, response)
        return response

    async def invoke_async(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> asyncio.Future[RemotingCommand]:
        """Send ``request`` now and return the future of its response (invokeAsync).

        Holds one of ``async_permits`` until the future is done; a request with no
        response is failed by the sweep within a second after its timeout.
        """
        pool = self._ensure_pool()
        self.before_request(addr, request)
        return await pool.request_async(addr, request, self._timeout(timeout_ms))

    async def invoke_oneway(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> None:
        """Send ``request`` flagged oneway; no response comes (invokeOneway)."""
        pool = self._ensure_pool()
        self.before_request(addr, request)
        await pool.oneway(addr, request, self._timeout(timeout_ms))

    # -- requests brokers send us

    def _on_request(self, conn: Connection, cmd: RemotingCommand, st: SerializeType) -> None:
        # Each request runs as its own task: a slow handler (a reset sleeps for
        # seconds in Java) must hold up neither the read loop nor other requests.
        assert self._pool is not None
        self._pool.spawn(serve(self, self._handler, conn, cmd, st), name=f"rmqk-inbound-{cmd.code}")
