"""Progress of a running push consumer: its queues, offsets, lag and counters.

Read from the consumer's public state (``rebalance.process_queue_table``,
``offset_store``, ``stats``) without changing it, for ``rmqk run``'s summary line
and for metrics plugins. Lag needs the brokers' max offsets, which
:func:`fetch_max_offsets` asks for; everything else is in memory.

:func:`snapshot` must run on the consumer's event loop thread, where the engine
mutates what it reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rmqk.model import RETRY_GROUP_TOPIC_PREFIX, MessageQueue

__all__ = [
    "ConsumerProgress",
    "QueueProgress",
    "TopicCounters",
    "fetch_max_offsets",
    "snapshot",
]

log = logging.getLogger("rmqk.progress")


@attrs.frozen
class QueueProgress:
    """One queue a consumer holds."""

    queue: MessageQueue
    cached_messages: int
    cached_bytes: int
    # The offset the consumer would commit now; -1 when it has none yet.
    committed_offset: int
    # The broker's max offset when it was last asked; None when unknown.
    max_offset: int | None = None
    locked: bool = False

    @property
    def lag(self) -> int | None:
        """Messages on the broker not yet acknowledged, or None when unknown."""
        if self.max_offset is None or self.committed_offset < 0:
            return None
        return max(self.max_offset - self.committed_offset, 0)


@attrs.frozen
class TopicCounters:
    """Cumulative figures of one topic since the consumer started (Java's ConsumerStatsManager)."""

    topic: str
    pulled_messages: int
    pull_count: int
    pull_time_ms: float
    consumed_ok: int
    consumed_failed: int
    consume_count: int
    consume_time_ms: float
    # Java's per-minute rates, as ``rmqk status`` and Apache's admin tools show them.
    pull_tps: float
    consume_ok_tps: float
    consume_failed_tps: float
    # Records skipped because they could not be decoded (issue 19: never a stall).
    skipped_records: int = 0
    # Bodies the sink could not parse and kept raw (its corrupt-record column).
    bad_bodies: int = 0


@attrs.frozen
class ConsumerProgress:
    group: str
    client_id: str
    state: str
    queues: tuple[QueueProgress, ...]
    topics: tuple[TopicCounters, ...]
    # The name servers, and why none answered the last route request (None: one did).
    namesrv: str = ""
    namesrv_error: str | None = None
    # Times a queue was held back by the consumer's flow control so far.
    flow_control_events: int = 0
    # Subscribed topics no route has given queues for: misspelt, or not created yet.
    unrouted_topics: tuple[str, ...] = ()
    # (topic, times) a queue of the topic started afresh because its offsets went
    # backwards (on_offsets_reset = "resume"), by the consumer or its sink.
    offsets_resets: tuple[tuple[str, int], ...] = ()

    @property
    def consumed_ok(self) -> int:
        return sum(t.consumed_ok for t in self.topics)

    @property
    def consumed_failed(self) -> int:
        return sum(t.consumed_failed for t in self.topics)

    @property
    def bad_bodies(self) -> int:
        return sum(t.bad_bodies for t in self.topics)

    @property
    def cached_messages(self) -> int:
        return sum(q.cached_messages for q in self.queues)

    @property
    def lag(self) -> int | None:
        """Total lag over the queues whose lag is known; None when none is."""
        known = [q.lag for q in self.queues if q.lag is not None]
        return sum(known) if known else None


def _committed_offsets(consumer: Any, topics: Iterable[str]) -> dict[MessageQueue, int]:
    store = getattr(consumer, "offset_store", None)
    if store is None:
        return {}
    out: dict[MessageQueue, int] = {}
    for topic in set(topics):
        try:
            out.update(store.clone_offset_table(topic))
        except Exception:
            log.debug("offset table of %s unreadable", topic, exc_info=True)
    return out


def snapshot(
    consumer: Any, max_offsets: Mapping[MessageQueue, int] | None = None
) -> ConsumerProgress:
    """The consumer's progress now; ``max_offsets`` from :func:`fetch_max_offsets` fill in lag."""
    table: Mapping[MessageQueue, Any] = consumer.rebalance.process_queue_table
    offsets = _committed_offsets(consumer, (mq.topic for mq in table))
    known = max_offsets or {}
    queues = tuple(
        QueueProgress(
            queue=mq,
            cached_messages=int(pq.msg_count),
            cached_bytes=int(pq.msg_size),
            committed_offset=int(offsets.get(mq, -1)),
            max_offset=known.get(mq),
            locked=bool(pq.locked),
        )
        for mq, pq in sorted(table.items())
        if not pq.dropped
    )
    topics = tuple(
        TopicCounters(
            topic=topic,
            pulled_messages=int(s.pull_tps.total),
            pull_count=int(s.pull_rt.times),
            pull_time_ms=float(s.pull_rt.total),
            consumed_ok=int(s.consumed_ok_total),
            consumed_failed=int(s.consumed_failed_total),
            consume_count=int(s.consume_rt.times),
            consume_time_ms=float(s.consume_rt.total),
            pull_tps=float(s.pull_tps.rate()),
            consume_ok_tps=float(s.consume_ok.rate()),
            consume_failed_tps=float(s.consume_failed.rate()),
            skipped_records=int(s.skipped_records_total),
            bad_bodies=int(s.bad_bodies_total),
        )
        for topic, s in sorted(consumer.stats.topics.items())
    )
    state = getattr(consumer.state, "value", str(consumer.state))
    rebalance = consumer.rebalance
    routed: Mapping[str, Any] = getattr(rebalance, "topic_subscribe_info", {})
    unrouted = tuple(
        sorted(
            topic
            for topic in getattr(rebalance, "subscription_inner", {})
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and not routed.get(topic)
        )
    )
    client = getattr(consumer, "client", None)
    flow = getattr(consumer, "flow", None)
    return ConsumerProgress(
        group=consumer.group,
        client_id=str(consumer.client_id),
        state=str(state),
        queues=queues,
        topics=topics,
        namesrv=str(getattr(client, "namesrv_text", "")),
        namesrv_error=getattr(client, "namesrv_error", None),
        flow_control_events=int(getattr(flow, "events", 0)),
        unrouted_topics=unrouted,
        offsets_resets=tuple(sorted(getattr(consumer, "offsets_resets", {}).items())),
    )


async def fetch_max_offsets(
    consumer: Any, queues: Iterable[MessageQueue] | None = None, timeout_s: float = 3.0
) -> dict[MessageQueue, int]:
    """The brokers' max offsets of the queues the consumer holds (or of ``queues``).

    A queue whose broker does not answer within ``timeout_s`` is left out, so a
    slow broker shows as unknown lag rather than stalling the caller.
    """
    wanted = sorted(queues if queues is not None else consumer.rebalance.process_queue_table)
    if not wanted:
        return {}

    async def one(mq: MessageQueue) -> int | None:
        try:
            return int(await asyncio.wait_for(consumer.max_offset(mq), timeout_s))
        except Exception as exc:
            log.debug("max offset of %s unavailable: %s", mq, exc)
            return None

    results = await asyncio.gather(*(one(mq) for mq in wanted))
    return {mq: value for mq, value in zip(wanted, results, strict=True) if value is not None}
