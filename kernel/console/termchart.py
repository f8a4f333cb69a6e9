"""Small pictures for a terminal: horizontal bars, sparklines, a progress line.

Every function returns plain strings of a known width, so callers (``rmqk demo``,
``rmqk status --watch``) can test them on fixed inputs and redraw a line in
place. Unicode block characters are used when the stream's encoding can carry
them; ASCII otherwise, so a ``LANG=C`` terminal or a log file shows no mojibake.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "CLEAR_EOL",
    "bar",
    "bar_chart",
    "progress_line",
    "sparkline",
    "use_unicode",
]

# ANSI "erase to end of line": a shorter redraw leaves no tail of the longer one.
CLEAR_EOL = "\x1b[K"

# Eighths of a cell, so a bar's length shows a difference smaller than a cell.
_EIGHTHS = " ▏▎▍▌▋▊▉█"
_SPARKS = "▁▂▃▄▅▆▇█"
_ASCII_SPARKS = "_.-=*#"


def use_unicode(stream: Any) -> bool:
    """Whether ``stream`` encodes UTF-8 (block characters) or not (ASCII)."""
    encoding = str(getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return encoding in ("utf8", "utf8sig")


def bar(value: float, top: float, width: int, *, unicode: bool = True) -> str:
    """A bar ``width`` cells wide when ``value == top``, padded with spaces to ``width``."""
    if width <= 0:
        return ""
    share = 0.0 if top <= 0 else min(max(value / top, 0.0), 1.0)
    if not unicode:
        cells = round(share * width)
        if value > 0 and cells == 0:
            cells = 1  # something is not nothing
        return ("#" * cells).ljust(width)
    eighths = round(share * width * 8)
    if value > 0 and eighths == 0:
        eighths = 1
    full, part = divmod(eighths, 8)
    drawn = "█" * full + (_EIGHTHS[part] if part else "")
    return drawn.ljust(width)


def bar_chart(
    rows: Sequence[tuple[str, int]], *, width: int = 40, unicode: bool = True, indent: str = "  "
) -> list[str]:
    """One line per row: label, bar scaled to the largest value, and the value."""
    if not rows:
        return []
    label_w = max(len(label) for label, _ in rows)
    top = max(value for _, value in rows)
    value_w = max(len(f"{value:,}") for _, value in rows)
    return [
        f"{indent}{label.ljust(label_w)} {bar(value, top, width, unicode=unicode)} "
        f"{value:>{value_w},}"
        for label, value in rows
    ]


def sparkline(values: Sequence[float], *, width: int | None = None, unicode: bool = True) -> str:
    """The last ``width`` values as one character each, lowest to highest.

    The scale starts at zero: a lag that never moves from 5,000 draws a
    high flat line, not a low one, so the height means something by itself.
    """
    shown = list(values)[-width:] if width else list(values)
    if not shown:
        return ""
    levels = _SPARKS if unicode else _ASCII_SPARKS
    top = max(shown)
    out = []
    for v in shown:
        if top <= 0 or not math.isfinite(v):
            out.append(levels[0])
            continue
        index = round(max(v, 0.0) / top * (len(levels) - 1))
        out.append(levels[index])
    return "".join(out)


def progress_line(
    label: str,
    done: int,
    total: int,
    rate: float,
    *,
    width: int = 30,
    unit: str = "msg/s",
    unicode: bool = True,
) -> str:
    """``label [bar] done/total rate unit``, the counts padded so the line never shrinks."""
    total_s = f"{total:,}"
    drawn = bar(done, total, width, unicode=unicode)
    if not unicode:
        drawn = drawn.replace(" ", ".")
    return f"{label} [{drawn}] {done:>{len(total_s)},}/{total_s} {rate:>9,.0f} {unit}"
