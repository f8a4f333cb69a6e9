"""The live summary line ``rmqk run`` draws on a terminal."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Sequence
from typing import IO, Any, cast

from rmqk.spi.aio import wait_event

__all__ = ["SummaryLine", "progress_text"]

log = logging.getLogger("rmqk.cli")


def progress_text(
    name: str,
    *,
    queues: int,
    consumed: int,
    rate: float,
    failed: int,
    cached: int,
    held_rate: float,
    lag: int | None,
    namesrv: str = "",
    namesrv_error: str | None = None,
    unrouted_topics: Sequence[str] = (),
) -> str:
    """One consumer's part of the line (also a supervised group's, summed over its workers)."""
    if namesrv_error is not None:
        # Without routes every other figure is zero or unknown: say why instead.
        # "retrying" before the reason: a narrow terminal cuts the line's end.
        return f"{name}: name server {namesrv} unreachable, retrying ({namesrv_error})"
    flow = f", flow control {held_rate:,.0f}/s" if held_rate >= 0.5 else ""
    # A misspelt topic is otherwise only "0 queues ... lag ?" for as long as it runs.
    unrouted = (
        f", no route for topic {', '.join(unrouted_topics)} (does it exist?)"
        if unrouted_topics
        else ""
    )
    return (
        f"{name}: {queues} queues, {consumed:,} consumed ({rate:,.0f}/s), "
        f"{failed:,} failed, {cached:,} cached{flow}, lag {'?' if lag is None else f'{lag:,}'}"
        f"{unrouted}"
    )


class SummaryLine:
    """One line on a terminal, redrawn every ``interval`` seconds, saying how each consumer does.

    ``orders: 8 queues, 12,345 consumed (1,234/s), 0 failed, 32 cached, lag 1,200``, with
    ``flow control 12/s`` before the lag while queues are held back, or ``orders: name
    server 10.0.0.5:9876 unreachable, retrying (...)`` while no name server answers.
    Log records written to the same terminal first clear the line (see :meth:`stream`).
    """

    def __init__(
        self,
        consumers: Sequence[Any],
        out: IO[str],
        interval: float = 1.0,
        lag_interval: float = 5.0,
    ) -> None:
        self.consumers = list(consumers)
        self.out = out
        self.interval = interval
        self.lag_interval = lag_interval
        self._shown = False
        self._last: dict[str, tuple[float, int]] = {}
        self._last_flow: dict[str, tuple[float, int]] = {}
        self._max_offsets: dict[str, dict[Any, int]] = {}

    def render(self, now: float | None = None) -> str:
        from rmqk.console.progress import snapshot

        now = time.monotonic() if now is None else now
        parts = []
        for composed in self.consumers:
            name = composed.spec.name
            progress = snapshot(composed.consumer, self._max_offsets.get(name))
            done = progress.consumed_ok
            then, before = self._last.get(name, (now, done))
            rate = (done - before) / (now - then) if now > then else 0.0
            self._last[name] = (now, done)
            held = progress.flow_control_events
            held_then = self._last_flow.get(name, (now, held))
            self._last_flow[name] = (now, held)
            held_rate = (held - held_then[1]) / (now - held_then[0]) if now > held_then[0] else 0
            parts.append(
                progress_text(
                    name,
                    queues=len(progress.queues),
                    consumed=done,
                    rate=rate,
                    failed=progress.consumed_failed,
                    cached=progress.cached_messages,
                    held_rate=held_rate,
                    lag=progress.lag,
                    namesrv=progress.namesrv,
                    namesrv_error=progress.namesrv_error,
                    unrouted_topics=progress.unrouted_topics,
                )
            )
        return " | ".join(parts)

    def draw(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        if len(text) > width:
            text = text[: max(width - 3, 0)] + "..."
        self.out.write("\r\x1b[K" + text)
        self.out.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._shown = False

    def _queues_changed(self) -> bool:
        for composed in self.consumers:
            held = set(composed.consumer.rebalance.process_queue_table)
            if held != set(self._max_offsets.get(composed.spec.name, ())):
                return True
        return False

    async def refresh_lag(self) -> None:
        from rmqk.console.progress import fetch_max_offsets

        for composed in self.consumers:
            self._max_offsets[composed.spec.name] = await fetch_max_offsets(composed.consumer)

    async def run(self, stop: asyncio.Event) -> None:
        next_lag = 0.0
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() >= next_lag or self._queues_changed():
                        await self.refresh_lag()
                        next_lag = time.monotonic() + self.lag_interval
                    self.draw(self.render())
                except Exception:
                    # The summary is a convenience: it must never take the consumers down.
                    log.debug("summary line failed", exc_info=True)
                await wait_event(stop, self.interval)
        finally:
            self.clear()

    def stream(self) -> IO[str]:
        """A stream for log records that clears the summary line before each record."""
        summary = self

        class _Clearing:
            def write(self, text: str) -> int:
                summary.clear()
                return summary.out.write(text)

            def flush(self) -> None:
                summary.out.flush()

        return cast(IO[str], _Clearing())
