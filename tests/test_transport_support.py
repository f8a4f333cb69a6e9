"""A scripted loopback peer for the tcp transport tests, and checks of the peer itself.

:class:`ScriptedServer` is a real asyncio TCP server on 127.0.0.1 speaking remoting
frames: it records every request, answers with what its handler returns, and can
push requests to the client or break a connection on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rmqk.spi.transport import TransportConfig
from rmqk.wire.frame import FrameDecoder, SerializeType, encode_frame
from rmqk.wire.protocol import RemotingCommand, ResponseCode

Handler = Callable[
    [RemotingCommand, "PeerConnection"],
    RemotingCommand | Awaitable[RemotingCommand | None] | None,
]


class PeerConnection:
    """The server's side of one accepted connection."""

    def __init__(
        self, server: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.responses: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.serialize_types: list[SerializeType] = []
        self.closed = asyncio.Event()
        self.reader_task: asyncio.Task[Any] | None = None

    def send(self, cmd: RemotingCommand, st: SerializeType = SerializeType.JSON) -> None:
        self.writer.write(encode_frame(cmd, st))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.writer.close()

    async def push(self, request: RemotingCommand, timeout: float = 5) -> RemotingCommand:
        """Send a request to the client and wait for its answer."""
        self.send(request)
        return await asyncio.wait_for(self.responses.get(), timeout)


class ScriptedServer:
    def __init__(self, handler: Handler | None = None, ssl_context: ssl.SSLContext | None = None):
        self.handler = handler
        self.ssl_context = ssl_context
        self.requests: list[RemotingCommand] = []
        self.connections: list[PeerConnection] = []
        self.request_arrived = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> ScriptedServer:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", 0, ssl=self.ssl_context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        for conn in self.connections:
            conn.writer.close()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Let each connection's read loop see its end, so none is left to be cancelled.
        readers = [c.reader_task for c in self.connections if c.reader_task is not None]
        if readers:
            await asyncio.wait(readers, timeout=2)

    async def __aenter__(self) -> ScriptedServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def requests_with(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.requests if r.code == code]

    async def wait_requests(self, count: int, timeout: float = 5) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.request_arrived.clear()
                await self.request_arrived.wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = PeerConnection(self, reader, writer)
        conn.reader_task = asyncio.current_task()
        self.connections.append(conn)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed_typed(data):
                    cmd = frame.command
                    if cmd.is_response:
                        conn.responses.put_nowait(cmd)
                        continue
                    conn.serialize_types.append(frame.serialize_type)
                    self.requests.append(cmd)
                    self.request_arrived.set()
                    task = asyncio.get_running_loop().create_task(self._answer(conn, cmd))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            conn.closed.set()
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, conn: PeerConnection, cmd: RemotingCommand) -> None:
        if self.handler is None:
            response: RemotingCommand | None = RemotingCommand.response_to(cmd)
        else:
            result = self.handler(cmd, conn)
            response = await result if inspect.isawaitable(result) else result
        if response is not None and not cmd.is_oneway and not conn.writer.is_closing():
            conn.send(response)


def config(*addrs: str, **kwargs: Any) -> TransportConfig:
    return TransportConfig(namesrv_addrs=addrs, **kwargs)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- checks of the test peer itself, so a transport test failure is not the peer's


@pytest.mark.timeout(10)
async def test_scripted_server_answers_and_records() -> None:
    async with ScriptedServer() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        request = RemotingCommand.request(14, {"topic": "t"})
        writer.write(encode_frame(request))
        head = await reader.readexactly(4)
        frame = await reader.readexactly(int.from_bytes(head, "big"))
        (answer,) = FrameDecoder().feed(head + frame)
        assert answer.is_response and answer.opaque == request.opaque
        assert answer.code == ResponseCode.SUCCESS
        assert server.requests[0].ext_fields == {"topic": "t"}
        writer.close()
