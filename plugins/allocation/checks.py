"""The input checks every Java strategy shares (AbstractAllocateMessageQueueStrategy).

The messages are Java's, word for word, so logs of mixed groups read the same.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rmqk.model import MessageQueue

__all__ = ["check_allocate_inputs", "log"]

log = logging.getLogger("rmqk.plugins.allocation")


def check_allocate_inputs(
    group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> bool:
    """Raise ValueError for empty inputs; False when ``current_cid`` is not in ``cid_all``.

    The last case is not an error: right after start the broker may not list this
    client yet, so Java logs it and allocates nothing until the next rebalance.
    """
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        log.info(
            "[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s",
            group,
            current_cid,
            list(cid_all),
        )
        return False
    return True
