"""What ``rmqk demo`` checks and prints once the consumer is done.

The broker's side (per queue: max offset and the group's committed offset), the
output's side (two Spark jobs over the Parquet files: aggregates per queue and
tag, and every row's id and offset), and the report comparing them with what
was produced: every message exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from rmqk.console.termchart import bar, bar_chart
from rmqk.model.errors import RmqkError

if TYPE_CHECKING:
    from rmqk.plugins.spark.demo import ProduceResult

__all__ = ["DemoResult", "QueueReport", "format_report", "queue_offsets", "read_back"]


@attrs.frozen
class QueueReport:
    queue_id: int
    rows: int
    min_offset: int | None
    max_offset: int | None
    broker_max: int
    committed: int | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.broker_max - self.committed, 0)


@attrs.frozen
class DemoResult:
    produced: int
    rows: int
    distinct_ids: int
    distinct_offsets: int
    missing: int
    unexpected: int
    per_tag: tuple[tuple[str, int], ...]
    queues: tuple[QueueReport, ...]
    produce_seconds: float
    consume_seconds: float
    read_seconds: float
    flushes: int
    out_dir: str
    # A no-op consumer's msg/s over the same backlog in the same run (0: not measured).
    bare_consume_rate: float = 0.0

    @property
    def ok(self) -> bool:
        n = self.produced
        return (
            self.rows == n
            and self.distinct_ids == n
            and self.distinct_offsets == n
            and self.missing == 0
            and self.unexpected == 0
        )


async def queue_offsets(
    namesrv_addr: str, group: str, topic: str
) -> dict[int, tuple[int, int | None]]:
    """Per queue id: the broker's max offset and the group's committed offset."""
    from rmqk.spi.registry import get_plugin_manager, registries
    from rmqk.spi.transport import TransportConfig

    transport = registries().transports.create(
        "tcp",
        TransportConfig(
            namesrv_addrs=(namesrv_addr,),
            client_id="127.0.0.1@rmqk-demo",
            hook=get_plugin_manager().hook,
        ),
    )
    await transport.start()
    try:
        route = await transport.get_route(topic)
        if route is None:
            raise RmqkError(f"topic {topic} vanished from the name server")
        out: dict[int, tuple[int, int | None]] = {}
        for mq in sorted(route.subscribe_queues(topic)):
            broker = route.broker(mq.broker_name)
            addr = broker.select_addr() if broker else None
            if addr is None:
                continue
            high = await transport.get_max_offset(addr, mq)
            committed = await transport.query_consumer_offset(addr, group, mq)
            out[mq.queue_id] = (high, committed)
        return out
    finally:
        await transport.close()


def read_back(
    session: Any,
    out_dir: str,
    produced: ProduceResult,
    queues: dict[int, tuple[int, int | None]],
    group: str,
) -> DemoResult:
    """Two Spark jobs: the report's aggregates, and every row's id and offset for the checks."""
    from pyspark.sql import functions as F

    df = session.read.parquet(out_dir)
    groups = (
        df.groupBy("queue_id", "tags")
        .agg(
            F.count("*").alias("rows"),
            F.min("queue_offset").alias("lo"),
            F.max("queue_offset").alias("hi"),
        )
        .collect()
    )
    per_tag: dict[str, int] = {}
    per_queue: dict[int, tuple[int, int, int]] = {}
    for r in groups:
        per_tag[str(r["tags"])] = per_tag.get(str(r["tags"]), 0) + int(r["rows"])
        count, lo, hi = per_queue.get(int(r["queue_id"]), (0, r["lo"], r["hi"]))
        per_queue[int(r["queue_id"])] = (
            count + int(r["rows"]),
            min(lo, int(r["lo"])),
            max(hi, int(r["hi"])),
        )
    table = df.select("msg_id", "topic", "broker", "queue_id", "queue_offset").toArrow()
    written_ids = table.column("msg_id").to_pylist()
    offsets = set(
        zip(
            table.column("topic").to_pylist(),
            table.column("broker").to_pylist(),
            table.column("queue_id").to_pylist(),
            table.column("queue_offset").to_pylist(),
            strict=True,
        )
    )
    distinct_ids = set(written_ids)
    sent = set(produced.msg_ids)
    reports = []
    for qid in sorted(set(queues) | set(per_queue)):
        count, lo, hi = per_queue.get(qid, (0, None, None))
        broker_max, committed = queues.get(qid, (0, None))
        reports.append(QueueReport(qid, count, lo, hi, broker_max, committed))
    return DemoResult(
        produced=produced.count,
        rows=table.num_rows,
        distinct_ids=len(distinct_ids),
        distinct_offsets=len(offsets),
        missing=len(sent - distinct_ids),
        unexpected=len(distinct_ids - sent),
        per_tag=tuple(sorted(per_tag.items())),
        queues=tuple(reports),
        produce_seconds=produced.seconds,
        consume_seconds=0.0,
        read_seconds=0.0,
        flushes=0,
        out_dir=out_dir,
    )


def _output_line(out_dir: str, deleted: bool) -> str:
    if deleted:
        return (
            f"Parquet output: {out_dir}\n"
            "  (a temporary folder, deleted when the demo exits: rerun with --keep to keep it)"
        )
    return f"Parquet output: {out_dir}"


def format_report(result: DemoResult, *, deleted: bool = False, unicode: bool = True) -> str:
    """The report: bar charts of rows per tag and per queue, throughput, and the checks.

    ``deleted`` says the output folder is temporary and goes at exit; ``unicode``
    draws the bars with block characters, else with ``#``.
    """
    lines = ["", _output_line(result.out_dir, deleted), "", "rows per tag:"]
    lines += bar_chart(list(result.per_tag), width=40, unicode=unicode)
    lines += [
        "",
        f"{'per queue:':<11}{'rows':>9} {'':24}  {'offsets':<14} {'broker max':>10}  "
        f"{'committed':>9}  {'lag':>3}",
    ]
    top = max((q.rows for q in result.queues), default=0)
    for q in result.queues:
        span = "-" if q.min_offset is None else f"{q.min_offset}..{q.max_offset}"
        committed = "-" if q.committed is None else str(q.committed)
        lag = "-" if q.lag is None else str(q.lag)
        lines.append(
            f"  queue {q.queue_id}  {q.rows:>9,} {bar(q.rows, top, 24, unicode=unicode)}  "
            f"{span:<14} {q.broker_max:>10}  {committed:>9}  {lag:>3}"
        )
    rate = result.rows / max(result.consume_seconds, 1e-9)
    lines += [
        "",
        "throughput:",
        f"  produce            {result.produced / max(result.produce_seconds, 1e-9):>10,.0f} msg/s",
        f"  consume + write    {rate:>10,.0f} rows/s ({result.flushes} flushes)",
        *(
            [
                f"  bare consume       {result.bare_consume_rate:>10,.0f} msg/s (no-op listener, "
                "same messages and subscription; end to end is "
                f"{rate / result.bare_consume_rate:.2f} of it)"
            ]
            if result.bare_consume_rate > 0
            else []
        ),
        f"  read back + checks {result.read_seconds:>10.1f} s",
        "",
        "exactly once:",
        f"  produced           {result.produced:>10,}",
        f"  rows written       {result.rows:>10,}",
        f"  distinct msg_id    {result.distinct_ids:>10,}",
        f"  distinct offsets   {result.distinct_offsets:>10,}",
        f"  missing / extra    {result.missing:>4,} / {result.unexpected:,}",
        "",
        "OK: every produced message landed exactly once"
        if result.ok
        else "FAILED: the output does not hold every produced message exactly once",
    ]
    return "\n".join(lines)
