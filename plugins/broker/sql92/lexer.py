"""The SQL92 selector's tokens, scanned lazily as JavaCC's token manager does.

Apache's parser never asks for an end of input: it lexes only the tokens its
grammar looks at, so text after a complete expression is ignored unless the
one token it peeks at cannot be lexed.  Scanning on demand keeps that.
"""

from __future__ import annotations

import enum
import re

import attrs

from .errors import Sql92Error

__all__ = ["Kind", "Lexer", "Token"]


class Kind(enum.Enum):
    NOT = "NOT"
    AND = "AND"
    OR = "OR"
    BETWEEN = "BETWEEN"
    IN = "IN"
    TRUE = "TRUE"
    FALSE = "FALSE"
    NULL = "NULL"
    IS = "IS"
    DECIMAL = "<DECIMAL_LITERAL>"
    FLOAT = "<FLOATING_POINT_LITERAL>"
    STRING = "<STRING_LITERAL>"
    ID = "<ID>"
    EQ = "="
    NE = "<>"
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    LPAREN = "("
    COMMA = ","
    RPAREN = ")"
    PLUS = "+"
    MINUS = "-"
    EOF = "<EOF>"


_KEYWORDS = {
    k.value: k
    for k in (
        Kind.NOT,
        Kind.AND,
        Kind.OR,
        Kind.BETWEEN,
        Kind.IN,
        Kind.TRUE,
        Kind.FALSE,
        Kind.NULL,
        Kind.IS,
    )
}
_PUNCTUATION = {
    k.value: k
    for k in (
        Kind.EQ,
        Kind.NE,
        Kind.GT,
        Kind.GE,
        Kind.LT,
        Kind.LE,
        Kind.LPAREN,
        Kind.COMMA,
        Kind.RPAREN,
        Kind.PLUS,
        Kind.MINUS,
    )
}

_WHITESPACE = " \t\n\r\f"
# Comments only count when complete: "--" needs its line end, else it lexes as two minuses.
_SKIP = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
_STRING = re.compile(r"'(?:''|[^'])*'")
_ID = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
_PUNCT = re.compile(r"<>|>=|<=|[=><(),+\-]")


@attrs.frozen
class Token:
    kind: Kind
    image: str
    line: int
    column: int


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class Lexer:
    """Tokens on demand; ``peek(k)`` lexes no further than the k-th token."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._tokens: list[Token] = []
        self._next = 0

    def peek(self, ahead: int = 1) -> Token:
        while len(self._tokens) < self._next + ahead:
            self._tokens.append(self._scan())
        return self._tokens[self._next + ahead - 1]

    def take(self) -> Token:
        token = self.peek()
        self._next += 1
        return token

    def _scan(self) -> Token:
        text, pos = self._text, self._pos
        while True:
            while pos < len(text) and text[pos] in _WHITESPACE:
                pos += 1
            skipped = _SKIP.match(text, pos)
            if skipped is None:
                break
            pos = skipped.end()
        line, column = _position(text, pos)
        if pos >= len(text):
            self._pos = pos
            return Token(Kind.EOF, "", line, column)
        best: tuple[int, Kind] | None = None
        # Longest match wins; on a tie the earlier declared token does, as in JavaCC.
        for pattern, kind in (
            (_DECIMAL, Kind.DECIMAL),
            (_FLOAT, Kind.FLOAT),
            (_STRING, Kind.STRING),
            (_ID, Kind.ID),
            (_PUNCT, Kind.EQ),
        ):
            found = pattern.match(text, pos)
            if found is not None and (best is None or found.end() > best[0]):
                best = (found.end(), kind)
        if best is None:
            char = text[pos]
            raise Sql92Error(
                "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line "
                f'{line}, column {column}.  Encountered: "{char}" ({ord(char)}), after : ""'
            )
        end, kind = best
        image = text[pos:end]
        if kind is Kind.ID:
            kind = _KEYWORDS.get(image.upper(), Kind.ID)
        elif kind is Kind.EQ:
            kind = _PUNCTUATION[image]
        self._pos = end
        return Token(kind, image, line, column)
