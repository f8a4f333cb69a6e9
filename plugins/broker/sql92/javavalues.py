"""Java's value semantics as Apache's SQL92 filter sees them.

The filter compares ``java.lang`` objects: Integer, Long, Double, Boolean and
String (every message property is a String).  Python has one ``int``, so a Long
is the ``JavaLong`` subclass; a plain ``int`` is an Integer.  A failed
conversion raises ``EvalError``, which on Apache aborts the whole evaluation
(the message then does not match).
"""

from __future__ import annotations

import math
import re
import struct
from decimal import Decimal

__all__ = [
    "EvalError",
    "JavaLong",
    "compare",
    "java_double_str",
    "java_str",
    "parse_double",
    "parse_int",
    "parse_long",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

JavaValue = bool | int | float | str


_BOOLEAN_CAST = "java.lang.ClassCastException: java.lang.Boolean cannot be cast to java.lang.String"


class EvalError(Exception):
    """A Java exception thrown while evaluating: Apache logs it and skips the message."""


class JavaLong(int):
    """A java.lang.Long: its range decides how a String is converted against it."""

    __slots__ = ()

    def __neg__(self) -> JavaLong:
        return JavaLong(-int(self))


# Character.digit(c, 10) accepts any Unicode decimal digit, as \d does for str patterns.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# FloatingDecimal.readJavaFormatString: decimal or hex, an optional f/F/d/D suffix.
_JAVA_DECIMAL = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_JAVA_HEX = re.compile(
    r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


def _number_format(text: str) -> EvalError:
    return EvalError(f'java.lang.NumberFormatException: For input string: "{text}"')


def _parse_integral(text: str, low: int, high: int) -> int:
    if not _JAVA_INTEGER.fullmatch(text):
        raise _number_format(text)
    value = int(text)
    if not low <= value <= high:
        raise _number_format(text)
    return value


def parse_int(text: str) -> int:
    """Integer.valueOf(String)."""
    return _parse_integral(text, INT_MIN, INT_MAX)


def parse_long(text: str) -> JavaLong:
    """Long.valueOf(String)."""
    return JavaLong(_parse_integral(text, LONG_MIN, LONG_MAX))


def parse_double(text: str) -> float:
    """Double.valueOf(String): Java trims ASCII control characters and spaces first."""
    trimmed = text.strip("".join(chr(c) for c in range(0x21)))
    if _JAVA_DECIMAL.fullmatch(trimmed):
        unsigned = trimmed.lstrip("+-")
        if unsigned == "Infinity":
            return -math.inf if trimmed.startswith("-") else math.inf
        if unsigned == "NaN":
            return math.nan
        return float(trimmed[:-1] if trimmed[-1] in "fFdD" else trimmed)
    hexed = _JAVA_HEX.fullmatch(trimmed)
    if hexed:
        value = float.fromhex("0x" + hexed.group(2))
        return -value if hexed.group(1) == "-" else value
    raise _number_format(text)


def _double_bits(value: float) -> int:
    # Double.doubleToLongBits: every NaN collapses to the canonical one.
    if math.isnan(value):
        return 0x7FF8000000000000
    bits: int = struct.unpack(">q", struct.pack(">d", value))[0]
    return bits


def _compare_doubles(left: float, right: float) -> int:
    """Double.compareTo: NaN equals itself and sorts above +Infinity; -0.0 < 0.0."""
    if left < right:
        return -1
    if left > right:
        return 1
    lbits, rbits = _double_bits(left), _double_bits(right)
    return 0 if lbits == rbits else (-1 if lbits < rbits else 1)


def _kind(value: JavaValue) -> str:
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, JavaLong):
        return "Long"
    if isinstance(value, int):
        return "Integer"
    if isinstance(value, float):
        return "Double"
    return "String"


def _same_kind_compare(left: JavaValue, right: JavaValue) -> int:
    if isinstance(left, float) and isinstance(right, float):
        return _compare_doubles(left, right)
    if left < right:  # type: ignore[operator]
        return -1
    return 1 if left > right else 0  # type: ignore[operator]


def compare(left: JavaValue, right: JavaValue) -> int:
    """ComparisonExpression's comparison with string conversion on (as the broker parses).

    Unlike kinds are converted towards the number's type; a Boolean on the left
    against a String throws (Apache casts the Boolean to String), and any other
    pair that cannot be converted compares as "less" (-1).
    """
    lk, rk = _kind(left), _kind(right)
    if lk != rk:
        if lk == "Boolean":
            if rk == "String":
                raise EvalError(_BOOLEAN_CAST)
            return -1
        if lk == "String":
            assert isinstance(left, str)
            if rk == "Boolean":
                left = left.lower() == "true"
            elif rk == "Integer":
                left = parse_int(left)
            elif rk == "Long":
                left = parse_long(left)
            else:
                left = parse_double(left)
        elif rk == "Boolean":
            return -1
        elif rk == "String":
            assert isinstance(right, str)
            right = {"Integer": parse_int, "Long": parse_long, "Double": parse_double}[lk](right)
        elif lk == "Double" or rk == "Double":
            left, right = float(left), float(right)
        else:  # Integer against Long: both widen to long.
            left, right = JavaLong(left), JavaLong(right)
    return _same_kind_compare(left, right)


def java_double_str(value: float) -> str:
    """Double.toString, for messages that quote a literal."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    # repr gives the shortest digits that round-trip, as Java prints them.
    _, digit_tuple, exp = Decimal(repr(magnitude)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exp, int)
    point = len(digits) + exp  # digits before the decimal point
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole, frac = digits[:point].ljust(point, "0"), digits[point:]
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def java_str(value: object) -> str:
    """Object.toString of a filter value (Boolean prints lower case, as Java does)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    return str(value)
