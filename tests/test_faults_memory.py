"""A slow listener facing a large backlog: the consumer's resident memory stays bounded.

The CI version has a 50,000-message backlog (50 MB of bodies); bench/soak_memory.py
runs it with a million. The ceiling is the figure docs/reliability.md states.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_faults_support import memory_scenario

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status"),
]

# Resident memory of the consumer process, start-up included (about 35 MB of it).
RSS_CEILING_MB = 80.0


async def test_slow_listener_with_a_backlog_keeps_memory_under_the_ceiling(
    tmp_path: Path,
) -> None:
    result = await memory_scenario(
        tmp_path, backlog=50_000, size=1024, slow_s=4.0, ceiling_mb=RSS_CEILING_MB
    )
    print(result.summary())
    assert result.consumed_while_slow < result.backlog // 2  # there really was a backlog
    assert result.rss_peak_mb < RSS_CEILING_MB, result.summary()
    assert result.lost == 0, result.summary()
    assert result.distinct == result.backlog
    assert result.duplicates == 0
