"""AVG: contiguous blocks, the first ``m % c`` consumers one queue more (Java's default)."""

from __future__ import annotations

from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.options import NoOptions, parse_strategy_options
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategyContext

__all__ = ["NAME", "AllocateMessageQueueAveragely", "create_averagely"]

NAME = "AVG"


@attrs.frozen
class AllocateMessageQueueAveragely(JavaStrategy):
    """Java's AllocateMessageQueueAveragely (4.x balanced formula).

    With m queues and c consumers, consumer i gets ``m // c`` queues, plus one
    when ``i < m % c``, in one contiguous run of the sorted queues; when
    ``m < c`` the last ``c - m`` consumers get nothing. Neighbouring queues
    usually live on the same broker, so a consumer talks to few brokers.
    """

    @property
    def name(self) -> str:
        return NAME

    def divide(self, share: Share) -> list[MessageQueue]:
        m, c = len(share.mq_all), len(share.cid_all)
        index = share.index
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
        return list(share.mq_all[start : start + count])


def build_averagely(
    context: AllocationStrategyContext | None, options: NoOptions
) -> AllocateMessageQueueAveragely:
    """The registered factory of ``AVG``; it takes no options."""
    return AllocateMessageQueueAveragely()


def create_averagely(**options: Any) -> AllocateMessageQueueAveragely:
    """``AVG`` from Python; it takes no options."""
    return build_averagely(None, parse_strategy_options(NAME, NoOptions, options))
