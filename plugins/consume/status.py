"""A listener's answer read as a consume status: the rule both consume services follow."""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, TypeVar

from rmqk.model import ConsumeStatus

if TYPE_CHECKING:
    from rmqk.spi.consume import ConsumeHost, ListenerOutcome
    from rmqk.spi.contexts import ConsumeMessageContext

__all__ = ["concurrent_status", "describe_outcome", "normalize_status", "read_status"]

log = logging.getLogger("rmqk.plugins.consume.concurrent")

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


def concurrent_status(outcome: ListenerOutcome, host: ConsumeHost) -> ConsumeStatus:
    """A concurrent listener call's status: an exception or an answer not understood
    is RECONSUME_LATER (an exception was reported by ``deliver``; an answer not
    understood is logged here)."""
    if outcome.exception is not None:
        return ConsumeStatus.RECONSUME_LATER
    status = normalize_status(outcome.status)
    if status is None:
        log.warning(
            "listener of %s returned %r; treating it as RECONSUME_LATER",
            host.group,
            outcome.status,
        )
        return ConsumeStatus.RECONSUME_LATER
    return status


def describe_outcome(
    hook_ctx: ConsumeMessageContext,
    outcome: ListenerOutcome,
    status: ConsumeStatus,
    timeout_ms: float,
) -> None:
    """Fill in what the ``rmqk_consume_message_after`` hook sees of a concurrent listener call.

    ``return_type`` is Java's ConsumeReturnType, except that None is success here
    (Java's RETURNNULL is kept for answers the service does not understand).
    """
    if outcome.exception is not None:
        return_type = "EXCEPTION"
    elif outcome.status is not None and normalize_status(outcome.status) is None:
        return_type = "RETURNNULL"
    elif outcome.duration_ms >= timeout_ms:
        return_type = "TIME_OUT"
    elif status is ConsumeStatus.RECONSUME_LATER:
        return_type = "FAILED"
    else:
        return_type = "SUCCESS"
    hook_ctx.status = status.value
    hook_ctx.success = status is ConsumeStatus.CONSUME_SUCCESS
    hook_ctx.return_type = return_type
    hook_ctx.duration_ms = outcome.duration_ms
    hook_ctx.exception = outcome.exception
    hook_ctx.props["ConsumeContextType"] = return_type
