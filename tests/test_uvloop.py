"""rmqk on uvloop: the clients and the embedded broker over real TCP on its event loop.

Applications served by uvicorn run on uvloop when it is installed, and an rmqk
consumer started there shares that loop. uvloop's transports implement asyncio's
transport methods without deriving from ``asyncio.Transport``, so nothing in rmqk
may check a transport's class. Each scenario runs whole on a uvloop loop
(``uvloop.run``), the broker started on the same loop or, as a Java broker would
be, on the standard loop in a thread; counts are checked end to end.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from engine_support import committed_offsets, create_topic, max_offsets, produce, wait_for
from test_acl_tls import pki, server_tls  # noqa: F401  (pki is a fixture)

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.model import ConsumeStatus
from rmqk.model.message import MessageExt
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.remoting.client import TcpTransport
from rmqk.spi.transport import TlsConfig, TransportConfig

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.timeout(120)


def on_uvloop(scenario: Callable[[], Awaitable[None]]) -> None:
    async def checked() -> None:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        await scenario()

    uvloop.run(checked())


def test_push_consumer_exactly_once_with_retries(tmp_path: Path) -> None:
    total = 20_000

    async def scenario() -> None:
        async with EmbeddedBroker(
            tmp_path / "b", namesrv_port=0, broker_port=0, delay_levels="100ms 200ms"
        ) as broker:
            await create_topic(broker, "Orders", 4)
            await produce(broker.namesrv_addr, "Orders", (b"m%d" % i for i in range(total)))
            seen: Counter[bytes] = Counter()
            retried: set[bytes] = set()

            def handle(msgs: list[MessageExt]) -> ConsumeStatus:
                # Every 1,000th message once back through %RETRY%: the send-back path.
                for m in msgs:
                    if int(m.body[1:]) % 1000 == 0 and m.body not in retried:
                        retried.add(m.body)
                        return ConsumeStatus.RECONSUME_LATER
                seen.update(m.body for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            c = AsyncPushConsumer(
                "g-uv",
                namesrv_addr=broker.namesrv_addr,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                consume_message_batch_max_size=1,
            )
            c.subscribe("Orders", "*")
            c.register_listener(handle)
            await c.start()
            try:
                await wait_for(lambda: len(seen) >= total, 90, f"{total} messages")
                await asyncio.sleep(0.3)
            finally:
                await c.shutdown()
            assert len(seen) == total
            assert max(seen.values()) == 1
            assert len(retried) == total // 1000
            committed = await committed_offsets(
                broker.namesrv_addr, broker.broker_addr, "g-uv", "Orders", 4
            )
            assert committed == await max_offsets(
                broker.namesrv_addr, broker.broker_addr, "Orders", 4
            )

    on_uvloop(scenario)


def test_consumer_on_uvloop_against_a_broker_on_the_standard_loop(tmp_path: Path) -> None:
    handle = EmbeddedBroker.run_in_thread(tmp_path / "b", namesrv_port=0, broker_port=0)
    try:

        async def scenario() -> None:
            await create_topic(handle, "Orders", 2)
            await produce(handle.namesrv_addr, "Orders", (b"%d" % i for i in range(2_000)))
            got: list[bytes] = []
            c = AsyncPushConsumer(
                "g-thread",
                namesrv_addr=handle.namesrv_addr,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            c.subscribe("Orders")
            c.register_listener(lambda msgs: got.extend(m.body for m in msgs))
            await c.start()
            try:
                await wait_for(lambda: len(got) >= 2_000, 60, "2,000 messages")
            finally:
                await c.shutdown()
            assert sorted(got) == sorted(b"%d" % i for i in range(2_000))

        on_uvloop(scenario)
    finally:
        handle.stop()


def test_lite_pull_consumer(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EmbeddedBroker(tmp_path / "b", namesrv_port=0, broker_port=0) as broker:
            await create_topic(broker, "Lite", 4)
            await produce(broker.namesrv_addr, "Lite", (b"%d" % i for i in range(3_000)))
            c = AsyncLitePullConsumer(
                "g-lite",
                namesrv_addr=broker.namesrv_addr,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            c.subscribe("Lite", "*")
            await c.start()
            got: list[bytes] = []
            try:
                while len(got) < 3_000:
                    batch = await c.poll(5_000)
                    assert batch, f"poll came back empty after {len(got)} messages"
                    got.extend(m.body for m in batch)
            finally:
                await c.shutdown()
            assert sorted(got) == sorted(b"%d" % i for i in range(3_000))

    on_uvloop(scenario)


def test_tls(pki: Path, tmp_path: Path) -> None:  # noqa: F811
    async def scenario() -> None:
        async with EmbeddedBroker(
            tmp_path / "b", namesrv_port=0, broker_port=0, tls=server_tls(pki)
        ) as broker:
            transport = TcpTransport(
                TransportConfig(
                    namesrv_addrs=(broker.namesrv_addr,),
                    client_id="127.0.0.1@uv-tls",
                    tls=TlsConfig(enabled=True, ca_file=str(pki / "ca.crt")),
                )
            )
            try:
                await transport.create_topic(broker.broker_addr, "Tls", 1, 1, timeout_ms=3000)
                route: Any = await transport.get_route("Tls")
                assert route is not None
            finally:
                await transport.close()

    on_uvloop(scenario)
