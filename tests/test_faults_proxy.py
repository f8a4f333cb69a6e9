"""The fault proxy itself: each fault does what the fault scenarios rely on."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest
from faultproxy import FaultProxy, split_addr

pytestmark = pytest.mark.timeout(60)


class EchoServer:
    """Echoes every byte; records how each connection ended."""

    def __init__(self) -> None:
        self.endings: list[str] = []
        self._server: asyncio.Server | None = None
        self.addr = ""

    async def start(self) -> EchoServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            self.endings.append("eof")
        except ConnectionResetError:
            self.endings.append("reset")
        except OSError as exc:
            self.endings.append(type(exc).__name__)
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = await EchoServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def proxy(echo: EchoServer) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(echo.addr) as p:
        yield p


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*split_addr(proxy.addr))


async def round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, timeout: float = 10
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), timeout)


async def test_passes_bytes_both_ways_intact(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    payload = os.urandom(300_000)
    assert await round_trip(reader, writer, payload) == payload
    assert proxy.stats.bytes_up == proxy.stats.bytes_down == len(payload)
    writer.close()


async def test_latency_delays_each_direction(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await round_trip(reader, writer, b"warm-up")
    proxy.latency = 0.2
    begin = time.monotonic()
    assert await round_trip(reader, writer, b"ping") == b"ping"
    assert time.monotonic() - begin >= 0.38  # 0.2 s out, 0.2 s back
    writer.close()


async def test_bandwidth_cap_slows_a_bulk_transfer(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    proxy.bandwidth = 400_000
    proxy.chunk = 16_384
    payload = os.urandom(200_000)
    begin = time.monotonic()
    assert await round_trip(reader, writer, payload, timeout=20) == payload
    # 200 kB each way at 400 kB/s, the two directions overlapping: at least ~0.5 s.
    assert time.monotonic() - begin >= 0.45
    writer.close()


async def test_reset_all_resets_both_sides(proxy: FaultProxy, echo: EchoServer) -> None:
    reader, writer = await connect(proxy)
    await round_trip(reader, writer, b"hello")
    assert proxy.reset_all() == 1
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), 5)
    for _ in range(100):
        if echo.endings:
            break
        await asyncio.sleep(0.02)
    assert echo.endings == ["reset"]
    # New connections work again at once.
    reader, writer = await connect(proxy)
    assert await round_trip(reader, writer, b"again") == b"again"
    writer.close()


async def test_half_open_client_hears_nothing_while_the_server_sees_the_end(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    reader, writer = await connect(proxy)
    await round_trip(reader, writer, b"hello")
    assert proxy.half_open() == 1
    for _ in range(100):
        if echo.endings:
            break
        await asyncio.sleep(0.02)
    assert echo.endings == ["reset"]
    writer.write(b"into the void")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), 1.0)
    assert not reader.at_eof()
    assert proxy.stats.dropped_bytes >= len(b"into the void")
    writer.close()


async def test_blackhole_swallows_until_healed(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await round_trip(reader, writer, b"before")
    proxy.blackhole()
    writer.write(b"lost")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), 0.5)
    # A new connection is accepted, and is just as silent.
    reader2, writer2 = await connect(proxy)
    writer2.write(b"x")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader2.read(1), 0.5)
    proxy.heal()
    assert await round_trip(reader, writer, b"after") == b"after"
    assert await round_trip(reader2, writer2, b"y") == b"y"
    writer.close()
    writer2.close()


async def test_refuse_resets_new_connections(proxy: FaultProxy) -> None:
    proxy.refuse = True
    reader, writer = await connect(proxy)
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        writer.write(b"x")
        await writer.drain()
        await asyncio.wait_for(reader.readexactly(1), 5)
    assert proxy.stats.refused == 1
    proxy.heal()
    reader, writer = await connect(proxy)
    assert await round_trip(reader, writer, b"ok") == b"ok"
    writer.close()


async def test_stop_ends_every_connection_and_task(echo: EchoServer) -> None:
    proxy = await FaultProxy(echo.addr).start()
    conns = [await connect(proxy) for _ in range(5)]
    for reader, writer in conns:
        await round_trip(reader, writer, b"x")
    proxy.half_open()
    await proxy.stop()
    for reader, _ in conns:
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 5)
    assert proxy.live_connections == 0


def test_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("10.1.2.3:80")
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("127.0.0.1:80", host="0.0.0.0")
    assert FaultProxy("[::1]:80").upstream == "[::1]:80"
