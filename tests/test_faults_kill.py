"""kill -9 of a consumer process and of the broker process, each restarted.

Real subprocesses, killed with SIGKILL mid-consumption. Nothing acknowledged is
lost; a killed consumer's duplicates stay within its in-flight window. The
figures go to docs/reliability.md; bench/soak_kill.py runs the long version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_faults_support import broker_kill_scenario, consumer_kill_scenario

pytestmark = pytest.mark.timeout(180)


async def test_kill_9_consumer_mid_consumption_and_restart(tmp_path: Path) -> None:
    result = await consumer_kill_scenario(tmp_path, total=6000, kills=2, queues=4)
    print(result.summary())
    assert result.lost == 0, result.summary()
    assert result.distinct == result.total
    # Duplicates: what each killed consumer had consumed but not yet committed.
    assert result.duplicates <= result.duplicate_bound, result.summary()
    assert len(result.restart_to_first_s) == 2
    assert max(result.restart_to_first_s) < 30


async def test_kill_9_broker_mid_consumption_and_restart(tmp_path: Path) -> None:
    # Java's 30 s heartbeat: the restarted broker refuses pulls from consumers it has not
    # heard from, and the consumer re-registers at once rather than at its next heartbeat.
    result = await broker_kill_scenario(
        tmp_path, before=4000, after=1000, kills=1, queues=4, heartbeat_ms=30_000
    )
    print(result.summary())
    # The store recovered every acknowledged message ...
    assert result.acked_missing_after_restart == 0, result.summary()
    # ... and the consumer reconnected and consumed all of them, old and new.
    assert result.lost == 0, result.summary()
    assert result.distinct == result.produced == 5000
    # The consumer kept its own offsets across the outage, so it re-consumed nothing.
    assert result.duplicates == 0, result.summary()
    assert max(result.consume_resumed_s) < 10, result.summary()
