"""What a worker process of ``processes = N`` tells its supervisor over its pipe."""

from __future__ import annotations

import attrs

__all__ = ["WorkerFailed", "WorkerFigures", "WorkerLog", "WorkerReady", "WorkerStarted"]


@attrs.frozen
class WorkerFigures:
    """A worker's counters, sent every second and once more after it stopped."""

    queues: int = 0
    consumed_ok: int = 0
    consumed_failed: int = 0
    cached: int = 0
    flow_control_events: int = 0
    # Bodies the sink could not parse and kept raw (body_format = "json").
    bad_bodies: int = 0
    lag: int | None = None
    namesrv: str = ""
    namesrv_error: str | None = None
    unrouted_topics: tuple[str, ...] = ()
    final: bool = False

    def plus(self, other: WorkerFigures) -> WorkerFigures:
        """The counters of both; lag is unknown while either's is."""
        lag = None if self.lag is None or other.lag is None else self.lag + other.lag
        return WorkerFigures(
            queues=self.queues + other.queues,
            consumed_ok=self.consumed_ok + other.consumed_ok,
            consumed_failed=self.consumed_failed + other.consumed_failed,
            cached=self.cached + other.cached,
            flow_control_events=self.flow_control_events + other.flow_control_events,
            bad_bodies=self.bad_bodies + other.bad_bodies,
            lag=lag,
            namesrv=self.namesrv or other.namesrv,
            namesrv_error=self.namesrv_error or other.namesrv_error,
            unrouted_topics=tuple(sorted({*self.unrouted_topics, *other.unrouted_topics})),
        )

    def banked(self) -> WorkerFigures:
        """What a stopped incarnation leaves to the group's totals: its counts only."""
        return WorkerFigures(
            consumed_ok=self.consumed_ok,
            consumed_failed=self.consumed_failed,
            flow_control_events=self.flow_control_events,
            bad_bodies=self.bad_bodies,
            lag=0,
        )


@attrs.frozen
class WorkerReady:
    """The worker's consumer started paused: registered with the brokers, holding no queue.

    The supervisor tells the first workers to consume together, once all are
    ready (see :mod:`rmqk.app.supervisor`), so each one's first rebalance sees them all.
    """

    pid: int


@attrs.frozen
class WorkerStarted:
    """The worker's consumer resumed on the go (its queues come with the rebalance that follows)."""

    pid: int


@attrs.frozen
class WorkerLog:
    """Log text the worker formatted, for the supervisor's stderr (and summary line)."""

    text: str


@attrs.frozen
class WorkerFailed:
    """Why the worker is exiting with an error, as one line."""

    reason: str
    # An error a restart cannot cure (a queue's offsets went backwards, a sink that
    # halted on a message it refuses): the supervisor stops every worker and ends with
    # it instead of restarting the worker.
    final: bool = False
