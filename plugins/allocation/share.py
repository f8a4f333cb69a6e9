"""The ``allocate`` every built-in strategy shares: Java's common input checks, then divide.

Java's AbstractAllocateMessageQueueStrategy checks the inputs before each
strategy runs its own algorithm; here the base class does that once and hands the
strategy a :class:`Share` to divide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.checks import check_allocate_inputs

__all__ = ["JavaStrategy", "Share"]


@attrs.frozen
class Share:
    """One ``allocate`` call's inputs; once checked, ``current_cid`` is in ``cid_all``."""

    group: str
    current_cid: str
    mq_all: Sequence[MessageQueue]
    cid_all: Sequence[str]

    @property
    def index(self) -> int:
        """The current consumer's position in the sorted client ids."""
        return list(self.cid_all).index(self.current_cid)


class JavaStrategy:
    """Base of the built-in strategies: subclasses implement :meth:`divide`."""

    # Empty, so the attrs subclasses stay slotted.
    __slots__ = ()

    # Java's AllocateMessageQueueByConfig alone skips the common checks.
    checks_inputs: ClassVar[bool] = True

    def allocate(
        self,
        group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if self.checks_inputs and not check_allocate_inputs(group, current_cid, mq_all, cid_all):
            return []
        return self.divide(Share(group, current_cid, mq_all, cid_all))

    def divide(self, share: Share) -> list[MessageQueue]:
        """This consumer's queues of ``share.mq_all``."""
        raise NotImplementedError
