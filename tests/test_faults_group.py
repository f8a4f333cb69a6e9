"""Consumers joining and leaving a loaded group, cycle after cycle.

A producer keeps sending while members come and go. Nothing is lost; concurrent
groups may consume a message twice around a rebalance (reported); orderly groups
never have one queue inside two members' listeners at once, and each key's
messages are first delivered in order. bench/soak_group.py runs the long version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_faults_support import group_churn_scenario

pytestmark = pytest.mark.timeout(180)


async def test_concurrent_group_churn_loses_nothing(tmp_path: Path) -> None:
    result = await group_churn_scenario(tmp_path, orderly=False, cycles=8, cycle_s=1.0)
    print(result.summary())
    assert result.joins + result.leaves >= 8
    assert result.produced > 1000
    assert result.lost == 0, result.summary()
    assert result.distinct == result.produced


async def test_orderly_group_churn_never_consumes_a_queue_twice_at_once(tmp_path: Path) -> None:
    result = await group_churn_scenario(tmp_path, orderly=True, cycles=8, cycle_s=1.0)
    print(result.summary())
    assert result.joins + result.leaves >= 8
    assert result.lost == 0, result.summary()
    assert result.distinct == result.produced
    assert result.exclusivity_violations == 0, result.summary()
    assert result.order_violations == 0, result.summary()
