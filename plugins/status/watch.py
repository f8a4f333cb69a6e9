"""``rmqk status --watch``: each group's total lag over time, above its tables.

A table says where the lag is now; the sparkline says where it is going (a
backlog worked off, a steady state, a consumer falling behind), which is what
one watches a group for.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Sequence

from rmqk.console.termchart import sparkline
from rmqk.plugins.status.collect import GroupStatus

__all__ = ["CLEAR_SCREEN", "LagHistory", "format_watch", "lag_line"]

# Cursor home, then erase the screen below: each redraw replaces the last.
CLEAR_SCREEN = "\x1b[H\x1b[J"

# Samples kept per group: more than any terminal line shows.
_KEEP = 200


def _key(status: GroupStatus) -> str:
    return f"{status.name or ''}/{status.group}"


class LagHistory:
    """Each group's total lag, one sample per redraw."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[int]] = {}

    def add(self, statuses: Sequence[GroupStatus]) -> None:
        for s in statuses:
            self._samples.setdefault(_key(s), deque(maxlen=_KEEP)).append(s.lag)

    def of(self, status: GroupStatus) -> tuple[int, ...]:
        return tuple(self._samples.get(_key(status), ()))


def lag_line(label: str, samples: Sequence[int], *, width: int, unicode: bool) -> str:
    """``label lag ▁▂▅█ now N (min A, max B)``, at most ``width`` columns."""
    if not samples:
        return f"{label} lag: no sample yet"
    now = samples[-1]
    tail = f" now {now:,} (min {min(samples):,}, max {max(samples):,})"
    head = f"{label} lag "
    room = max(width - len(head) - len(tail), 1)
    return head + sparkline(samples, width=room, unicode=unicode) + tail


def format_watch(
    statuses: Sequence[GroupStatus],
    history: LagHistory,
    *,
    tables: str,
    seconds: float,
    width: int,
    unicode: bool,
    now: datetime.datetime,
) -> str:
    """One screen: a title line, a lag sparkline per group, then the status tables."""
    lines = [f"rmqk status, every {seconds:g} s, {now:%H:%M:%S}; Ctrl-C stops".ljust(width)[:width]]
    for s in statuses:
        label = f"[consumers.{s.name}]" if s.name else f"group {s.group}"
        lines.append(lag_line(label, history.of(s), width=width, unicode=unicode))
    lines.append("")
    lines.append(tables)
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())
