"""The tcp transport's connections over real loopback TCP: matching, timeouts, drops."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from test_transport_support import PeerConnection, ScriptedServer, config, free_port

from rmqk.model.errors import RemotingConnectError, RemotingSendError, RemotingTimeoutError
from rmqk.plugins.remoting import create_tcp_transport
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.transport import TlsConfig
from rmqk.wire.frame import SerializeType
from rmqk.wire.protocol import RPC_ONEWAY, RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(30)


def echo(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
    return RemotingCommand.response_to(cmd, fields={"n": cmd.field("n")})


async def test_request_response_round_trip() -> None:
    async with ScriptedServer(echo) as server:
        transport = create_tcp_transport(config(server.addr))
        try:
            request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"n": 7})
            response = await transport.invoke(server.addr, request, 2000)
            assert response.is_response
            assert response.opaque == request.opaque
            assert response.ext_fields == {"n": "7"}
            assert server.requests[0].ext_fields == {"n": "7"}
            assert server.connections[0].serialize_types == [SerializeType.JSON]
        finally:
            await transport.close()


async def test_many_in_flight_calls_are_matched_by_opaque() -> None:
    async def shuffled(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        await asyncio.sleep(random.random() * 0.2)  # answers leave in a different order
        return echo(cmd, conn)

    async with ScriptedServer(shuffled) as server:
        transport = TcpTransport(config(server.addr))
        try:
            requests = [
                RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"n": i}) for i in range(300)
            ]
            responses = await asyncio.gather(
                *(transport.invoke(server.addr, r, 10_000) for r in requests)
            )
            assert [r.field("n") for r in responses] == [str(i) for i in range(300)]
            assert len(server.connections) == 1  # one connection per address, shared
            assert transport.pool.connection(server.addr) is not None
            assert transport.pool.connection(server.addr).pending == {}  # type: ignore[union-attr]
        finally:
            await transport.close()


async def test_sync_timeout_fails_once_and_closes_the_connection() -> None:
    async with ScriptedServer(lambda cmd, conn: None) as server:
        transport = TcpTransport(config(server.addr))
        try:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            with pytest.raises(RemotingTimeoutError, match="within 300 ms"):
                await transport.invoke(server.addr, RemotingCommand.request(30), 300)
            assert 0.25 < loop.time() - begin < 3
            # Java 4.9.8's clientCloseSocketIfTimeout=true: the socket may be dead.
            assert transport.pool.connection(server.addr) is None
            await asyncio.wait_for(server.connections[0].closed.wait(), 5)
        finally:
            await transport.close()


async def test_sync_timeout_keeps_the_connection_when_configured() -> None:
    async with ScriptedServer(lambda cmd, conn: None) as server:
        options = {"client_close_socket_if_timeout": False}
        transport = TcpTransport(config(server.addr, options=options))
        try:
            with pytest.raises(RemotingTimeoutError):
                await transport.invoke(server.addr, RemotingCommand.request(30), 300)
            conn = transport.pool.connection(server.addr)
            assert conn is not None and conn.pending == {}
        finally:
            await transport.close()


async def test_async_timeout_by_the_sweep_exactly_once_and_late_answer_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with ScriptedServer(lambda cmd, conn: None) as server:
        transport = TcpTransport(config(server.addr))
        try:
            request = RemotingCommand.request(30)
            future = await transport.invoke_async(server.addr, request, 200)
            outcomes: list[BaseException | None] = []
            future.add_done_callback(lambda f: outcomes.append(f.exception()))
            with pytest.raises(RemotingTimeoutError, match="within 200 ms"):
                await asyncio.wait_for(future, 5)
            await server.wait_requests(1)
            # The answer arrives after the sweep failed the request: it is dropped.
            with caplog.at_level(logging.WARNING, logger="rmqk.remoting"):
                server.connections[0].send(RemotingCommand.response_to(server.requests[0]))
                await asyncio.sleep(0.3)
            assert len(outcomes) == 1 and isinstance(outcomes[0], RemotingTimeoutError)
            assert "matches no request" in caplog.text
        finally:
            await transport.close()


async def test_answer_to_a_cancelled_call_is_dropped_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pull cancelled by a rebalance or a stop is withdrawn; the broker's answer to
    it still comes (a long poll ends later) and is expected, so it logs no WARNING:
    a quiet run stays quiet (tests/test_quiet_run.py)."""
    async with ScriptedServer(lambda cmd, conn: None) as server:
        transport = TcpTransport(config(server.addr))
        try:
            for call in ("invoke_swept", "invoke"):
                task = asyncio.ensure_future(
                    getattr(transport, call)(server.addr, RemotingCommand.request(11), 10_000)
                )
                count = len(server.requests)
                await server.wait_requests(count + 1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                conn = transport.pool.connection(server.addr)
                assert conn is not None and conn.pending == {}
                with caplog.at_level(logging.DEBUG, logger="rmqk.remoting"):
                    server.connections[0].send(RemotingCommand.response_to(server.requests[-1]))
                    await asyncio.sleep(0.3)
                assert "matches no request" not in caplog.text, call
                assert "withdrawn request" in caplog.text, call
                caplog.clear()
            # The same opaque answered twice: the second answer is unexpected again.
            with caplog.at_level(logging.WARNING, logger="rmqk.remoting"):
                server.connections[0].send(RemotingCommand.response_to(server.requests[-1]))
                await asyncio.sleep(0.3)
            assert "matches no request" in caplog.text
        finally:
            await transport.close()


async def test_async_permits_are_released_when_the_call_completes() -> None:
    release = asyncio.Event()

    async def gated(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        await release.wait()
        return RemotingCommand.response_to(cmd)

    async with ScriptedServer(gated) as server:
        transport = TcpTransport(config(server.addr, async_permits=1))
        try:
            first = await transport.invoke_async(server.addr, RemotingCommand.request(30), 5000)
            with pytest.raises(RemotingTimeoutError, match="no permit"):
                await transport.invoke_async(server.addr, RemotingCommand.request(30), 300)
            release.set()
            assert (await first).code == ResponseCode.SUCCESS
            second = await transport.invoke_async(server.addr, RemotingCommand.request(30), 2000)
            assert (await second).code == ResponseCode.SUCCESS
        finally:
            await transport.close()


async def test_server_drop_fails_in_flight_at_once_then_reconnects() -> None:
    dropping = True

    async def handler(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand | None:
        if dropping:
            if len(conn.server.requests) >= 5:
                conn.close()
            return None
        return RemotingCommand.response_to(cmd)

    async with ScriptedServer(handler) as server:
        transport = TcpTransport(config(server.addr))
        try:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            results = await asyncio.gather(
                *(
                    transport.invoke(server.addr, RemotingCommand.request(30), 20_000)
                    for _ in range(5)
                ),
                return_exceptions=True,
            )
            assert all(isinstance(r, RemotingConnectError) for r in results), results
            assert loop.time() - begin < 10  # not the 20 s timeout
            dropping = False
            response = await transport.invoke(server.addr, RemotingCommand.request(30), 5000)
            assert response.code == ResponseCode.SUCCESS
            assert len(server.connections) == 2
        finally:
            await transport.close()


async def test_malformed_frame_closes_only_that_connection() -> None:
    gate = asyncio.Event()

    async def good(cmd: RemotingCommand, conn: PeerConnection) -> RemotingCommand:
        await gate.wait()
        return RemotingCommand.response_to(cmd)

    def bad(cmd: RemotingCommand, conn: PeerConnection) -> None:
        if len(conn.server.requests) == 2:
            conn.send_raw(b"\xff\xff\xff\xff garbage")

    async with ScriptedServer(good) as healthy, ScriptedServer(bad) as broken:
        transport = TcpTransport(config(healthy.addr))
        try:
            on_healthy = asyncio.ensure_future(
                transport.invoke(healthy.addr, RemotingCommand.request(30), 10_000)
            )
            on_broken = [
                asyncio.ensure_future(
                    transport.invoke(broken.addr, RemotingCommand.request(30), 10_000)
                )
                for _ in range(2)
            ]
            for fut in on_broken:
                with pytest.raises(RemotingConnectError, match="malformed frame"):
                    await asyncio.wait_for(fut, 5)
            assert transport.pool.connection(broken.addr) is None
            assert not on_healthy.done()
            gate.set()
            assert (await on_healthy).code == ResponseCode.SUCCESS
            # The next call to the broken peer opens a new connection.
            broken.handler = lambda cmd, conn: RemotingCommand.response_to(cmd)
            response = await transport.invoke(broken.addr, RemotingCommand.request(30), 5000)
            assert response.code == ResponseCode.SUCCESS
            assert len(broken.connections) == 2
            assert len(healthy.connections) == 1
        finally:
            await transport.close()


async def test_oneway_sets_the_flag_and_waits_for_nothing() -> None:
    async with ScriptedServer(lambda cmd, conn: None) as server:
        transport = TcpTransport(config(server.addr, oneway_permits=1))
        try:
            for i in range(3):  # a single permit, so each send must give it back
                await transport.invoke_oneway(
                    server.addr,
                    RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"i": i}),
                )
            await server.wait_requests(3)
            assert [r.field("i") for r in server.requests] == ["0", "1", "2"]
            assert all(r.flag & RPC_ONEWAY for r in server.requests)
        finally:
            await transport.close()


async def test_connect_refused_is_a_connect_error() -> None:
    addr = f"127.0.0.1:{free_port()}"
    transport = TcpTransport(config(addr, connect_timeout_ms=1000))
    try:
        with pytest.raises(RemotingConnectError, match=addr):
            await transport.invoke(addr, RemotingCommand.request(30), 2000)
    finally:
        await transport.close()


async def test_bad_address_is_a_connect_error() -> None:
    transport = TcpTransport(config("nowhere"))
    try:
        with pytest.raises(RemotingConnectError, match="not host:port"):
            await transport.invoke("nowhere", RemotingCommand.request(30), 2000)
    finally:
        await transport.close()


async def test_idle_connection_is_closed_and_reopened() -> None:
    async with ScriptedServer() as server:
        transport = TcpTransport(config(server.addr, channel_max_idle_s=1))
        try:
            await transport.invoke(server.addr, RemotingCommand.request(30), 2000)
            assert transport.pool.connection(server.addr) is not None
            async with asyncio.timeout(6):
                while transport.pool.connection(server.addr) is not None:
                    await asyncio.sleep(0.1)
            await asyncio.wait_for(server.connections[0].closed.wait(), 5)
            await transport.invoke(server.addr, RemotingCommand.request(30), 2000)
            assert len(server.connections) == 2
        finally:
            await transport.close()


async def test_rocketmq_binary_header_when_configured() -> None:
    async with ScriptedServer(echo) as server:
        transport = TcpTransport(config(server.addr, serialize_type="ROCKETMQ"))
        try:
            response = await transport.invoke(
                server.addr, RemotingCommand.request(30, {"n": "x"}), 2000
            )
            assert response.field("n") == "x"
            assert server.connections[0].serialize_types == [SerializeType.ROCKETMQ]
        finally:
            await transport.close()


async def test_close_fails_in_flight_and_refuses_new_calls() -> None:
    async with ScriptedServer(lambda cmd, conn: None) as server:
        transport = TcpTransport(config(server.addr))
        pending = asyncio.ensure_future(
            transport.invoke(server.addr, RemotingCommand.request(30), 20_000)
        )
        await server.wait_requests(1)
        await transport.close()
        with pytest.raises(RemotingConnectError, match="closed"):
            await asyncio.wait_for(pending, 5)
        with pytest.raises(RemotingConnectError, match="closed"):
            await transport.invoke(server.addr, RemotingCommand.request(30), 1000)


async def test_oversized_request_is_refused_without_closing() -> None:
    async with ScriptedServer() as server:
        transport = TcpTransport(config(server.addr))
        try:
            await transport.invoke(server.addr, RemotingCommand.request(30), 2000)
            huge = RemotingCommand.request(30, body=b"x" * (16 * 1024 * 1024))
            with pytest.raises(RemotingSendError, match="frame limit"):
                await transport.invoke(server.addr, huge, 2000)
            await transport.invoke(server.addr, RemotingCommand.request(30), 2000)
            assert len(server.connections) == 1
        finally:
            await transport.close()


class SilentListener:
    """Accepts TCP connections and never says a word: a TLS handshake to it hangs."""

    def __init__(self) -> None:
        self.accepted = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._writers.append(writer)

        self._server = await asyncio.start_server(accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._writers:
            writer.close()
        self._server.close()


async def test_connect_timeout_and_one_shared_attempt() -> None:
    listener = SilentListener()
    async with listener as addr:
        tls = TlsConfig(enabled=True, verify=False)
        transport = TcpTransport(config(addr, tls=tls, connect_timeout_ms=400))
        try:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            results = await asyncio.gather(
                *(transport.invoke(addr, RemotingCommand.request(30), 5000) for _ in range(5)),
                return_exceptions=True,
            )
            assert all(isinstance(r, RemotingConnectError) for r in results), results
            assert "no connection within 400 ms" in str(results[0])
            assert loop.time() - begin < 4  # one 400 ms attempt, not five in a row
            assert listener.accepted == 1
        finally:
            await transport.close()


async def test_close_while_connecting() -> None:
    async with SilentListener() as addr:
        tls = TlsConfig(enabled=True, verify=False)
        transport = TcpTransport(config(addr, tls=tls, connect_timeout_ms=20_000))
        call = asyncio.ensure_future(transport.invoke(addr, RemotingCommand.request(30), 20_000))
        await asyncio.sleep(0.3)
        await transport.close()
        with pytest.raises(RemotingConnectError, match="closed"):
            await asyncio.wait_for(call, 5)
