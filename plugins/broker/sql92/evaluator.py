"""A selector tree turned into nested closures, built once and run per message.

Values follow Apache's three-valued logic: ``None`` is SQL's unknown (a
missing property), and only ``True`` at the root selects a message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .javavalues import EvalError, JavaValue, compare, parse_double
from .tree import BoolCast, Const, Equal, InList, Logic, Negate, Node, Not, Order, Prop

__all__ = ["Evaluate", "Properties", "build"]

Properties = Mapping[str, str]
Value = JavaValue | None
Evaluate = Callable[[Properties], Value]

_ORDER_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def build(node: Node) -> Evaluate:
    """The evaluator of one tree node (its children are built once, here)."""
    match node:
        case Const(value=value):
            return lambda _props: value
        case Prop(name=name):
            return lambda props: props.get(name)
        case Negate(operand=operand):
            return _negate(build(operand))
        case BoolCast(operand=operand):
            return _bool_cast(build(operand))
        case Not(operand=operand):
            return _not(build(operand))
        case Logic(op="AND", left=left, right=right):
            return _and(build(left), build(right))
        case Logic(left=left, right=right):
            return _or(build(left), build(right))
        case Equal(left=left, right=right):
            return _equal(build(left), build(right))
        case Order(op=op, left=left, right=right):
            return _order(_ORDER_TESTS[op], build(left), build(right))
        case InList(prop=prop, values=values, negated=negated):
            return _in(prop.name, frozenset(values), negated)
    raise AssertionError(node)


def _negate(operand: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        value = operand(props)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
        return None  # a String or Boolean has no negation: unknown

    return run


def _bool_cast(operand: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        value = operand(props)
        if value is None:
            return None
        return value if isinstance(value, bool) else False

    return run


def _not(operand: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        value = operand(props)
        return None if value is None else not value

    return run


def _and(left: Evaluate, right: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        lv = left(props)
        if lv is False:
            return False
        rv = right(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return run


def _or(left: Evaluate, right: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        lv = left(props)
        if lv is True:
            return True
        rv = right(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return run


def _equal(left: Evaluate, right: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        lv, rv = left(props), right(props)
        if lv is None or rv is None:
            # Apache's asymmetry: unknown only when the left side is missing.
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return compare(lv, rv) == 0

    return run


def _order(test: Callable[[int], bool], left: Evaluate, right: Evaluate) -> Evaluate:
    def run(props: Properties) -> Value:
        lv = left(props)
        if lv is None:
            return None
        rv = right(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            # Two strings are ordered only as doubles; anything else throws on Apache.
            try:
                return test(compare(parse_double(lv), parse_double(rv)))
            except EvalError as exc:
                raise EvalError(
                    f"It's illegal to compare string by '>=', '>', '<', '<='. lv={lv}, rv={rv}"
                ) from exc
        return test(compare(lv, rv))

    return run


def _in(name: str, values: frozenset[str], negated: bool) -> Evaluate:
    def run(props: Properties) -> Value:
        value = props.get(name)
        if value is None:
            return None
        return (value in values) != negated

    return run
