"""The asyncio remoting server the embedded name server and broker run on.

One :class:`Connection` per TCP peer: it reads frames, hands requests to the
server's dispatcher in arrival order (like Apache's single-threaded processor
pools, so one producer's sends are stored in order), matches responses to the
requests this side sent (by opaque), and writes every response in the serialize
type of the request it answers. A malformed frame closes that connection only.

:class:`Connection` is also the client side of ``rmqk admin``: :func:`connect`
opens one to any 4.9 name server or broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any

import attrs

from rmqk.errors import (
    ConfigError,
    ConfigProblem,
    FrameError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from rmqk.protocol import (
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    LanguageCode,
    RemotingCommand,
    ResponseCode,
    stringify_fields,
)

__all__ = [
    "APACHE_VERSION",
    "Connection",
    "HeaderError",
    "Headers",
    "RemotingServer",
    "RequestHandler",
    "ServerTlsConfig",
    "connect",
    "make_request",
    "make_response",
]

log = logging.getLogger("rmqk.broker.server")

# What an Apache 4.9.8 server puts in the version field (MQVersion.Version.V4_9_8.ordinal()).
APACHE_VERSION = 409
SERIALIZE_JSON = 0
# Past this many bytes of unwritten responses a connection stops reading requests
# until the peer has taken all but WRITE_BUFFER_LOW of them.
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 16 * 1024

RequestHandler = Callable[["Connection", RemotingCommand, int], Awaitable[RemotingCommand | None]]


_frame_module: Any = None


def _codec() -> Any:
    # Imported lazily (once): the frame codec is a sibling plugin and importing it at
    # module import time would make the broker plugin's registration depend on it.
    global _frame_module
    if _frame_module is None:
        from rmqk.plugins.remoting import frame

        _frame_module = frame
    return _frame_module


def make_response(
    request: RemotingCommand,
    code: int = ResponseCode.SUCCESS,
    remark: str | None = None,
    fields: Mapping[str, object] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response as an Apache server writes it: language JAVA, version 4.9.8."""
    response = RemotingCommand(
        code,
        body=body,
        remark=remark,
        opaque=request.opaque,
        flag=RPC_TYPE_RESPONSE,
        language=LanguageCode.JAVA,
        version=APACHE_VERSION,
    )
    if fields:
        response.ext_fields = stringify_fields(fields)
    return response


def make_request(
    code: int, fields: Mapping[str, object] | None = None, body: bytes = b""
) -> RemotingCommand:
    """A request this side sends (broker→client, or admin→server)."""
    return RemotingCommand.request(
        code, fields, body, language=LanguageCode.JAVA, version=APACHE_VERSION
    )


class HeaderError(Exception):
    """A request header Apache would fail to decode; answered with SYSTEM_ERROR and this remark."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


_NULL_FIELD = (
    "org.apache.rocketmq.remoting.exception.RemotingCommandException: the custom field <{}> is null"
)
_NPE = "java.lang.NullPointerException"


class Headers:
    """Typed reads of a request's ``extFields`` with Apache's failure remarks.

    A missing ``@CFNotNull`` field fails the decode with RemotingCommandException;
    a field that does not parse as a number is left null by Java, which then
    fails with a NullPointerException where it is used.
    """

    __slots__ = ("_fields",)

    def __init__(self, request: RemotingCommand) -> None:
        self._fields = request.ext_fields

    def require(self, *names: str) -> None:
        for name in names:
            if self._fields.get(name) is None:
                raise HeaderError(_NULL_FIELD.format(name))

    def text(self, name: str) -> str:
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NULL_FIELD.format(name))
        return value

    def opt_text(self, name: str) -> str | None:
        return self._fields.get(name)

    def number(self, name: str) -> int:
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NULL_FIELD.format(name))
        return _parse_int(value)

    def opt_number(self, name: str, default: int | None = None) -> int | None:
        value = self._fields.get(name)
        if value is None:
            return default
        try:
            return int(value.strip())
        except ValueError:
            return default

    def lenient_number(self, name: str) -> int:
        """A required number of a fast-decoded header: missing or bad is a null dereference."""
        value = self._fields.get(name)
        if value is None:
            raise HeaderError(_NPE)
        return _parse_int(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._fields.get(name)
        if value is None:
            return default
        return value.strip().lower() == "true"

    def opt_boolean(self, name: str) -> bool | None:
        value = self._fields.get(name)
        if value is None:
            return None
        return value.strip().lower() == "true"


def _parse_int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise HeaderError(_NPE) from None


def _format_addr(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        if ":" in str(host):
            return f"[{host}]:{port}"
        return f"{host}:{port}"
    return str(peer)


class _Resume:
    """Awaitable that carries on a handler coroutine first stepped outside any task.

    :class:`Connection` runs each handler inline, in the transport's read
    callback; the rare handler that suspends is handed to a task through this,
    which yields the future it is waiting on and forwards everything else.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, None]:
        coro = self._coro
        yielded = self._first
        while True:
            try:
                sent = yield yielded
            except BaseException as exc:  # a cancellation thrown into the task
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration:
                return


class Connection(asyncio.Protocol):
    """One remoting connection, either side: an asyncio protocol.

    Frames are decoded in the transport's read callback and each request's
    handler is run right there, so a request costs no task wake-up. Requests
    of one connection are still handled strictly in order: while a handler is
    suspended (it awaits something), later frames wait in the buffer. When
    more than :data:`WRITE_BUFFER_HIGH` bytes of responses are waiting to be
    written, reading stops until the peer has taken most of them.
    """

    def __init__(
        self,
        *,
        handler: RequestHandler | None = None,
        max_frame_size: int | None = None,
        label: str = "remoting",
        on_connected: Callable[[Connection], None] | None = None,
    ) -> None:
        self._handler = handler
        self._max_frame_size = max_frame_size or _codec().MAX_FRAME_SIZE
        self._on_connected = on_connected
        self.label = label
        self.remote_addr = ""
        self.local_addr = ""
        self.last_activity = time.monotonic()
        self.closed = False
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._busy: asyncio.Task[None] | None = None
        self._write_paused = False
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._closed_event = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Connection {self.label} {self.local_addr}<->{self.remote_addr}>"

    # -- lifecycle (protocol callbacks) ------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.remote_addr = _format_addr(transport.get_extra_info("peername"))
        self.local_addr = _format_addr(transport.get_extra_info("sockname"))
        self.last_activity = time.monotonic()
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        if self._on_connected is not None:
            self._on_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._transport is not None and not self.closed:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()
            self._process()

    def add_close_callback(self, callback: Callable[[Connection], None]) -> None:
        if self.closed:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    RemotingConnectError(f"connection to {self.remote_addr} closed")
                )
        self._pending.clear()
        self._buffer.clear()
        self._closed_event.set()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("close callback of %r failed", self)

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    # -- reading ---------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._buffer += data
        self.last_activity = time.monotonic()
        try:
            self._process()
        except Exception:
            log.exception("%r: read loop failed", self)
            self.close()

    def _process(self) -> None:
        """Decode and dispatch every complete frame in the buffer, in order."""
        codec = _codec()
        buf = self._buffer
        max_size = self._max_frame_size
        while not self.closed and self._busy is None and not self._write_paused:
            if len(buf) < 4:
                return
            length = int.from_bytes(buf[:4], "big", signed=True)
            # Netty counts the length word itself against the frame limit.
            if length < 4 or length + 4 > max_size:
                log.warning(
                    "%r: frame length %d outside [4, %d]; closing the connection",
                    self,
                    length,
                    max_size,
                )
                self.close()
                return
            end = 4 + length
            if len(buf) < end:
                return
            frame = bytes(buf[4:end])
            del buf[:end]
            try:
                decoded = codec.decode_frame_typed(frame)
            except FrameError as exc:
                log.warning("%r: malformed frame (%s); closing the connection", self, exc)
                self.close()
                return
            except Exception as exc:
                log.warning("%r: undecodable frame (%r); closing the connection", self, exc)
                self.close()
                return
            command = decoded.command
            if command.flag & RPC_TYPE_RESPONSE:
                self._on_response(command)
            else:
                self._dispatch(command, int(decoded.serialize_type))

    def _dispatch(self, request: RemotingCommand, serialize_type: int) -> None:
        coro = self._on_request(request, serialize_type)
        try:
            yielded = coro.send(None)
        except StopIteration:
            return
        self._busy = asyncio.get_running_loop().create_task(
            self._finish(coro, yielded), name=f"rmqk-{self.label}-{self.remote_addr}"
        )

    async def _finish(self, coro: Coroutine[Any, Any, None], yielded: Any) -> None:
        try:
            await _Resume(coro, yielded)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%r: request handling failed", self)
        finally:
            self._busy = None
            if not self.closed:
                try:
                    self._process()
                except Exception:
                    log.exception("%r: read loop failed", self)
                    self.close()

    def _on_response(self, response: RemotingCommand) -> None:
        future = self._pending.pop(response.opaque, None)
        if future is None:
            log.debug("%r: response with unknown opaque %d dropped", self, response.opaque)
            return
        if not future.done():
            future.set_result(response)

    async def _on_request(self, request: RemotingCommand, serialize_type: int) -> None:
        handler = self._handler
        if handler is None:
            response: RemotingCommand | None = make_response(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        else:
            try:
                response = await handler(self, request, serialize_type)
            except HeaderError as exc:
                response = make_response(request, ResponseCode.SYSTEM_ERROR, exc.remark)
            except Exception as exc:
                log.exception("%r: processing request code %d failed", self, request.code)
                response = make_response(
                    request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
                )
        if response is None or request.flag & RPC_ONEWAY:
            return
        self.send(response, serialize_type)

    # -- writing ---------------------------------------------------------------

    def send(self, command: RemotingCommand, serialize_type: int = SERIALIZE_JSON) -> bool:
        """Write one command; False when the connection is already closed."""
        transport = self._transport
        if self.closed or transport is None:
            return False
        if transport.is_closing():
            self.close()
            return False
        codec = _codec()
        try:
            data = codec.encode_frame(command, codec.SerializeType(serialize_type))
        except ValueError as exc:
            log.error("%r: cannot encode command code %d: %s", self, command.code, exc)
            return False
        try:
            transport.write(data)
        except (ConnectionError, OSError, RuntimeError):
            self.close()
            return False
        self.last_activity = time.monotonic()
        return True

    def respond(
        self, request: RemotingCommand, response: RemotingCommand, serialize_type: int
    ) -> bool:
        """Answer a request later than its handler returned (held pulls, relayed calls)."""
        if request.flag & RPC_ONEWAY:
            return False
        response.opaque = request.opaque
        response.flag |= RPC_TYPE_RESPONSE
        return self.send(response, serialize_type)

    async def request(
        self,
        command: RemotingCommand,
        timeout: float,
        serialize_type: int = SERIALIZE_JSON,
    ) -> RemotingCommand:
        """Send a request and wait for its response (invokeSync)."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[command.opaque] = future
        if not self.send(command, serialize_type):
            self._pending.pop(command.opaque, None)
            raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise RemotingTimeoutError(
                f"wait response on the channel <{self.remote_addr}> timeout, "
                f"{int(timeout * 1000)}(ms)"
            ) from None
        finally:
            self._pending.pop(command.opaque, None)

    def oneway(self, command: RemotingCommand, serialize_type: int = SERIALIZE_JSON) -> bool:
        command.flag |= RPC_ONEWAY
        return self.send(command, serialize_type)


async def connect(
    addr: str,
    *,
    timeout: float = 3.0,
    handler: RequestHandler | None = None,
    label: str = "client",
) -> Connection:
    """Open a connection to ``host:port`` (``[v6]:port`` for IPv6)."""
    host, sep, port_text = addr.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise RemotingConnectError(f"address {addr!r} is not host:port")
    host = host.strip("[]")
    conn = Connection(handler=handler, label=label)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(lambda: conn, host, int(port_text)),
            timeout,
        )
    except (TimeoutError, OSError) as exc:
        raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
    return conn


TLS_MODES = ("enforcing", "permissive")
CLIENT_AUTH = ("none", "optional", "require")
# The first byte of a TLS connection: a handshake record (what Apache's permissive mode sniffs).
_TLS_HANDSHAKE = 0x16


@attrs.frozen(repr=False)
class ServerTlsConfig:
    """TLS on a server port (Apache's ``tls.server.*`` settings).

    ``mode`` ``enforcing`` accepts only TLS; ``permissive`` (Apache's default)
    accepts TLS and plain connections on the same port, telling them apart by
    their first byte. ``client_auth`` ``require`` (or ``optional``) asks clients
    for a certificate signed by ``ca_file``
    (``tls.server.need.client.auth``).
    """

    cert_file: str
    key_file: str
    ca_file: str | None = None
    mode: str = "enforcing"
    client_auth: str = "none"

    def __repr__(self) -> str:
        # The key file's path is not secret, but its content is: only paths are shown.
        return (
            f"ServerTlsConfig(cert_file={self.cert_file!r}, key_file={self.key_file!r}, "
            f"ca_file={self.ca_file!r}, mode={self.mode!r}, client_auth={self.client_auth!r})"
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The server context; ConfigError names the setting that cannot be used."""

        def fail(key: str, message: str) -> ConfigError:
            return ConfigError([ConfigProblem("<broker options>", "tls", key, message)])

        if self.mode not in TLS_MODES:
            raise fail("mode", f"must be one of {', '.join(TLS_MODES)}, got {self.mode!r}")
        if self.client_auth not in CLIENT_AUTH:
            raise fail(
                "client_auth", f"must be one of {', '.join(CLIENT_AUTH)}, got {self.client_auth!r}"
            )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise fail(
                "cert_file",
                f"{self.cert_file!r} with key_file {self.key_file!r} cannot be loaded: "
                f"{_reason(exc)}",
            ) from None
        if self.client_auth != "none":
            if not self.ca_file:
                raise fail("ca_file", f"client_auth={self.client_auth!r} needs a ca_file")
            try:
                ctx.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                reason = _reason(exc)
                raise fail("ca_file", f"{self.ca_file!r} cannot be loaded: {reason}") from None
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth == "require" else ssl.CERT_OPTIONAL
            )
        return ctx


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


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
        tls = first[0] == _TLS_HANDSHAKE
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
