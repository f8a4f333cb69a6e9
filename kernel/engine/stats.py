"""Consumer statistics (Java's ConsumerStatsManager): rates and times per topic.

Each figure is kept as a cumulative count with a timestamped snapshot, so a rate
is (count now - count at the last snapshot) / elapsed, over a window of about a
minute like Java's StatsItemSet minute rates.
"""

from __future__ import annotations

import time
from collections import defaultdict

import attrs

from rmqk.spi.transport import ConsumeStatus

__all__ = ["ConsumerStats", "TopicStats"]

WINDOW_S = 60.0


@attrs.define
class _Counter:
    total: float = 0.0
    times: int = 0
    snap_total: float = 0.0
    snap_times: int = 0
    snap_at: float = attrs.field(factory=time.monotonic)

    def add(self, value: float, times: int = 1) -> None:
        # _roll inlined: this runs a few times per pull.
        now = time.monotonic()
        if now - self.snap_at > WINDOW_S:
            self.snap_total, self.snap_times, self.snap_at = self.total, self.times, now
        self.total += value
        self.times += times

    def _roll(self) -> None:
        now = time.monotonic()
        if now - self.snap_at > WINDOW_S:
            self.snap_total, self.snap_times, self.snap_at = self.total, self.times, now

    def rate(self) -> float:
        self._roll()
        elapsed = max(time.monotonic() - self.snap_at, 1e-3)
        return (self.total - self.snap_total) / elapsed

    def average(self) -> float:
        self._roll()
        n = self.times - self.snap_times
        return (self.total - self.snap_total) / n if n else 0.0


@attrs.define
class TopicStats:
    pull_rt: _Counter = attrs.field(factory=_Counter)
    pull_tps: _Counter = attrs.field(factory=_Counter)
    consume_rt: _Counter = attrs.field(factory=_Counter)
    consume_ok: _Counter = attrs.field(factory=_Counter)
    consume_failed: _Counter = attrs.field(factory=_Counter)
    consumed_ok_total: int = 0
    consumed_failed_total: int = 0
    # Records of pull bodies that could not be decoded (or inflated past the limit).
    skipped_records_total: int = 0
    # Bodies a sink could not parse (body_format = "json") and kept raw in its
    # corrupt-record column, as the sink reported them.
    bad_bodies_total: int = 0


class ConsumerStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = defaultdict(TopicStats)

    def pull_rt(self, topic: str, ms: float) -> None:
        self.topics[topic].pull_rt.add(ms)

    def pull_tps(self, topic: str, n: int) -> None:
        self.topics[topic].pull_tps.add(n)

    def pulled(self, topic: str, rt_ms: float, n: int) -> None:
        """A pull that found ``n`` messages: :meth:`pull_rt` and :meth:`pull_tps` at once."""
        t = self.topics[topic]
        t.pull_rt.add(rt_ms)
        t.pull_tps.add(n)

    def consume_rt(self, topic: str, ms: float) -> None:
        self.topics[topic].consume_rt.add(ms)

    def add_consume_rt(self, topic: str, total_ms: float, calls: int) -> None:
        """Several listener calls at once: their summed time, counted as ``calls``."""
        self.topics[topic].consume_rt.add(total_ms, calls)

    def consume_ok(self, topic: str, n: int) -> None:
        t = self.topics[topic]
        t.consume_ok.add(n)
        t.consumed_ok_total += n

    def consume_failed(self, topic: str, n: int) -> None:
        t = self.topics[topic]
        t.consume_failed.add(n)
        t.consumed_failed_total += n

    def skipped_records(self, topic: str, n: int) -> None:
        self.topics[topic].skipped_records_total += n

    def bad_bodies(self, topic: str, n: int) -> None:
        self.topics[topic].bad_bodies_total += n

    def consume_status(self, topic: str) -> ConsumeStatus:
        """ConsumerStatsManager.consumeStatus: zeros for a topic with no statistics yet."""
        s = self.topics.get(topic)
        if s is None:
            return ConsumeStatus()
        return ConsumeStatus(
            pull_rt=float(s.pull_rt.average()),
            pull_tps=float(s.pull_tps.rate()),
            consume_rt=float(s.consume_rt.average()),
            consume_ok_tps=float(s.consume_ok.rate()),
            consume_failed_tps=float(s.consume_failed.rate()),
            consume_failed_msgs=s.consumed_failed_total,
        )
