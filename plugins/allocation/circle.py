"""AVG_BY_CIRCLE: deal the sorted queues round-robin over the sorted consumers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.checks import check_allocate_inputs
from rmqk.plugins.allocation.options import NoOptions, parse_strategy_options

__all__ = ["NAME", "AllocateMessageQueueAveragelyByCircle", "create_averagely_by_circle"]

NAME = "AVG_BY_CIRCLE"


@attrs.frozen
class AllocateMessageQueueAveragelyByCircle:
    """Java's AllocateMessageQueueAveragelyByCircle.

    Consumer i gets queues i, i + c, i + 2c, ... of the sorted list, which
    spreads each consumer over the brokers instead of one contiguous run.
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
        index = list(cid_all).index(current_cid)
        return list(mq_all[index :: len(cid_all)])


def create_averagely_by_circle(**options: Any) -> AllocateMessageQueueAveragelyByCircle:
    """Factory for ``AVG_BY_CIRCLE``; it takes no options."""
    parse_strategy_options(NAME, NoOptions, options)
    return AllocateMessageQueueAveragelyByCircle()
