"""A fault-injecting TCP proxy for tests: asyncio, loopback only, bounded.

Put it between clients and a server, then change the network under them::

    async with FaultProxy(upstream="127.0.0.1:10911") as proxy:
        ... connect clients to proxy.addr ...
        proxy.latency = 0.05           # seconds added to every chunk, each direction
        proxy.bandwidth = 256 * 1024   # bytes per second, each direction of each connection
        proxy.reset_all()              # RST both sides of every live connection
        proxy.half_open()              # server side closed, client side left silent and open
        proxy.blackhole()              # nothing flows (live and new connections) ...
        proxy.heal()                   # ... until healed; also clears latency and bandwidth
        proxy.refuse = True            # new connections are reset as they arrive

With ``frames=True`` the proxy reads RocketMQ remoting frames instead of raw
chunks, so it can count and answer requests::

    proxy.request_count(RequestCode.SEND_MESSAGE_V2)   # requests seen going upstream
    proxy.answer(RequestCode.SEND_MESSAGE_V2, 13, "why")  # the proxy replies; never forwarded
    proxy.answer(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, body=b"{...}")  # with a body
    proxy.forward(RequestCode.SEND_MESSAGE_V2)         # forward that code again

Faults act on live connections at once, not only on new ones. "Half-open" is the
view of a client whose peer vanished without a FIN (a crashed host, a cut cable):
its socket stays open, writes vanish and nothing ever arrives, while the server
sees the connection end. A blackholed connection behaves the same from both ends
until it is healed, then carries on (what was sent meanwhile is lost, as TCP
would never lose it: this models a broken middlebox, and clients must cope).

Bounded: at most ``max_connections`` live pairs, reads of at most ``chunk`` bytes,
at most ``queue_chunks`` chunks queued per direction (the reader waits when the
queue is full, so a slow or throttled link pushes back instead of buffering),
and every task is cancelled by :meth:`stop`. Addresses must be loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
import time
from collections import Counter
from collections.abc import Mapping

from rmqk.wire.frame import decode_frame_typed, encode_frame
from rmqk.wire.protocol import RemotingCommand

__all__ = ["FaultProxy", "ProxyStats", "split_addr"]

_LOOPBACK_NAMES = ("localhost",)


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


def _require_loopback(host: str, what: str) -> None:
    if host in _LOOPBACK_NAMES:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"FaultProxy only works on loopback addresses; {what} is {host!r}")


def _set_rst_on_close(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER with a zero timeout turns close() into an RST (ECONNRESET at the peer).
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class ProxyStats:
    """Counters since the proxy started (not reset by faults)."""

    __slots__ = (
        "accepted",
        "bytes_down",
        "bytes_up",
        "dropped_bytes",
        "half_opened",
        "refused",
        "resets",
    )

    def __init__(self) -> None:
        self.accepted = 0
        self.refused = 0
        self.resets = 0
        self.half_opened = 0
        self.bytes_up = 0  # client -> server, delivered
        self.bytes_down = 0  # server -> client, delivered
        self.dropped_bytes = 0  # read while blackholed or half-open, never delivered

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"ProxyStats({fields})"


class _Pair:
    """One proxied connection: client socket, server socket, a pump each way."""

    def __init__(
        self,
        proxy: FaultProxy,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.client_reader = client_reader
        self.client_writer = client_writer
        self.server_reader: asyncio.StreamReader | None = None
        self.server_writer: asyncio.StreamWriter | None = None
        self.half_open = False
        self.closed = False
        self.tasks: list[asyncio.Task[None]] = []
        # Per direction (upstream?), so the upstream reader can queue an answer downstream.
        self.queues: dict[bool, asyncio.Queue[tuple[float, bytes] | None]] = {}

    async def run(self) -> None:
        proxy = self.proxy
        upstream = proxy.upstream
        if upstream is None:
            self.abort()
            return
        host, port = split_addr(upstream)
        try:
            async with asyncio.timeout(proxy.connect_timeout):
                self.server_reader, self.server_writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError):
            self.abort()
            return
        self.queues = {
            True: asyncio.Queue(proxy.queue_chunks),
            False: asyncio.Queue(proxy.queue_chunks),
        }
        up = asyncio.get_running_loop().create_task(
            self._pump(self.client_reader, self.server_writer, upstream=True)
        )
        down = asyncio.get_running_loop().create_task(
            self._pump(self.server_reader, self.client_writer, upstream=False)
        )
        self.tasks = [up, down]
        try:
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in self.tasks:
                task.cancel()
            for task in self.tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.half_open:
            # The client side stays up and silent: only the server side ended.
            await self._swallow_client()
        self.close()

    async def _swallow_client(self) -> None:
        """Read and drop what a half-open client sends, until it gives up or we stop."""
        proxy = self.proxy
        while not self.closed:
            try:
                data = await self.client_reader.read(proxy.chunk)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            proxy.stats.dropped_bytes += len(data)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        """Copy one direction through a bounded queue so latency keeps the byte order."""
        proxy = self.proxy
        queue = self.queues[upstream]

        async def read() -> bytes:
            if not proxy.frames:
                return await reader.read(proxy.chunk)
            try:
                head = await reader.readexactly(4)
                return head + await reader.readexactly(int.from_bytes(head, "big"))
            except asyncio.IncompleteReadError:
                return b""

        async def feed() -> None:
            try:
                while True:
                    data = await read()
                    if not data:
                        break
                    if self._dropping():
                        proxy.stats.dropped_bytes += len(data)
                        continue
                    due = time.monotonic() + proxy.latency
                    if upstream and proxy.frames:
                        answer = proxy._inspect_request(data)
                        if answer is not None:
                            if answer:
                                await self.queues[False].put((due, answer))
                            continue
                    await queue.put((due, data))
            except (ConnectionError, OSError):
                pass
            finally:
                await queue.put(None)

        feeder = asyncio.get_running_loop().create_task(feed())
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                due, data = item
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._dropping():
                    proxy.stats.dropped_bytes += len(data)
                    continue
                writer.write(data)
                await writer.drain()
                if upstream:
                    proxy.stats.bytes_up += len(data)
                else:
                    proxy.stats.bytes_down += len(data)
                bandwidth = proxy.bandwidth
                if bandwidth:
                    await asyncio.sleep(len(data) / bandwidth)
        except (ConnectionError, OSError):
            pass
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feeder

    def _dropping(self) -> bool:
        return self.half_open or self.proxy.blackholed

    # -- faults

    def abort(self) -> None:
        """RST both sides."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client_writer, self.server_writer):
            if writer is not None:
                _set_rst_on_close(writer)
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        for task in self.tasks:
            task.cancel()

    def make_half_open(self) -> None:
        """Reset the server side; leave the client side open, reading and discarding."""
        if self.closed or self.half_open:
            return
        self.half_open = True
        if self.server_writer is not None:
            _set_rst_on_close(self.server_writer)
            with contextlib.suppress(Exception):
                self.server_writer.transport.abort()

    def close(self) -> None:
        """Orderly close of both sides (FIN), as when one side ended the connection."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client_writer, self.server_writer):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """A TCP proxy from ``addr`` to ``upstream`` with switchable faults (see the module doc)."""

    def __init__(
        self,
        upstream: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk: int = 64 * 1024,
        queue_chunks: int = 64,
        max_connections: int = 256,
        connect_timeout: float = 5.0,
        frames: bool = False,
    ) -> None:
        _require_loopback(host, "the listening host")
        self.host = host
        self.port = port
        self._upstream: str | None = None
        self.upstream = upstream
        self.chunk = chunk
        self.queue_chunks = queue_chunks
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.latency = 0.0
        self.bandwidth: int | None = None
        self.blackholed = False
        self.refuse = False
        self.frames = frames
        self.requests: Counter[int] = Counter()
        self._answers: dict[int, tuple[int, str | None, dict[str, object], bytes]] = {}
        self.stats = ProxyStats()
        self._pairs: set[_Pair] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    # -- addresses

    @property
    def upstream(self) -> str | None:
        return self._upstream

    @upstream.setter
    def upstream(self, addr: str | None) -> None:
        if addr is not None:
            host, _ = split_addr(addr)
            _require_loopback(host, "the upstream host")
        self._upstream = addr

    @property
    def addr(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"{self.host}:{self.port}"

    @property
    def live_connections(self) -> int:
        return sum(1 for p in self._pairs if not p.closed)

    # -- lifecycle

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for pair in list(self._pairs):
            pair.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        pair = _Pair(self, reader, writer)
        if self.refuse or self.live_connections >= self.max_connections:
            self.stats.refused += 1
            pair.abort()
            return
        self._pairs.add(pair)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await pair.run()
        finally:
            self._pairs.discard(pair)
            self._tasks.discard(task)

    # -- faults

    def reset_all(self) -> int:
        """RST both sides of every live connection; returns how many."""
        pairs = [p for p in self._pairs if not p.closed]
        for pair in pairs:
            pair.abort()
        self.stats.resets += len(pairs)
        return len(pairs)

    def half_open(self) -> int:
        """Make every live connection half-open; returns how many."""
        pairs = [p for p in self._pairs if not p.closed and not p.half_open]
        for pair in pairs:
            pair.make_half_open()
        self.stats.half_opened += len(pairs)
        return len(pairs)

    def blackhole(self, on: bool = True) -> None:
        """Swallow every byte in both directions, on live and new connections."""
        self.blackholed = on

    def heal(self) -> None:
        """No more faults: no blackhole, no refusal, no latency, no bandwidth cap."""
        self.blackholed = False
        self.refuse = False
        self.latency = 0.0
        self.bandwidth = None

    # -- frames (``frames=True``)

    def request_count(self, code: int) -> int:
        """How many requests with ``code`` came from clients (answered ones included)."""
        return self.requests[int(code)]

    def answer(
        self,
        code: int,
        response_code: int,
        remark: str | None = None,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
    ) -> None:
        """Answer requests with ``code`` here: ``response_code``, ``remark``, header
        ``fields`` and ``body``."""
        if not self.frames:
            raise RuntimeError("answer() needs a proxy made with frames=True")
        self._answers[int(code)] = (int(response_code), remark, dict(fields or {}), body)

    def forward(self, code: int) -> None:
        """Forward requests with ``code`` to the server again."""
        self._answers.pop(int(code), None)

    def _inspect_request(self, frame: bytes) -> bytes | None:
        """Count a client's request; the bytes of the proxy's answer, b"" to drop, None to pass."""
        command, serialize_type = decode_frame_typed(memoryview(frame)[4:])
        if command.is_response:
            return None
        self.requests[command.code] += 1
        rule = self._answers.get(command.code)
        if rule is None:
            return None
        if command.is_oneway:
            return b""
        response = RemotingCommand.response_to(command, rule[0], rule[1], rule[2], rule[3])
        return encode_frame(response, serialize_type)
