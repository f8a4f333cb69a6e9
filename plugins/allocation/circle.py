"""AVG_BY_CIRCLE: deal the sorted queues round-robin over the sorted consumers."""

from __future__ import annotations

from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.options import NoOptions, parse_strategy_options
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategyContext

__all__ = ["NAME", "AllocateMessageQueueAveragelyByCircle", "create_averagely_by_circle"]

NAME = "AVG_BY_CIRCLE"


@attrs.frozen
class AllocateMessageQueueAveragelyByCircle(JavaStrategy):
    """Java's AllocateMessageQueueAveragelyByCircle.

    Consumer i gets queues i, i + c, i + 2c, ... of the sorted list, which
    spreads each consumer over the brokers instead of one contiguous run.
    """

    @property
    def name(self) -> str:
        return NAME

    def divide(self, share: Share) -> list[MessageQueue]:
        return list(share.mq_all[share.index :: len(share.cid_all)])


def build_averagely_by_circle(
    context: AllocationStrategyContext | None, options: NoOptions
) -> AllocateMessageQueueAveragelyByCircle:
    """The registered factory of ``AVG_BY_CIRCLE``; it takes no options."""
    return AllocateMessageQueueAveragelyByCircle()


def create_averagely_by_circle(**options: Any) -> AllocateMessageQueueAveragelyByCircle:
    """``AVG_BY_CIRCLE`` from Python; it takes no options."""
    return build_averagely_by_circle(None, parse_strategy_options(NAME, NoOptions, options))
