"""How option values and keys are shown in messages and in ``rmqk check``."""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime

__all__ = ["describe_value", "render_key", "render_value", "suggest", "unknown_key_message"]


def describe_value(value: object) -> str:
    """A value as a config author would name it: 'string "20"', 'float 2.5'."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
    }.get(type(value))
    if kind is not None:
        return f"{kind} {render_value(value)}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return f"array {render_value(value)}"
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"


def render_value(value: object) -> str:
    """A value in TOML syntax (enums by name), for messages and ``rmqk check``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = ", ".join(f"{render_key(k)} = {render_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if value is None:
        return "(none)"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def render_key(key: object) -> str:
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else render_value(text)


def suggest(word: str, candidates: Iterable[str], *, case_insensitive: bool = False) -> str:
    """' (did you mean "x"?)' for the closest candidate, or ''."""
    pool = list(candidates)
    if case_insensitive:
        for c in pool:
            if c.lower() == word.lower():
                return f" (did you mean {c!r}?)"
    close = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not close and len(word) >= 3:
        # Abbreviations ("expr") score low with difflib but are clear enough.
        close = [c for c in pool if c.startswith(word)][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key_message(key: str, known: Collection[str]) -> str:
    hint = suggest(key, known)
    if hint:
        return f"unknown key{hint}"
    return "unknown key; allowed keys: " + ", ".join(sorted(known))
