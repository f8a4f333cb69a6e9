"""SQL92 message selectors with the semantics of Apache RocketMQ 4.9.8's filter module.

``compile_selector`` parses once; the returned ``Selector`` is then run per
message over its properties (all strings, as the broker stores them).
"""

from __future__ import annotations

import functools

import attrs

from .errors import Sql92Error
from .evaluator import Evaluate, Properties, Value, build
from .javavalues import EvalError
from .parser import parse
from .tree import Node

__all__ = ["EvalError", "Properties", "Selector", "Sql92Error", "compile_selector"]


@attrs.frozen
class Selector:
    """A compiled selector: ``matches`` is what the broker's pull filter asks."""

    expression: str
    tree: Node = attrs.field(repr=False)
    _run: Evaluate = attrs.field(repr=False, eq=False)

    def evaluate(self, properties: Properties | None) -> Value:
        """The raw three-valued result; raises EvalError where Apache throws."""
        return self._run(properties or {})

    def matches(self, properties: Properties | None) -> bool:
        """True only when the selector evaluates to TRUE; a thrown error selects nothing."""
        try:
            return self._run(properties or {}) is True
        except EvalError:
            return False


@attrs.frozen
class _Outcome:
    selector: Selector | None
    error: Sql92Error | None


# Like Apache's parse cache (100 entries), refusals are remembered too.
@functools.lru_cache(maxsize=256)
def _compile(expression: str) -> _Outcome:
    try:
        tree = parse(expression)
    except Sql92Error as exc:
        return _Outcome(None, exc)
    except RecursionError:
        return _Outcome(None, Sql92Error("java.lang.StackOverflowError"))
    return _Outcome(Selector(expression, tree, build(tree)), None)


def compile_selector(expression: str) -> Selector:
    """Parse a SQL92 selector; raises Sql92Error with Apache's reason when it refuses it."""
    outcome = _compile(expression)
    if outcome.error is not None:
        raise outcome.error
    assert outcome.selector is not None
    return outcome.selector
