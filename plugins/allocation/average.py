"""AVG: contiguous blocks, the first ``m % c`` consumers one queue more (Java's default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.checks import check_allocate_inputs
from rmqk.plugins.allocation.options import NoOptions, parse_strategy_options

__all__ = ["NAME", "AllocateMessageQueueAveragely", "create_averagely"]

NAME = "AVG"


@attrs.frozen
class AllocateMessageQueueAveragely:
    """Java's AllocateMessageQueueAveragely (4.x balanced formula).

    With m queues and c consumers, consumer i gets ``m // c`` queues, plus one
    when ``i < m % c``, in one contiguous run of the sorted queues; when
    ``m < c`` the last ``c - m`` consumers get nothing. Neighbouring queues
    usually live on the same broker, so a consumer talks to few brokers.
    """

    @property
    def name(self) -> str:
        return NAME

    def allocate(
        self,
        group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not check_allocate_inputs(group, current_cid, mq_all, cid_all):
            return []
        m, c = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = m % c
        gets_extra = mod > 0 and index < mod
        if m <= c:
            size = 1
        elif gets_extra:
            size = m // c + 1
        else:
            size = m // c
        start = index * size if gets_extra else index * size + mod
        count = min(size, m - start)
        if count <= 0:
            return []
        return list(mq_all[start : start + count])


def create_averagely(**options: Any) -> AllocateMessageQueueAveragely:
    """Factory for ``AVG``; it takes no options."""
    parse_strategy_options(NAME, NoOptions, options)
    return AllocateMessageQueueAveragely()
