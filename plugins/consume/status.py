"""A listener's answer read as a consume status: the rule both consume services follow."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from rmqk.model import ConsumeStatus

__all__ = ["normalize_status", "read_status"]

S = TypeVar("S", bound=enum.Enum)


def read_status(value: Any, kind: type[S], success: S, failure: S) -> S | None:
    """``value`` as a ``kind``: None and True mean ``success``, False ``failure``.

    A member or its value stands for itself; anything else is None, which the
    services report as a listener that answered nothing they understand.
    """
    if value is None or value is True:
        return success
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return None
    if value is False:
        return failure
    return None


def normalize_status(value: Any) -> ConsumeStatus | None:
    """A listener's answer as a ConsumeStatus; None (success) or an unknown value -> None."""
    return read_status(
        value, ConsumeStatus, ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.RECONSUME_LATER
    )
