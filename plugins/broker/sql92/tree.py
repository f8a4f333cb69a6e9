"""The selector's syntax tree, printed the way Apache's expressions print in errors."""

from __future__ import annotations

import attrs

from .javavalues import JavaValue, java_double_str

__all__ = [
    "BoolCast",
    "Const",
    "Equal",
    "InList",
    "Logic",
    "Negate",
    "Node",
    "Not",
    "Order",
    "Prop",
    "describe",
    "is_boolean",
]


@attrs.frozen
class Const:
    value: JavaValue | None
    # TRUE, FALSE and NULL are boolean expressions on Apache; other literals are not.
    boolean: bool = False


@attrs.frozen
class Prop:
    name: str


@attrs.frozen
class Negate:
    operand: Node


@attrs.frozen
class BoolCast:
    """A bare property used as a condition: Apache's BOOLEANCAST."""

    operand: Node


@attrs.frozen
class Not:
    operand: Node


@attrs.frozen
class Logic:
    op: str  # "AND" or "OR"
    left: Node
    right: Node


@attrs.frozen
class Equal:
    left: Node
    right: Node


@attrs.frozen
class Order:
    op: str  # ">", ">=", "<" or "<="
    left: Node
    right: Node


@attrs.frozen
class InList:
    prop: Prop
    values: tuple[str, ...]
    negated: bool


Node = Const | Prop | Negate | BoolCast | Not | Logic | Equal | Order | InList


def is_boolean(node: Node) -> bool:
    """Whether Apache's class for the node implements BooleanExpression."""
    if isinstance(node, Const):
        return node.boolean
    return not isinstance(node, (Prop, Negate))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def describe(node: Node) -> str:
    """The expression's Java toString, quoted in Apache's error messages."""
    match node:
        case Const(value=None):
            return "NULL"
        case Const(value=bool() as flag):
            return "TRUE" if flag else "FALSE"
        case Const(value=str() as text):
            return _quote(text)
        case Const(value=float() as number):
            return java_double_str(number)
        case Const(value=value):
            return str(value)
        case Prop(name=name):
            return name
        case Negate(operand=operand):
            return f"(- {describe(operand)})"
        case BoolCast(operand=operand):
            return describe(operand)
        case Not(operand=operand):
            return f"(NOT {describe(operand)})"
        case Logic(op=op, left=left, right=right):
            return f"({describe(left)} {'&&' if op == 'AND' else '||'} {describe(right)})"
        case Equal(left=left, right=right):
            return f"({describe(left)} == {describe(right)})"
        case Order(op=op, left=left, right=right):
            return f"({describe(left)} {op} {describe(right)})"
        case InList(prop=prop, values=values, negated=negated):
            return f"{prop.name} {'NOT IN' if negated else 'IN'} ( {', '.join(values)} )"
    raise AssertionError(node)
