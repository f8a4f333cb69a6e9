"""Recursive descent over Apache 4.9.8's SelectorParser grammar.

The checks Apache makes while building its expression objects (NULL cannot be
compared, ``>`` needs numbers or properties, BETWEEN bounds in order, IN needs
a property, a zero float literal is refused, ...) run at the same points here,
so the same texts are refused and the same ones pass.
"""

from __future__ import annotations

from .errors import Sql92Error
from .javavalues import INT_MAX, LONG_MAX, EvalError, JavaLong, compare, java_str
from .lexer import Kind, Lexer, Token
from .tree import (
    BoolCast,
    Const,
    Equal,
    InList,
    Logic,
    Negate,
    Node,
    Not,
    Order,
    Prop,
    describe,
    is_boolean,
)

__all__ = ["parse"]

_RUNTIME = "java.lang.RuntimeException: "
_PARSE = "org.apache.rocketmq.filter.parser.ParseException: "
NULL = Const(None, boolean=True)
_ORDER_OPS = {Kind.GT: ">", Kind.GE: ">=", Kind.LT: "<", Kind.LE: "<="}


def parse(text: str) -> Node:
    """The selector's tree, with a bare property at the root cast to a condition."""
    return _Parser(text).selector()


def _refuse(message: str) -> Sql92Error:
    return Sql92Error(_RUNTIME + message)


def as_condition(node: Node) -> Node:
    if is_boolean(node):
        return node
    if isinstance(node, Prop):
        return BoolCast(node)
    raise Sql92Error(_PARSE + "Expression will not result in a boolean value: " + describe(node))


def _check_equal_operand(node: Node) -> None:
    if isinstance(node, Const) and node.value is None:
        raise _refuse(f"'{describe(node)}' cannot be compared.")


def create_equal(left: Node, right: Node) -> Node:
    _check_equal_operand(left)
    _check_equal_operand(right)
    if isinstance(left, Const) and isinstance(right, Const) and left.boolean and not right.boolean:
        raise _refuse(f"'{describe(left)}' cannot be compared with '{describe(right)}'")
    return Equal(left, right)


def _check_order_operand(node: Node) -> None:
    if isinstance(node, Const):
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return
        raise _refuse(f"Value '{describe(node)}' cannot be compared.")
    if is_boolean(node):
        raise _refuse(f"Value '{describe(node)}' cannot be compared.")


def create_order(op: str, left: Node, right: Node) -> Node:
    _check_order_operand(left)
    _check_order_operand(right)
    return Order(op, left, right)


def create_between(value: Node, low: Node, high: Node) -> Node:
    if isinstance(low, Const) and isinstance(high, Const):
        if low.value is None or high.value is None:
            raise _refuse("Illegal values of between, values can not be null!")
        try:
            ordered = compare(high.value, low.value) >= 0
        except EvalError as exc:
            raise Sql92Error(str(exc)) from None
        if not ordered:
            raise _refuse(
                f"Illegal values of between, left value({java_str(low.value)}) must less than "
                f"or equal to right value({java_str(high.value)})"
            )
    return Logic("AND", create_order(">=", value, low), create_order("<=", value, high))


def create_in(left: Node, values: list[str], negated: bool) -> Node:
    if not isinstance(left, Prop):
        raise _refuse("Expected a property for In expression, got: " + describe(left))
    return InList(left, tuple(values), negated)


def _decimal(image: str) -> Const:
    digits = image[:-1] if image[-1] in "lL" else image
    value = int(digits)
    if value > LONG_MAX:
        raise Sql92Error(f'java.lang.NumberFormatException: For input string: "{digits}"')
    return Const(value if value <= INT_MAX else JavaLong(value))


def _float(image: str) -> Const:
    value = float(image)
    if value == float("inf"):
        raise _refuse(f"{image} is greater than 1.7976931348623157E308")
    if value == 0.0:  # Apache compares with Double.MIN_VALUE, the smallest positive double.
        raise _refuse(f"{image} is less than 4.9E-324")
    return Const(value)


class _Parser:
    def __init__(self, text: str) -> None:
        self._lexer = Lexer(text)

    def _at(self, kind: Kind, ahead: int = 1) -> bool:
        return self._lexer.peek(ahead).kind is kind

    def _expect(self, kind: Kind) -> Token:
        token = self._lexer.peek()
        if token.kind is not kind:
            raise self._unexpected(token)
        return self._lexer.take()

    @staticmethod
    def _unexpected(token: Token) -> Sql92Error:
        shown = "<EOF>" if token.kind is Kind.EOF else token.image
        return Sql92Error(
            f'{_PARSE}Encountered "{shown}" at line {token.line}, column {token.column}.'
        )

    def selector(self) -> Node:
        # No end-of-input check: Apache ignores what follows a complete expression.
        return as_condition(self._or())

    def _or(self) -> Node:
        left = self._and()
        while self._at(Kind.OR):
            self._lexer.take()
            right = self._and()
            left = Logic("OR", as_condition(left), as_condition(right))
        return left

    def _and(self) -> Node:
        left = self._equality()
        while self._at(Kind.AND):
            self._lexer.take()
            right = self._equality()
            left = Logic("AND", as_condition(left), as_condition(right))
        return left

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            kind = self._lexer.peek().kind
            if kind is Kind.EQ:
                self._lexer.take()
                left = create_equal(left, self._comparison())
            elif kind is Kind.NE:
                self._lexer.take()
                left = Not(create_equal(left, self._comparison()))
            elif kind is Kind.IS:
                if self._at(Kind.NULL, 2):
                    self._lexer.take()
                    self._lexer.take()
                    left = Equal(left, NULL)
                else:
                    self._lexer.take()
                    self._expect(Kind.NOT)
                    self._expect(Kind.NULL)
                    left = Not(Equal(left, NULL))
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            token = self._lexer.peek()
            op = _ORDER_OPS.get(token.kind)
            if op is not None:
                self._lexer.take()
                left = create_order(op, left, self._unary())
            elif token.kind is Kind.BETWEEN:
                self._lexer.take()
                low = self._unary()
                self._expect(Kind.AND)
                left = create_between(left, low, self._unary())
            elif token.kind is Kind.IN:
                self._lexer.take()
                left = create_in(left, self._string_list(), negated=False)
            elif token.kind is Kind.NOT:
                if self._at(Kind.BETWEEN, 2):
                    self._lexer.take()
                    self._lexer.take()
                    low = self._unary()
                    self._expect(Kind.AND)
                    high = self._unary()
                    left = Logic("OR", create_order("<", left, low), create_order(">", left, high))
                elif self._at(Kind.IN, 2):
                    self._lexer.take()
                    self._lexer.take()
                    left = create_in(left, self._string_list(), negated=True)
                else:
                    raise self._unexpected(token)
            else:
                return left

    def _string_list(self) -> list[str]:
        self._expect(Kind.LPAREN)
        values = [self._string()]
        while self._at(Kind.COMMA):
            self._lexer.take()
            values.append(self._string())
        self._expect(Kind.RPAREN)
        return values

    def _string(self) -> str:
        return self._expect(Kind.STRING).image[1:-1].replace("''", "'")

    def _unary(self) -> Node:
        kind = self._lexer.peek().kind
        if kind is Kind.PLUS:  # a unary plus leaves its operand as it is, even a literal
            self._lexer.take()
            return self._unary()
        if kind is Kind.MINUS:
            self._lexer.take()
            return Negate(self._unary())
        if kind is Kind.NOT:
            self._lexer.take()
            return Not(as_condition(self._unary()))
        return self._primary()

    def _primary(self) -> Node:
        token = self._lexer.peek()
        match token.kind:
            case Kind.STRING:
                return Const(self._string())
            case Kind.DECIMAL:
                return _decimal(self._lexer.take().image)
            case Kind.FLOAT:
                return _float(self._lexer.take().image)
            case Kind.TRUE | Kind.FALSE:
                self._lexer.take()
                return Const(token.kind is Kind.TRUE, boolean=True)
            case Kind.NULL:
                self._lexer.take()
                return NULL
            case Kind.ID:
                return Prop(self._lexer.take().image)
            case Kind.LPAREN:
                self._lexer.take()
                inner = self._or()
                self._expect(Kind.RPAREN)
                return inner
        raise self._unexpected(token)
