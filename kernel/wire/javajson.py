"""Scalars and ordering exactly as fastjson 1.2.69 writes them for RemotingSerializable.

Apache's ``RemotingSerializable.toJson`` is ``JSON.toJSONString(obj, false)``:
fastjson's default features (QuoteFieldNames, SkipTransientField,
WriteEnumUsingName, SortField), so bean fields come in alphabetical order, null
fields are left out, and a map keyed by a bean writes the bean itself in key
position. What standard JSON writers do differently, and this module does as
fastjson does:

* a ``double`` is Java's ``Double.toString`` (fastjson's Ryu port): at least one
  decimal digit, scientific notation as ``1.0E7`` outside ``[1e-3, 1e7)``, and
  ``null`` for NaN and the infinities;
* a string escapes ``"``, ``\\``, ``\\b \\t \\n \\f \\r`` by letter, the other
  control characters, U+007F to U+009F, U+2028 and U+2029 as ``\\uXXXX`` with
  upper-case hex digits, and nothing else (not ``/``, not non-ASCII text);
* a ``TreeMap<String, ...>`` or ``TreeSet`` is ordered by ``String.compareTo``,
  which compares UTF-16 code units, not code points.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal

__all__ = ["bean", "java_double", "java_string", "object_key_map", "utf16_key"]

_LETTER_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                   "\f": "\\f", "\r": "\\r"}  # fmt: skip


def _escape(ch: str) -> str:
    letter = _LETTER_ESCAPES.get(ch)
    if letter is not None:
        return letter
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0 or code in (0x2028, 0x2029):
        return f"\\u{code:04X}"
    return ch


_ESCAPES = {chr(c): _escape(chr(c)) for c in [*range(0xA0), 0x2028, 0x2029]}


def java_string(text: str) -> str:
    """A JSON string literal as fastjson's SerializeWriter writes ``text``."""
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def java_double(value: float) -> str:
    """``value`` as fastjson writes a ``double``: Java's ``Double.toString`` digits."""
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    # Python's repr and Ryu both give the shortest digits that read back as the same
    # double; only the layout differs.
    sign = "-" if value < 0 else ""
    parts = Decimal(repr(abs(value))).as_tuple()
    all_digits = "".join(map(str, parts.digits))
    exp = len(all_digits) + int(parts.exponent) - 1  # of the first digit
    digits = all_digits.lstrip("0").rstrip("0")
    exp -= len(all_digits) - len(all_digits.lstrip("0"))
    if -3 <= exp < 7:
        if exp >= 0:
            int_part = digits[: exp + 1].ljust(exp + 1, "0")
            frac_part = digits[exp + 1 :] or "0"
        else:
            int_part = "0"
            frac_part = "0" * (-exp - 1) + digits
        return f"{sign}{int_part}.{frac_part}"
    if len(digits) == 1:
        # Double.toString prints two digits in scientific notation, and Ryu then keeps
        # the exact value's first two, rounded: 1.0E7, but 4.9E-324 for Double.MIN_VALUE.
        mantissa, _, exp_text = f"{Decimal(abs(value)):.1E}".partition("E")
        digits, exp = mantissa.replace(".", ""), int(exp_text)
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def utf16_key(text: str) -> bytes:
    """A sort key ordering strings as Java's ``String.compareTo`` does."""
    return text.encode("utf-16-be", "surrogatepass")


def bean(fields: Mapping[str, str | None]) -> str:
    """A Java bean's JSON: already-written values, by field name, nulls left out."""
    parts = [
        f"{java_string(name)}:{text}"
        for name, text in sorted(fields.items(), key=lambda kv: utf16_key(kv[0]))
        if text is not None
    ]
    return "{" + ",".join(parts) + "}"


def object_key_map(entries: Iterable[tuple[str, str]]) -> str:
    """A map whose keys are beans: each key's JSON in key position, in the order given."""
    return "{" + ",".join(f"{key}:{value}" for key, value in entries) + "}"
