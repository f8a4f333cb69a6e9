"""The asyncio remoting server the embedded name server and broker run on.

It accepts connections on one port (plain, TLS, or both on one port as Apache's
permissive mode does) and gives each to a :class:`Connection`, which dispatches
its requests to the server's handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable

from rmqk.plugins.broker.connection import Connection, RequestHandler
from rmqk.plugins.broker.tls import TLS_HANDSHAKE, ServerTlsConfig

__all__ = ["RemotingServer"]

log = logging.getLogger("rmqk.broker.server")


class RemotingServer:
    """Accepts connections on one port and dispatches their requests to ``handler``.

    Connections silent for ``idle_timeout`` seconds (no frame in either
    direction) are closed, as Netty's IdleStateHandler does on Apache servers.
    """

    def __init__(
        self,
        name: str,
        handler: RequestHandler,
        *,
        idle_timeout: float = 120.0,
        max_frame_size: int | None = None,
        tls: ServerTlsConfig | None = None,
    ) -> None:
        self.name = name
        self._handler = handler
        self._idle_timeout = idle_timeout
        self._max_frame_size = max_frame_size
        self._tls: ServerTlsConfig | None = None
        self._ssl: ssl.SSLContext | None = None
        if tls is not None:
            self.use_tls(tls)
        self._server: asyncio.Server | None = None
        self._listener: socket.socket | None = None
        self._accepting: set[asyncio.Task[None]] = set()
        self._idle_task: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()
        self._close_listeners: list[Callable[[Connection], None]] = []
        self.host = ""
        self.port = 0
        # Connections accepted since start, to tell which listener a client used.
        self.accepted = 0

    def on_connection_closed(self, listener: Callable[[Connection], None]) -> None:
        self._close_listeners.append(listener)

    def use_tls(self, tls: ServerTlsConfig) -> None:
        """Serve TLS (before :meth:`start`); raises ConfigError for unusable settings."""
        self._ssl = tls.ssl_context()
        self._tls = tls

    @property
    def tls(self) -> ServerTlsConfig | None:
        return self._tls

    async def start(self, host: str, port: int) -> int:
        if self._tls is not None and self._tls.mode == "permissive":
            self.port = await self._start_sniffing(host, port)
        else:
            self._server = await asyncio.get_running_loop().create_server(
                self._new_connection, host, port, ssl=self._ssl
            )
            sockets = self._server.sockets or ()
            self.port = sockets[0].getsockname()[1] if sockets else port
        self.host = host
        self._idle_task = asyncio.get_running_loop().create_task(
            self._idle_loop(), name=f"rmqk-{self.name}-idle"
        )
        log.info("%s listening on %s:%d", self.name, host, self.port)
        return self.port

    async def _start_sniffing(self, host: str, port: int) -> int:
        """Listen for permissive TLS: each connection's first byte says TLS or plain."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listener = sock
        task = loop.create_task(self._accept_loop(sock), name=f"rmqk-{self.name}-accept")
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)
        return int(sock.getsockname()[1])

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(sock)
            except OSError as exc:
                if self._listener is None:
                    return
                log.warning("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._sniff(client))
            self._accepting.add(task)
            task.add_done_callback(self._accepting.discard)

    async def _sniff(self, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        client.setblocking(False)
        readable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        fd = client.fileno()
        loop.add_reader(fd, ready)
        try:
            await asyncio.wait_for(readable, self._idle_timeout)
        except BaseException as exc:
            loop.remove_reader(fd)
            client.close()
            if isinstance(exc, TimeoutError):
                return
            raise
        loop.remove_reader(fd)
        try:
            first = client.recv(1, socket.MSG_PEEK)
        except OSError:
            client.close()
            return
        if not first:
            client.close()
            return
        tls = first[0] == TLS_HANDSHAKE
        try:
            await loop.connect_accepted_socket(
                self._new_connection, client, ssl=self._ssl if tls else None
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.info("%s: TLS handshake failed: %s", self.name, exc)
            client.close()
            return
        except BaseException:
            client.close()
            raise

    def _new_connection(self) -> Connection:
        return Connection(
            handler=self._handler,
            max_frame_size=self._max_frame_size,
            label=self.name,
            on_connected=self._accepted,
        )

    def _accepted(self, conn: Connection) -> None:
        # Only once connected (after the TLS handshake): a failed handshake leaves no trace.
        self.connections.add(conn)
        self.accepted += 1
        conn.add_close_callback(self._closed)

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for listener in self._close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("%s: connection-closed listener failed", self.name)

    async def _idle_loop(self) -> None:
        period = max(0.05, min(10.0, self._idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            deadline = time.monotonic() - self._idle_timeout
            for conn in list(self.connections):
                if conn.last_activity < deadline:
                    log.info("%s: closing idle connection %r", self.name, conn)
                    conn.close()

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
            self._idle_task = None
        if self._server is not None:
            self._server.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        accepting = list(self._accepting)
        for task in accepting:
            task.cancel()
        for conn in list(self.connections):
            conn.close()
        if accepting:
            await asyncio.gather(*accepting, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
