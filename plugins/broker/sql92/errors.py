"""Why a selector was refused, in the words Apache's broker sends back."""

from __future__ import annotations

__all__ = ["Sql92Error"]


class Sql92Error(ValueError):
    """An expression Apache's SelectorParser refuses.

    ``remark`` is what CHECK_CLIENT_CONFIG answers: the Java cause's
    ``toString()``, class name first, as ``MQFilterException.getMessage()`` gives it.
    """

    def __init__(self, remark: str | None) -> None:
        # None where Java's exception has no message (a NullPointerException).
        super().__init__(remark or "java.lang.NullPointerException")
        self.remark = remark
