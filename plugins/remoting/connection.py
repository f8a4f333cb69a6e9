"""Connections to name servers and brokers (NettyRemotingClient's channel handling).

One connection per address, opened on demand and shared by every caller. Each
connection keeps its in-flight requests keyed by opaque; a response completes
the matching future and nothing else happens in the read path (callers resume
on their own turn of the event loop), so a slow consumer of responses never
holds up reading. Requests a peer sends to us are handed to a listener that
must not block either.

What fails a request, exactly once each:

* its deadline passes: :class:`~rmqk.model.errors.RemotingTimeoutError` (a sync
  caller's own timer, or the sweep that runs every second, whichever is first).
  A sync timeout also closes the connection unless ``close_socket_if_timeout``
  is off, as Java 4.9.8's ``clientCloseSocketIfTimeout`` (default true) does;
* its connection closes or is dropped, or the peer sends a malformed frame:
  :class:`~rmqk.model.errors.RemotingConnectError` at once, for every request on that
  connection and no other;
* it cannot be encoded (too big, say): :class:`~rmqk.model.errors.RemotingSendError`;
  nothing was written, so the connection stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, cast

from rmqk.model.errors import (
    FrameError,
    RemotingConnectError,
    RemotingSendError,
    RemotingTimeoutError,
)
from rmqk.plugins.remoting.addresses import connect_failure_reason as _reason  # tests import it
from rmqk.plugins.remoting.addresses import split_address
from rmqk.wire.frame import MAX_FRAME_SIZE, FrameDecoder, SerializeType, encode_frame
from rmqk.wire.protocol import RPC_TYPE_RESPONSE, RemotingCommand

__all__ = ["Connection", "ConnectionPool", "RequestListener"]

log = logging.getLogger("rmqk.remoting")

# Called for every request a peer sends us; must return without blocking.
RequestListener = Callable[["Connection", RemotingCommand, SerializeType], None]


class _Pending:
    __slots__ = ("code", "deadline", "future", "timeout_ms")

    def __init__(
        self, future: asyncio.Future[RemotingCommand], deadline: float, timeout_ms: int, code: int
    ) -> None:
        self.future = future
        self.deadline = deadline
        self.timeout_ms = timeout_ms
        self.code = code


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to ``addr`` and the requests in flight on it."""

    def __init__(self, addr: str, pool: ConnectionPool) -> None:
        self.addr = addr
        self._pool = pool
        self._loop = pool.loop
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(pool.max_frame_size)
        self.pending: dict[int, _Pending] = {}
        # Requests we stopped waiting for (a pull cancelled by a rebalance or a stop),
        # opaque -> deadline: their late answers are expected, not worth a warning.
        self._withdrawn: dict[int, float] = {}
        self._closed = False
        self._close_reason = "not connected"
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._out: list[bytes] | None = None
        self.last_activity = self._loop.time()

    # -- state

    @property
    def is_open(self) -> bool:
        return not self._closed and self._transport is not None

    def __repr__(self) -> str:
        state = "open" if self.is_open else f"closed ({self._close_reason})"
        return f"Connection({self.addr}, {state}, {len(self.pending)} in flight)"

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports implement asyncio.Transport's
        # methods without deriving from it (tests/test_uvloop.py).
        self._transport = cast(asyncio.Transport, transport)
        self.last_activity = self._loop.time()

    def data_received(self, data: bytes) -> None:
        self.last_activity = self._loop.time()
        try:
            frames = self._decoder.feed_typed(data)
        except FrameError as exc:
            log.warning("closing the connection to %s: %s", self.addr, exc)
            self.close(f"malformed frame from {self.addr}: {exc}", abort=True)
            return
        for frame in frames:
            cmd = frame.command
            if cmd.flag & RPC_TYPE_RESPONSE:  # cmd.is_response, without the property call
                entry = self.pending.pop(cmd.opaque, None)
                if entry is None and self._withdrawn.pop(cmd.opaque, None) is not None:
                    log.debug(
                        "response from %s to a withdrawn request (opaque %d, code %d) dropped",
                        self.addr,
                        cmd.opaque,
                        cmd.code,
                    )
                elif entry is None:
                    log.warning(
                        "response from %s matches no request in flight (opaque %d, code %d); "
                        "it came after its request timed out, or was never asked for",
                        self.addr,
                        cmd.opaque,
                        cmd.code,
                    )
                elif not entry.future.done():
                    entry.future.set_result(cmd)
            else:
                self._pool.dispatch_request(self, cmd, frame.serialize_type)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection to {self.addr} lost"
        if exc is not None:
            reason += f": {exc}"
        self.close(reason)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    # -- closing

    def close(self, reason: str, *, abort: bool = False) -> None:
        """Close now and fail everything in flight on this connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._pool.forget(self)
        if self._transport is not None:
            if abort:
                self._out = None
                self._transport.abort()
            else:
                self._flush_out()  # a response written just before closing still goes
                self._transport.close()
        pending, self.pending = self.pending, {}
        for opaque, entry in pending.items():
            if not entry.future.done():
                entry.future.set_exception(
                    RemotingConnectError(
                        f"request code {entry.code} (opaque {opaque}) to {self.addr} failed: "
                        f"{reason}"
                    )
                )
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- writing

    def _write(self, cmd: RemotingCommand, serialize_type: SerializeType) -> None:
        if self._closed or self._transport is None:
            raise RemotingConnectError(
                f"cannot send command code {cmd.code} to {self.addr}: {self._close_reason}"
            )
        try:
            frame = encode_frame(cmd, serialize_type, max_frame_size=self._pool.max_frame_size)
        except ValueError as exc:
            # Nothing was written, so the stream is intact and the connection stays.
            raise RemotingSendError(
                f"cannot encode command code {cmd.code} for {self.addr}: {exc}"
            ) from exc
        # Frames written in one turn of the event loop (the next pulls of several
        # queues whose responses arrived together) leave in one send call.
        pending = self._out
        if pending is None:
            self._out = [frame]
            self._loop.call_soon(self._flush_out)
        else:
            pending.append(frame)

    def _flush_out(self) -> None:
        frames, self._out = self._out, None
        if not frames or self._transport is None or self._transport.is_closing():
            return
        self._transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
        self.last_activity = self._loop.time()

    async def _drain(self, code: int) -> None:
        while self._write_paused and not self._closed:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter
        if self._closed:
            raise RemotingConnectError(
                f"connection to {self.addr} closed while sending request code {code}: "
                f"{self._close_reason}"
            )

    def _register(
        self, cmd: RemotingCommand, timeout_ms: int, budget_ms: int | None = None
    ) -> asyncio.Future[RemotingCommand]:
        if cmd.opaque in self.pending:
            raise RemotingSendError(
                f"request code {cmd.code} to {self.addr}: opaque {cmd.opaque} is already in "
                "flight (a command object can be sent once at a time)"
            )
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        deadline = self._loop.time() + (timeout_ms if budget_ms is None else budget_ms) / 1000
        self.pending[cmd.opaque] = _Pending(future, deadline, timeout_ms, cmd.code)
        return future

    def _timeout_error(self, cmd: RemotingCommand, timeout_ms: int) -> RemotingTimeoutError:
        return RemotingTimeoutError(
            f"no response from {self.addr} to request code {cmd.code} (opaque {cmd.opaque}) "
            f"within {timeout_ms} ms"
        )

    async def request(
        self,
        cmd: RemotingCommand,
        timeout_ms: int,
        serialize_type: SerializeType,
        *,
        budget_ms: int | None = None,
    ) -> RemotingCommand:
        """Send ``cmd`` and wait for its response (invokeSync).

        ``budget_ms`` is what is left of ``timeout_ms`` (connecting took the rest);
        errors name ``timeout_ms``, the caller's number.
        """
        left = timeout_ms if budget_ms is None else budget_ms
        future = self._register(cmd, timeout_ms, left)
        timed_out = False
        try:
            self._write(cmd, serialize_type)
            async with asyncio.timeout(left / 1000):
                await self._drain(cmd.code)
                return await future
        except TimeoutError:
            timed_out = True
            raise self._timeout_error(cmd, timeout_ms) from None
        finally:
            entry = self.pending.get(cmd.opaque)
            if entry is not None and entry.future is future:
                del self.pending[cmd.opaque]
                if not timed_out:  # the caller was cancelled: an answer may still come
                    self._withdrawn[cmd.opaque] = entry.deadline
            if future.done() and not future.cancelled():
                future.exception()  # retrieved here, so asyncio does not log it as lost
            else:
                future.cancel()

    def request_async(
        self, cmd: RemotingCommand, timeout_ms: int, serialize_type: SerializeType
    ) -> asyncio.Future[RemotingCommand]:
        """Send ``cmd``; the returned future gets the response or the error (invokeAsync)."""
        future = self._register(cmd, timeout_ms)
        try:
            self._write(cmd, serialize_type)
        except BaseException:
            self.pending.pop(cmd.opaque, None)
            future.cancel()
            raise
        return future

    def withdraw(self, cmd: RemotingCommand, future: asyncio.Future[RemotingCommand]) -> None:
        """Forget a request whose caller stopped waiting (cancelled): its response,
        if one still comes, then matches nothing."""
        future.cancel()
        entry = self.pending.get(cmd.opaque)
        if entry is not None and entry.future is future:
            del self.pending[cmd.opaque]
            self._withdrawn[cmd.opaque] = entry.deadline

    async def send_oneway(self, cmd: RemotingCommand, serialize_type: SerializeType) -> None:
        cmd.mark_oneway()
        self._write(cmd, serialize_type)
        await self._drain(cmd.code)

    def send_response(self, response: RemotingCommand, serialize_type: SerializeType) -> None:
        """Write the answer to a request the peer sent; dropped when already closed."""
        try:
            self._write(response, serialize_type)
        except (RemotingConnectError, RemotingSendError) as exc:
            log.warning("response code %d to %s not sent: %s", response.code, self.addr, exc)

    # -- timers

    def expire(self, now: float) -> None:
        """Fail the requests whose deadline has passed (scanResponseTable)."""
        if self._withdrawn:  # past its deadline, a withdrawn request's answer is late again
            for opaque in [o for o, deadline in self._withdrawn.items() if deadline <= now]:
                del self._withdrawn[opaque]
        expired = [opaque for opaque, entry in self.pending.items() if entry.deadline <= now]
        for opaque in expired:
            entry = self.pending.pop(opaque)
            if not entry.future.done():
                entry.future.set_exception(
                    RemotingTimeoutError(
                        f"no response from {self.addr} to request code {entry.code} "
                        f"(opaque {opaque}) within {entry.timeout_ms} ms"
                    )
                )


class ConnectionPool:
    """The connections of one client: one per address, reused, swept every second."""

    def __init__(
        self,
        *,
        connect_timeout_ms: int = 3000,
        channel_max_idle_s: float = 120,
        async_permits: int = 65535,
        oneway_permits: int = 65535,
        serialize_type: SerializeType = SerializeType.JSON,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_hostname: Callable[[str], str] | None = None,
        on_request: RequestListener | None = None,
        max_frame_size: int = MAX_FRAME_SIZE,
        sweep_interval_s: float = 1.0,
        close_socket_if_timeout: bool = True,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.connect_timeout_ms = connect_timeout_ms
        self.channel_max_idle_s = channel_max_idle_s
        self.serialize_type = serialize_type
        self.max_frame_size = max_frame_size
        self.close_socket_if_timeout = close_socket_if_timeout
        self._ssl = ssl_context
        self._tls_hostname = tls_server_hostname
        self._on_request = on_request
        self._async_sem = asyncio.Semaphore(async_permits)
        self._oneway_sem = asyncio.Semaphore(oneway_permits)
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._sweep_interval = sweep_interval_s
        self._sweeper = self.loop.create_task(self._sweep_loop(), name="rmqk-remoting-sweep")

    # -- connections

    def connection(self, addr: str) -> Connection | None:
        """The open connection to ``addr``, if any (no connecting)."""
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    def connections(self) -> list[Connection]:
        return [c for c in self._conns.values() if c.is_open]

    def forget(self, conn: Connection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]

    async def get(self, addr: str, timeout_ms: int | None = None) -> Connection:
        """The connection to ``addr``, opened now if there is none (getAndCreateChannel).

        Concurrent callers share one connection attempt, bounded by
        ``connect_timeout_ms``; each caller waits at most ``timeout_ms`` for it.
        """
        conn = self.connection(addr)
        if conn is not None:
            return conn
        if self._closed:
            raise RemotingConnectError(f"cannot connect to {addr}: the transport is closed")
        attempt = self._connecting.get(addr)
        if attempt is None:
            attempt = self.loop.create_task(self._connect(addr), name=f"rmqk-connect-{addr}")
            self._connecting[addr] = attempt
            attempt.add_done_callback(lambda t: self._connect_done(addr, t))
        wait_ms = self.connect_timeout_ms if timeout_ms is None else timeout_ms
        try:
            async with asyncio.timeout(max(wait_ms, 0) / 1000):
                return await asyncio.shield(attempt)
        except TimeoutError:
            raise RemotingConnectError(
                f"cannot connect to {addr}: no connection within {wait_ms} ms"
            ) from None
        except RemotingConnectError as exc:
            # Every waiter gets its own exception: a shared one would pile up tracebacks.
            raise RemotingConnectError(str(exc)) from exc.__cause__
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if attempt.cancelled() and me is not None and not me.cancelling():
                # close() stopped the attempt; this caller itself was not cancelled.
                raise RemotingConnectError(
                    f"cannot connect to {addr}: the transport is closed"
                ) from None
            raise

    def _connect_done(self, addr: str, attempt: asyncio.Task[Connection]) -> None:
        if self._connecting.get(addr) is attempt:
            del self._connecting[addr]
        if not attempt.cancelled():
            attempt.exception()  # waiters report it; retrieved so asyncio does not log it

    async def _connect(self, addr: str) -> Connection:
        host, port = split_address(addr)
        budget = self.connect_timeout_ms
        kwargs: dict[str, Any] = {}
        if self._ssl is not None:
            kwargs["ssl"] = self._ssl
            if self._tls_hostname is not None:
                kwargs["server_hostname"] = self._tls_hostname(host)
        try:
            async with asyncio.timeout(max(budget, 0) / 1000):
                _, protocol = await self.loop.create_connection(
                    lambda: Connection(addr, self), host, port, **kwargs
                )
        except TimeoutError:
            raise RemotingConnectError(
                f"cannot connect to {addr}: no connection within {budget} ms"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise RemotingConnectError(f"cannot connect to {addr}: {_reason(exc)}") from exc
        conn = protocol
        assert isinstance(conn, Connection)
        if self._closed:
            conn.close("the transport is closed")
            raise RemotingConnectError(f"cannot connect to {addr}: the transport is closed")
        if not conn.is_open:
            raise RemotingConnectError(f"connection to {addr} closed as it opened")
        self._conns[addr] = conn
        log.debug("connected to %s", addr)
        return conn

    def close_connection(self, addr: str, reason: str = "closed by the client") -> None:
        conn = self._conns.get(addr)
        if conn is not None:
            conn.close(reason)

    # -- calls

    async def request(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout_ms: int,
        *,
        close_on_timeout: bool | None = None,
    ) -> RemotingCommand:
        """Send and wait (invokeSync); connecting counts against ``timeout_ms``.

        ``close_on_timeout`` overrides ``close_socket_if_timeout`` for this call.
        """
        begin = self.loop.time()
        conn = await self.get(addr, timeout_ms)
        left = timeout_ms - int((self.loop.time() - begin) * 1000)
        if left <= 0:
            raise RemotingTimeoutError(
                f"request code {cmd.code} to {addr}: the {timeout_ms} ms timeout passed "
                "while connecting"
            )
        try:
            return await conn.request(cmd, timeout_ms, self.serialize_type, budget_ms=left)
        except RemotingTimeoutError:
            close = self.close_socket_if_timeout if close_on_timeout is None else close_on_timeout
            if close:
                # Java 4.9.8's default: a peer that misses a deadline may be a dead
                # socket that TCP has not noticed (no keepalive), so start afresh.
                conn.close(f"request code {cmd.code} timed out after {timeout_ms} ms")
            raise

    async def request_swept(
        self, addr: str, cmd: RemotingCommand, timeout_ms: int
    ) -> RemotingCommand:
        """Send and wait, leaving the deadline to the once-a-second sweep.

        For long polls: no timer per request, and a timeout (reported within a
        second of ``timeout_ms``) leaves the connection open for the other
        queues' polls on it, as Java's invokeAsync does.
        """
        conn = self._conns.get(addr)
        if conn is None or not conn.is_open:
            conn = await self.get(addr, timeout_ms)
        future = conn.request_async(cmd, timeout_ms, self.serialize_type)
        try:
            return await future
        finally:
            if not future.done() or future.cancelled():
                conn.withdraw(cmd, future)

    async def request_async(
        self, addr: str, cmd: RemotingCommand, timeout_ms: int
    ) -> asyncio.Future[RemotingCommand]:
        """Send now, answer later (invokeAsync): takes one of the async permits
        until the returned future is done."""
        await self._acquire(self._async_sem, timeout_ms, "invoke_async", cmd, addr)
        try:
            conn = await self.get(addr, timeout_ms)
            future = conn.request_async(cmd, timeout_ms, self.serialize_type)
        except BaseException:
            self._async_sem.release()
            raise
        future.add_done_callback(lambda _f: self._async_sem.release())
        return future

    async def oneway(self, addr: str, cmd: RemotingCommand, timeout_ms: int) -> None:
        """Send without a response (invokeOneway), holding a oneway permit while writing."""
        await self._acquire(self._oneway_sem, timeout_ms, "invoke_oneway", cmd, addr)
        try:
            conn = await self.get(addr, timeout_ms)
            await conn.send_oneway(cmd, self.serialize_type)
        finally:
            self._oneway_sem.release()

    async def _acquire(
        self, sem: asyncio.Semaphore, timeout_ms: int, what: str, cmd: RemotingCommand, addr: str
    ) -> None:
        if not sem.locked():
            await sem.acquire()
            return
        if timeout_ms <= 0:
            raise RemotingSendError(f"{what} to {addr}: too many requests in flight")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await sem.acquire()
        except TimeoutError:
            raise RemotingTimeoutError(
                f"{what} request code {cmd.code} to {addr}: no permit within {timeout_ms} ms "
                "(too many requests in flight)"
            ) from None

    # -- requests from peers

    def dispatch_request(self, conn: Connection, cmd: RemotingCommand, st: SerializeType) -> None:
        if self._on_request is None:
            log.warning("request code %d from %s dropped: no listener", cmd.code, conn.addr)
            return
        self._on_request(conn, cmd, st)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> None:
        """Run ``coro`` as a task the pool cancels when it closes."""
        if self._closed:
            coro.close()
            return
        task = self.loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("remoting task %s failed", task.get_name(), exc_info=task.exception())

    # -- timers

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    def sweep(self) -> None:
        """Time out expired requests and close idle connections (runs every second)."""
        now = self.loop.time()
        for conn in list(self._conns.values()):
            conn.expire(now)
            idle = now - conn.last_activity
            if not conn.pending and idle >= self.channel_max_idle_s:
                log.info("closing the connection to %s: idle for %.0f s", conn.addr, idle)
                conn.close(f"idle for {idle:.0f} s")

    async def close(self) -> None:
        """Close every connection (failing what is in flight) and stop the timers."""
        if self._closed:
            return
        self._closed = True
        self._sweeper.cancel()
        for conn in list(self._conns.values()):
            conn.close("the transport is closed")
        for attempt in list(self._connecting.values()):
            attempt.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sweeper
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # Let the transports run their close callbacks before the loop may end.
        await asyncio.sleep(0)

