"""JSON bodies as Apache's fastjson writes and reads them.

fastjson differs from standard JSON in ways a client can observe:

* object fields are written in alphabetical order (``SortField`` is on by default);
* a map with non-string keys is written with the keys unquoted
  (``"brokerAddrs":{0:"127.0.0.1:10911"}``), and a map keyed by an object is
  written with the object itself as the key (``ConsumeStats.offsetTable``);
* ``null`` fields are left out.

:func:`dumps` writes that dialect (or standard JSON with ``standard=True``, as the
name server does for clients of version 4.9.4 and later); :func:`loads` reads
both, so ``rmqk admin`` can talk to any 4.9 broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from rmqk.wire.javajson import java_double, java_string

__all__ = ["JsonWireError", "ObjectKeyMap", "dumps", "loads"]


class JsonWireError(ValueError):
    """A body that is neither JSON nor fastjson's dialect of it."""


@attrs.frozen
class ObjectKeyMap:
    """A map whose keys are objects (fastjson writes them inline as keys)."""

    items: tuple[tuple[Any, Any], ...]

    def __iter__(self) -> Any:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def dumps(value: Any, *, standard: bool = False) -> bytes:
    """Encode ``value`` compactly with sorted keys; ``None`` fields are omitted.

    Integer keys are unquoted unless ``standard`` is set. ``ObjectKeyMap`` keys
    are written as JSON objects (fastjson's non-standard form) either way,
    because that is what the broker writes for ``ConsumeStats``. A lone surrogate
    is written as ``?``, as Java's UTF-8 encoder does, so a body is always sent.
    """
    out: list[str] = []
    _encode(value, out, standard)
    return "".join(out).encode("utf-8", "replace")


def _encode(value: Any, out: list[str], standard: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(java_double(value))  # Double.toString's layout; null for NaN, inf
    elif isinstance(value, str):
        out.append(java_string(value))  # fastjson's escapes, upper-case \uXXXX
    elif isinstance(value, ObjectKeyMap):
        out.append("{")
        for i, (key, item) in enumerate(value.items):
            if i:
                out.append(",")
            _encode(key, out, standard)
            out.append(":")
            _encode(item, out, standard)
        out.append("}")
    elif isinstance(value, Mapping):
        _encode_mapping(value, out, standard)
    elif isinstance(value, (list, tuple, set, frozenset)):
        items: Iterable[Any] = sorted(value) if isinstance(value, (set, frozenset)) else value
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _encode(item, out, standard)
        out.append("]")
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as a JSON body: {value!r}")


def _encode_mapping(value: Mapping[Any, Any], out: list[str], standard: bool) -> None:
    entries = [(k, v) for k, v in value.items() if v is not None]
    entries.sort(key=lambda kv: (isinstance(kv[0], str), kv[0]))
    out.append("{")
    for i, (key, item) in enumerate(entries):
        if i:
            out.append(",")
        if isinstance(key, str):
            out.append(java_string(key))
        elif isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"cannot encode map key {key!r} in a JSON body")
        elif standard:
            out.append(f'"{key}"')
        else:
            out.append(str(key))
        out.append(":")
        _encode(item, out, standard)
    out.append("}")


def loads(data: bytes | str) -> Any:
    """Decode standard JSON or fastjson's dialect.

    Maps keep string keys as ``str``; unquoted numeric keys become ``int``; a
    map with any object or array key becomes an :class:`ObjectKeyMap`.
    """
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        return json.loads(text)
    except ValueError:
        pass
    parser = _Parser(text)
    value = parser.value()
    parser.skip_ws()
    if parser.pos != len(text):
        raise JsonWireError(f"trailing data at character {parser.pos} of a JSON body")
    return value


_WS = " \t\r\n"
_BARE = set("0123456789+-.eE_$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class _Parser:
    """A small recursive-descent reader for what fastjson writes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._decoder = json.JSONDecoder()

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        self.pos = pos

    def _fail(self, what: str) -> JsonWireError:
        return JsonWireError(f"{what} at character {self.pos} of a JSON body")

    def value(self) -> Any:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise self._fail("unexpected end")
        ch = self.text[self.pos]
        if ch == "{":
            return self._object()
        if ch == "[":
            return self._array()
        if ch == '"' or ch == "'":
            return self._string()
        return self._bare()

    def _string(self) -> str:
        quote = self.text[self.pos]
        if quote == '"':
            try:
                value, end = json.decoder.scanstring(self.text, self.pos + 1)  # type: ignore[attr-defined]
            except ValueError as exc:
                raise self._fail(f"bad string ({exc})") from None
            self.pos = end
            return str(value)
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self._fail("unterminated string")
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def _bare(self) -> Any:
        start = self.pos
        text = self.text
        while self.pos < len(text) and text[self.pos] in _BARE:
            self.pos += 1
        token = text[start : self.pos]
        if not token:
            raise self._fail(f"unexpected character {text[start]!r}")
        if token == "true":
            return True
        if token == "false":
            return False
        if token == "null":
            return None
        try:
            return int(token)
        except ValueError:
            pass
        try:
            return float(token)
        except ValueError:
            return token  # an unquoted identifier key

    def _array(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        self.skip_ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return items
        while True:
            items.append(self.value())
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return items
            raise self._fail("expected ',' or ']'")

    def _object(self) -> Any:
        self.pos += 1
        pairs: list[tuple[Any, Any]] = []
        self.skip_ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return {}
        while True:
            key = self.value()
            self.skip_ws()
            if not self.text.startswith(":", self.pos):
                raise self._fail("expected ':'")
            self.pos += 1
            pairs.append((key, self.value()))
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                break
            raise self._fail("expected ',' or '}'")
        if all(isinstance(k, (str, int, float, bool)) or k is None for k, _ in pairs):
            return dict(pairs)
        return ObjectKeyMap(tuple(pairs))


def as_list(value: Any) -> Sequence[Any]:
    """A JSON array, or an empty list for null (fastjson omits empty collections)."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise JsonWireError(f"expected a JSON array, got {type(value).__name__}")
