"""EVERY_OTHER: an rmqk allocation strategy in a distribution of its own.

With n consumers in a group, the consumer at position i (in the sorted list of
client ids) takes queues i, i + n, i + 2n, ... of the sorted queue list: with two
consumers, each takes every other queue. ``offset`` (from the consumer's
``allocate_options`` table) shifts the positions, so two groups reading the same
topic can start on different queues.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rmqk import MessageQueue, hookimpl
from rmqk.spi.contracts import AllocationStrategyContext
from rmqk.spi.factory import PluginFactory
from rmqk.spi.hookspecs import Register
from rmqk.spi.options import OptionType, option

__all__ = ["EveryOther", "EveryOtherOptions", "rmqk_register_allocation_strategies"]


@attrs.frozen
class EveryOtherOptions:
    """The allocate_options EVERY_OTHER takes; rmqk checks a consumer's table against them."""

    offset: int = option(
        OptionType.INT, "Shifts every member's position by this much.", 0, minimum=0
    )


class EveryOther:
    """One consumer's share of a topic's queues."""

    name = "EVERY_OTHER"

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def allocate(
        self,
        group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        # rmqk hands both lists sorted, the same way on every member, so every
        # member computes the same split without talking to the others.
        if current_cid not in cid_all:
            return []
        position = (cid_all.index(current_cid) + self.offset) % len(cid_all)
        return [mq for k, mq in enumerate(mq_all) if k % len(cid_all) == position]


def every_other(context: AllocationStrategyContext, options: EveryOtherOptions) -> EveryOther:
    """Called once per consumer, with its allocate_options checked and resolved."""
    return EveryOther(options.offset)


@hookimpl
def rmqk_register_allocation_strategies(register: Register) -> None:
    register(PluginFactory("EVERY_OTHER", every_other, options=EveryOtherOptions))
