"""The asyncio lite pull consumer (Java's DefaultLitePullConsumer and its Impl).

The Kafka-like consumer: the application asks for messages with :meth:`poll`
and owns its offsets (``seek``, ``commit``), instead of registering a listener.
Queues come either from ``subscribe`` (group membership and rebalance, as a
``CONSUME_ACTIVELY`` member) or from ``assign`` (a fixed set, no group
coordination); a consumer uses one or the other, never both.

Each held queue has one background fetcher that long-polls the broker and puts
every non-empty pull response, one batch, into a buffer shared by all queues.
``poll`` hands out one batch at a time, from one queue, in the order they were
fetched, and moves that queue's consumed offset to the first offset not yet
handed out. ``commit`` writes consumed offsets to the offset store; with
``auto_commit`` (the default) every ``auto_commit_interval_ms`` a poll commits
what earlier polls returned, and ``close`` commits everything returned.

Behaviour and numbers follow Apache RocketMQ 4.9.8's ``DefaultLitePullConsumerImpl``
where it has them. Where rmqk differs it says so: ``pause`` also holds back the
batches already fetched for a queue (Java still returns them; Kafka does not),
``close`` with auto commit commits everything handed out (Java persists only the
last poll-time commit), ``commit`` waits for the brokers to confirm, and a queue
taken away by a rebalance first gets the offset of what earlier polls returned
committed when auto commit is on.

The package's modules each hold one part: ``options`` (the lite pull options and
their validator), ``queues`` (subscription mode and per-queue state),
``buffer`` (the poll buffer), ``fetch`` (the fetchers, over the shared pull
path of :mod:`rmqk.engine.pull`), ``commit``, ``seek``, ``rebalance`` and
``consumer`` (the public API); what it reports to brokers is
:class:`rmqk.engine.member.ConsumerMember`'s.
"""

from __future__ import annotations

from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer, RebalanceListener
from rmqk.options.lite_pull import (
    LITE_PULL_OPTION_NAMES,
    LitePullOptions,
    resolve_lite_pull_options,
)

__all__ = [
    "LITE_PULL_OPTION_NAMES",
    "AsyncLitePullConsumer",
    "LitePullOptions",
    "RebalanceListener",
    "resolve_lite_pull_options",
]
