"""The metrics: counters fed by the consume hooks, and figures read from consumers at scrape time.

Fed by ``rmqk_consume_message_before``/``_after`` (one update per batch):

* ``rmqk_consumed_messages_total{group,topic,result}``: result ``success`` or ``failure``;
* ``rmqk_consume_duration_seconds{group,topic}``: histogram of listener or sink calls;
* ``rmqk_retried_messages_total{group,topic}``: messages delivered again (reconsume times > 0);
* ``rmqk_dlq_messages_total{group,topic}``: failed messages past ``max_reconsume_times``,
  which the broker moves to ``%DLQ%<group>``.

Read from each consumer when scraped (``ConsumerStats`` and the process queues):

* ``rmqk_pulled_messages_total{group,topic}`` and ``rmqk_pull_latency_seconds{group,topic}``
  (a summary: count and sum of pull round trips that found messages);
* ``rmqk_pull_tps``, ``rmqk_consume_ok_tps``, ``rmqk_consume_failed_tps``: Java's one-minute
  rates, as Apache's admin tools show them;
* ``rmqk_skipped_records_total{group,topic}``: pulled records that could not be decoded
  (or inflated past ``max_decompressed_body_size``), skipped and logged once each;
* ``rmqk_bad_bodies_total{group,topic}``: bodies the sink could not parse
  (``body_format = "json"``) and kept raw in its corrupt-record column;
* ``rmqk_offsets_reset_total{group,topic}``: queues started afresh because their offsets
  went backwards (``on_offsets_reset = "resume"``, issue 25);
* per queue (``group,topic,broker,queue``): ``rmqk_process_queue_messages``,
  ``rmqk_process_queue_bytes``, ``rmqk_queue_committed_offset``, ``rmqk_queue_max_offset``
  and ``rmqk_queue_lag_messages`` (max offset minus committed offset);
* ``rmqk_consumer_queues{group}``: queues the consumer holds.

The topic label is the queue's topic, so retries show under ``%RETRY%<group>``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from rmqk.console.progress import ConsumerProgress, fetch_max_offsets, snapshot
from rmqk.model import MessageModel, ServiceState
from rmqk.spi.contexts import ConsumeMessageContext, ConsumerView

__all__ = ["ConsumerCollector", "RmqkMetrics"]

log = logging.getLogger("rmqk.plugins.prometheus")

# Listener calls range from microseconds (a cheap sink) to minutes (consume_timeout).
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
_QUEUE_LABELS = ["group", "topic", "broker", "queue"]


@runtime_checkable
class RetryingConsumer(ConsumerView, Protocol):
    """A consumer that sends failed messages back (the push consumer), with its limit."""

    def max_reconsume_times(self) -> int: ...


class ConsumerCollector(Collector):
    """Reads every known consumer on its own event loop when Prometheus scrapes."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._consumers: dict[int, tuple[ConsumerView, asyncio.AbstractEventLoop]] = {}

    def track(self, consumer: ConsumerView, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._consumers[id(consumer)] = (consumer, loop)

    def consumer_of(self, group: str) -> ConsumerView | None:
        with self._lock:
            for consumer, _ in self._consumers.values():
                if consumer.group == group:
                    return consumer
        return None

    def _progress(self) -> list[ConsumerProgress]:
        with self._lock:
            tracked = list(self._consumers.items())
        out: list[ConsumerProgress] = []
        for key, (consumer, loop) in tracked:
            if loop.is_closed() or consumer.state is ServiceState.SHUTDOWN_ALREADY:
                with self._lock:
                    self._consumers.pop(key, None)
                continue
            try:
                future = asyncio.run_coroutine_threadsafe(self._read(consumer), loop)
                out.append(future.result(self.timeout_s))
            except Exception as exc:
                log.warning(
                    "metrics of consumer group %s unavailable: %s",
                    consumer.group,
                    exc or type(exc).__name__,
                )
        return out

    async def _read(self, consumer: ConsumerView) -> ConsumerProgress:
        # The progress helpers read more of a push consumer than the view promises.
        # Leave time for the snapshot itself within the scrape's budget.
        max_offsets = await fetch_max_offsets(consumer, timeout_s=self.timeout_s * 0.8)
        return snapshot(consumer, max_offsets)

    def collect(self) -> Iterator[Metric]:
        progress = self._progress()
        topic_labels = ["group", "topic"]
        pulled = CounterMetricFamily(
            "rmqk_pulled_messages", "Messages pulled from brokers.", labels=topic_labels
        )
        pull_latency = SummaryMetricFamily(
            "rmqk_pull_latency_seconds",
            "Round trips of pull requests that found messages.",
            labels=topic_labels,
        )
        skipped = CounterMetricFamily(
            "rmqk_skipped_records",
            "Pulled records that could not be decoded, skipped.",
            labels=topic_labels,
        )
        bad_bodies = CounterMetricFamily(
            "rmqk_bad_bodies",
            "Bodies the sink could not parse, kept raw in its corrupt-record column.",
            labels=topic_labels,
        )
        resets = CounterMetricFamily(
            "rmqk_offsets_reset",
            "Queues started afresh because their offsets went backwards (on_offsets_reset).",
            labels=topic_labels,
        )
        pull_tps = GaugeMetricFamily(
            "rmqk_pull_tps", "Messages pulled per second over the last minute.", labels=topic_labels
        )
        ok_tps = GaugeMetricFamily(
            "rmqk_consume_ok_tps",
            "Messages consumed per second over the last minute.",
            labels=topic_labels,
        )
        failed_tps = GaugeMetricFamily(
            "rmqk_consume_failed_tps",
            "Messages whose consume failed, per second over the last minute.",
            labels=topic_labels,
        )
        cached = GaugeMetricFamily(
            "rmqk_process_queue_messages",
            "Messages pulled and not yet acknowledged.",
            labels=_QUEUE_LABELS,
        )
        cached_bytes = GaugeMetricFamily(
            "rmqk_process_queue_bytes",
            "Body bytes of messages pulled and not yet acknowledged.",
            labels=_QUEUE_LABELS,
        )
        committed = GaugeMetricFamily(
            "rmqk_queue_committed_offset",
            "The offset the consumer commits for the queue (the next to consume).",
            labels=_QUEUE_LABELS,
        )
        max_offset = GaugeMetricFamily(
            "rmqk_queue_max_offset", "The broker's max offset of the queue.", labels=_QUEUE_LABELS
        )
        lag = GaugeMetricFamily(
            "rmqk_queue_lag_messages",
            "Messages on the broker not yet acknowledged (max offset - committed offset).",
            labels=_QUEUE_LABELS,
        )
        queues = GaugeMetricFamily(
            "rmqk_consumer_queues", "Queues the consumer holds.", labels=["group"]
        )
        for p in progress:
            queues.add_metric([p.group], len(p.queues))
            for t in p.topics:
                labels = [p.group, t.topic]
                pulled.add_metric(labels, t.pulled_messages)
                pull_latency.add_metric(labels, t.pull_count, t.pull_time_ms / 1000)
                skipped.add_metric(labels, t.skipped_records)
                bad_bodies.add_metric(labels, t.bad_bodies)
                pull_tps.add_metric(labels, t.pull_tps)
                ok_tps.add_metric(labels, t.consume_ok_tps)
                failed_tps.add_metric(labels, t.consume_failed_tps)
            for topic, times in p.offsets_resets:
                resets.add_metric([p.group, topic], times)
            for q in p.queues:
                mq = q.queue
                labels = [p.group, mq.topic, mq.broker_name, str(mq.queue_id)]
                cached.add_metric(labels, q.cached_messages)
                cached_bytes.add_metric(labels, q.cached_bytes)
                if q.committed_offset >= 0:
                    committed.add_metric(labels, q.committed_offset)
                if q.max_offset is not None:
                    max_offset.add_metric(labels, q.max_offset)
                if q.lag is not None:
                    lag.add_metric(labels, q.lag)
        yield from (pulled, pull_latency, skipped, bad_bodies, resets)
        yield from (pull_tps, ok_tps, failed_tps)
        yield from (cached, cached_bytes, committed, max_offset, lag, queues)


class RmqkMetrics:
    """Every rmqk metric in one registry; the hook plugin calls :meth:`before` and :meth:`after`."""

    def __init__(self, registry: CollectorRegistry | None = None, timeout_s: float = 5.0) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["group", "topic"]
        self.consumed = Counter(
            "rmqk_consumed_messages",
            "Messages handed to a listener or sink, by result.",
            [*labels, "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "rmqk_consume_duration_seconds",
            "Time a listener or sink took for one batch.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.retried = Counter(
            "rmqk_retried_messages",
            "Messages delivered again after a failed consume (reconsume times > 0).",
            labels,
            registry=self.registry,
        )
        self.dlq = Counter(
            "rmqk_dlq_messages",
            "Failed messages past max_reconsume_times, moved to the group's %DLQ% topic.",
            labels,
            registry=self.registry,
        )
        self.collector = ConsumerCollector(timeout_s)
        self.registry.register(self.collector)

    def before(self, context: ConsumeMessageContext) -> None:
        again = sum(1 for m in context.messages if m.reconsume_times > 0)
        if again:
            self.retried.labels(context.consumer_group, context.queue.topic).inc(again)

    def after(self, context: ConsumeMessageContext) -> None:
        group, topic = context.consumer_group, context.queue.topic
        count = len(context.messages)
        result = "success" if context.success else "failure"
        self.consumed.labels(group, topic, result).inc(count)
        self.duration.labels(group, topic).observe(context.duration_ms / 1000)
        if not context.success:
            dead = self._dead_letters(context)
            if dead:
                self.dlq.labels(group, topic).inc(dead)

    def _dead_letters(self, context: ConsumeMessageContext) -> int:
        """How many of a failed batch's messages the broker will move to %DLQ%.

        The broker does so when the reconsume times the message carries reached the
        maximum (Java's consumerSendMsgBack and the orderly service's own check);
        broadcasting consumers drop failed messages instead.
        """
        consumer = self.collector.consumer_of(context.consumer_group)
        if consumer is None:
            return 0
        if consumer.message_model is MessageModel.BROADCASTING:
            return 0
        if not isinstance(consumer, RetryingConsumer):
            return 0
        limit = consumer.max_reconsume_times()
        return sum(1 for m in context.messages if m.reconsume_times >= limit)
