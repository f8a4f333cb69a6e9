"""One remoting connection, either side, as an asyncio protocol.

It reads frames, hands requests to the server's dispatcher in arrival order (like
Apache's single-threaded processor pools, so one producer's sends are stored in
order), matches responses to the requests this side sent (by opaque), and writes
every response in the serialize type of the request it answers. A malformed
frame closes that connection only. :func:`connect` opens one to any 4.9 name
server or broker (the client side of ``rmqk admin``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, cast

from rmqk.model.errors import FrameError, RemotingConnectError, RemotingTimeoutError
from rmqk.plugins.broker.commands import HeaderError, make_response
from rmqk.wire.protocol import RPC_ONEWAY, RPC_TYPE_RESPONSE, RemotingCommand, ResponseCode

__all__ = ["SERIALIZE_JSON", "Connection", "RequestHandler", "connect"]

log = logging.getLogger("rmqk.broker.server")

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
        from rmqk.wire import frame

        _frame_module = frame
    return _frame_module


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
        # uvloop's transports do not derive from asyncio.Transport (see the client's).
        tcp = self._transport = cast(asyncio.Transport, transport)
        self.remote_addr = _format_addr(tcp.get_extra_info("peername"))
        self.local_addr = _format_addr(tcp.get_extra_info("sockname"))
        self.last_activity = time.monotonic()
        tcp.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
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
            refused = _untext_field(request)
            if refused is not None:
                log.warning("%r: request code %d refused: %s", self, request.code, refused)
                response = make_response(request, ResponseCode.SYSTEM_ERROR, refused)
            else:
                try:
                    response = await handler(self, request, serialize_type)
                except HeaderError as exc:
                    response = make_response(request, ResponseCode.SYSTEM_ERROR, exc.remark)
                except Exception as exc:
                    _log_failure(self, request.code, exc)
                    response = make_response(request, ResponseCode.SYSTEM_ERROR, _one_line(exc))
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
        except ValueError:
            # Text a client sent back to it (a name in a remark) may hold lone
            # surrogates; Java's encoder writes "?" for them, and so does this one.
            try:
                data = codec.encode_frame(
                    _as_java_text(command), codec.SerializeType(serialize_type)
                )
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


# (exception type, request code) whose traceback was logged already: one per kind
# keeps a flood of bad requests from flooding the log. Bounded, so that a hostile
# variety of kinds cannot grow it without limit either.
_TRACED_KINDS: set[tuple[str, int]] = set()
_MAX_TRACED_KINDS = 256


def _log_failure(conn: Connection, code: int, exc: Exception) -> None:
    """One WARNING line per failed request; its traceback once per kind, else at DEBUG."""
    kind = (type(exc).__qualname__, code)
    first = kind not in _TRACED_KINDS and len(_TRACED_KINDS) < _MAX_TRACED_KINDS
    if first:
        _TRACED_KINDS.add(kind)
    log.warning(
        "%r: processing request code %d failed: %s%s",
        conn,
        code,
        _one_line(exc),
        "" if first else " (traceback logged once per kind, and at DEBUG)",
        exc_info=exc if first else None,
    )
    if not first and log.isEnabledFor(logging.DEBUG):
        log.debug("%r: traceback of request code %d", conn, code, exc_info=exc)


def _one_line(exc: BaseException, limit: int = 500) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _untext_field(request: RemotingCommand) -> str | None:
    """Why a request's header is refused: a field that is not text (a lone surrogate).

    No Java client can send one (its encoder writes "?" instead), names made of
    them could never be answered or stored, so they stop at the door.
    """
    for key, value in request.ext_fields.items():
        if not (key.isascii() and value.isascii()):
            try:
                key.encode("utf-8")
                value.encode("utf-8")
            except UnicodeEncodeError:
                shown = _java_str(key)
                return f"the header field <{shown}> is not valid UTF-8 text (a lone surrogate)"
    return None


def _java_str(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _as_java_text(command: RemotingCommand) -> RemotingCommand:
    return RemotingCommand(
        command.code,
        ext_fields={_java_str(k): _java_str(v) for k, v in command.ext_fields.items()},
        body=command.body,
        remark=None if command.remark is None else _java_str(command.remark),
        opaque=command.opaque,
        flag=command.flag,
        language=command.language,
        version=command.version,
    )


async def connect(
    addr: str,
    *,
    timeout: float = 3.0,
    handler: RequestHandler | None = None,
    label: str = "client",
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> Connection:
    """Open a connection to ``host:port`` (``[v6]:port`` for IPv6), over TLS with
    ``ssl_context`` (the certificate checked against ``server_hostname``, "" for none)."""
    host, sep, port_text = addr.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise RemotingConnectError(f"address {addr!r} is not host:port")
    host = host.strip("[]")
    conn = Connection(handler=handler, label=label)
    tls: dict[str, Any] = {}
    if ssl_context is not None:
        tls = {"ssl": ssl_context, "server_hostname": server_hostname}
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(lambda: conn, host, int(port_text), **tls),
            timeout,
        )
    except (TimeoutError, OSError) as exc:
        raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
    return conn
