"""Network faults between consumers and the broker, through the fault proxy.

Connection resets, half-open connections, a blackhole and a slow link: in-flight
calls fail (at once when the connection breaks, at their timeout when it goes
silent), are retried on a new connection, pulls resume, nothing is lost. The
figures go to docs/reliability.md; bench/soak_network.py runs the long version.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from engine_support import admin_transport, create_topic
from faultproxy import FaultProxy
from test_faults_support import ProxiedBroker, network_scenario

from rmqk.model import MessageQueue
from rmqk.model.errors import RemotingConnectError, RemotingTimeoutError
from rmqk.spi.transport import PullMessageRequest
from rmqk.wire.protocol import PullSysFlag

pytestmark = pytest.mark.timeout(150)

QUEUES = 4
# Per fault and queue, what can be consumed twice: the cached span (16 + 1) and a batch (8).
WINDOW = QUEUES * (16 + 1 + 8)


@pytest.mark.parametrize(
    ("kind", "rounds", "fault_s", "heartbeat_ms", "resume_limit_s"),
    [
        # A reset fails the pull at once; it is retried after pull_time_delay_mills_when_exception
        # (1 s). The broker forgot the consumer with its connection and refuses the retry, so
        # the consumer re-registers at once instead of at its next heartbeat: Java's 30 s
        # heartbeat here, and resuming must not wait for it.
        ("reset", 2, 0.0, 30_000, 10.0),
        # Silence is noticed when a heartbeat (every 1 s here) misses its 3 s timeout.
        ("half_open", 1, 0.0, 1000, 20.0),
        ("blackhole", 1, 2.0, 1000, 20.0),
        ("slow", 1, 1.5, 1000, 10.0),
    ],
)
async def test_consumption_survives_network_fault(
    tmp_path: Path,
    kind: str,
    rounds: int,
    fault_s: float,
    heartbeat_ms: int,
    resume_limit_s: float,
) -> None:
    result = await network_scenario(
        tmp_path,
        kind,
        total=2500,
        rounds=rounds,
        fault_s=fault_s,
        gap_s=0.5,
        queues=QUEUES,
        heartbeat_ms=heartbeat_ms,
    )
    print(result.summary())
    assert result.lost == 0, result.summary()
    assert result.distinct == result.total
    assert result.duplicates <= rounds * WINDOW, result.summary()
    assert len(result.resume_s) == rounds
    assert result.max_resume_s < resume_limit_s, result.summary()
    assert result.longest_stall_s < resume_limit_s, result.summary()


async def test_in_flight_calls_fail_and_the_next_call_reconnects(tmp_path: Path) -> None:
    """A held pull fails at once on a reset and at its timeout on a half-open connection."""
    async with FaultProxy() as proxy:
        broker = ProxiedBroker(tmp_path / "broker", proxy, namesrv_port=0, broker_port=0)
        async with broker:
            await create_topic(broker, "Held", 1)
            transport = await admin_transport(broker.namesrv_addr)
            try:
                mq = MessageQueue("Held", broker.broker_name, 0)

                def held_pull(timeout_ms: int) -> asyncio.Task[object]:
                    # An empty queue: the broker holds the pull for up to 15 s.
                    request = PullMessageRequest(
                        consumer_group="g-held",
                        topic=mq.topic,
                        queue_id=0,
                        queue_offset=0,
                        max_msg_nums=32,
                        sys_flag=int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION),
                        commit_offset=0,
                        suspend_timeout_millis=15_000,
                        subscription="*",
                        sub_version=0,
                        broker_name=broker.broker_name,
                    )
                    coro = transport.pull_message(broker.broker_addr, request, timeout_ms)
                    return asyncio.get_running_loop().create_task(coro)

                # Reset: the held pull fails with a connection error, long before its timeout.
                pull = held_pull(20_000)
                await asyncio.sleep(0.5)
                assert not pull.done()
                began = time.monotonic()
                assert proxy.reset_all() == 1
                with pytest.raises(RemotingConnectError):
                    await asyncio.wait_for(pull, 5)
                assert time.monotonic() - began < 2.0

                # The next call opens a new connection through the proxy.
                assert await transport.get_max_offset(broker.broker_addr, mq, 3000) == 0

                # Half-open: nothing ever answers, so the pull fails at its own timeout.
                pull = held_pull(1500)
                await asyncio.sleep(0.3)
                assert proxy.half_open() == 1
                began = time.monotonic()
                with pytest.raises(RemotingTimeoutError):
                    await asyncio.wait_for(pull, 10)
                assert 0.5 < time.monotonic() - began < 5.0
                # A pull is an async call, whose timeout leaves the socket open (as in Java);
                # the next sync call times out too and closes it (clientCloseSocketIfTimeout),
                # and the call after that gets a fresh connection.
                with pytest.raises(RemotingTimeoutError):
                    await transport.get_max_offset(broker.broker_addr, mq, 1000)
                accepted = proxy.stats.accepted
                assert await transport.get_max_offset(broker.broker_addr, mq, 3000) == 0
                assert proxy.stats.accepted == accepted + 1

                # Blackhole: calls time out instead of hanging (and close the connection);
                # after healing the next call works on a new one.
                proxy.blackhole()
                with pytest.raises(RemotingTimeoutError):
                    await transport.get_max_offset(broker.broker_addr, mq, 1000)
                proxy.heal()
                assert await transport.get_max_offset(broker.broker_addr, mq, 3000) == 0
            finally:
                await transport.close()
