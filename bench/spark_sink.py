"""``spark-sink``: rows/s through the ``spark`` sink, into Parquet and into a table.

Two targets, each a ratio within this one run:

* Parquet files at a path (the sink's default ``writer = "arrow"``, or what
  ``--sink-option writer=spark`` says) against the bare consume rate of the
  same messages;
* a table (``saveAsTable``, always Spark's writer) against Spark's own rate for
  writing the same Arrow batches (as many rows, the same body size, in batches
  of the sink's ``flush_rows``) with no consumer: ``createDataFrame`` and
  ``saveAsTable`` per batch, nothing else (``--no-table`` skips both). Spark
  alone runs just before and just after the sink's table run and its rate is
  their mean over time (200,000 rows in the mean of the two times): Spark's JIT
  keeps speeding its writes up for several runs (30,000 -> 54,000 rows/s over
  three identical runs on this machine), so a single run after the sink's would
  credit Spark with the warming the sink's run did.

The same N messages are consumed twice with the same consumer settings: once
by a no-op async listener (the consume rate) and once delivered to the sink,
which group-commits them into Parquet and acknowledges each batch only after
the write (rows/s). The sink run delivers as ``rmqk run`` does: the listener
returns ``sink.submit(...)`` (no consume worker waits on a flush) and the
consumer's flow control is widened to the sink's ``window_rows``
(``pull_threshold_for_topic``, ``consume_concurrently_max_span``) unless
``--consumer-option`` sets them; the consume run gets the same widened options.
``--await-write`` restores the old listener that awaits ``sink.write``. Spark
is warmed first by sinking a small topic, so the figure excludes the JVM's
start. The rows on disk are counted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from bench.cluster import Cluster
from bench.harness import Result, at_least, topic_arguments
from bench.load import ConsumeRun, consume_all, fill_topic, unique
from bench.sparkbench import Pending, key_values, require_pyspark
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model.errors import RmqkError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import registries
from rmqk.spi.contracts import BufferedSink, SinkContext

log = logging.getLogger("rmqk.bench.spark_sink")

NAME = "spark-sink"
HELP = "rows/s into Parquet through the spark sink, as a ratio to consume"

TARGET_OVER_CONSUME = 0.8
TARGET_TABLE_OVER_SPARK = 0.8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser)
    parser.add_argument("--batch", type=int, default=32, help="listener batch size (32)")
    parser.add_argument(
        "--consume-thread-max",
        type=int,
        default=64,
        help="concurrent listener calls, i.e. sink writes waiting on a flush (64)",
    )
    parser.add_argument(
        "--consumer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="consumer option for both runs, e.g. pull_threshold_for_queue=8000 (repeatable)",
    )
    parser.add_argument(
        "--warmup-messages", type=int, default=20_000, help="sunk before measuring; 0: none"
    )
    parser.add_argument(
        "--sink-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra sink option, e.g. flush_rows=50000 (repeatable)",
    )
    parser.add_argument(
        "--await-write",
        action="store_true",
        help="the listener awaits sink.write (a worker per batch), not sink.submit",
    )
    parser.add_argument(
        "--no-widen",
        action="store_true",
        help="leave the consumer's flow control alone (no widening to window_rows)",
    )
    parser.add_argument(
        "--no-table", action="store_true", help="skip the table output and Spark's own rate"
    )
    parser.add_argument("--out", default=None, help="output directory (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900.0)


def require_sink() -> None:
    require_pyspark()
    if "spark" not in registries().sinks.names():
        raise Pending("no sink named 'spark' is registered (rmqk.plugins.spark not ready)")


async def sink_run(
    ns: str,
    topic: str,
    expected: int,
    options: dict[str, Any],
    sink_options: dict[str, Any],
    timeout: float,
    await_write: bool = False,
) -> tuple[ConsumeRun, dict[str, Any]]:
    sink = registries().sinks.create("spark", SinkContext(), sink_options)
    await sink.start()
    done = asyncio.Event()
    count = [0]
    first: list[float] = []

    def written(n: int) -> None:
        if not first:
            first.append(time.perf_counter())
        count[0] += n
        if count[0] >= expected:
            done.set()

    watcher: asyncio.Future[None] | None = None
    if await_write or not isinstance(sink, BufferedSink):

        async def deliver(msgs: list[MessageExt], context: Any) -> Any:
            await sink.write(context.queue, msgs)
            written(len(msgs))

    else:

        async def deliver(msgs: list[MessageExt], context: Any) -> Any:
            # As rmqk run delivers: the flush's future is the batch's acknowledgement.
            return sink.submit(context.queue, msgs)

        async def watch(stats: Any) -> None:
            # Rows counted when their flush commits, from the sink's own figures: a
            # callback per batch would add objects (and GC work) that rmqk run has not.
            base = stats.rows_written + stats.rows_skipped
            while not done.is_set():
                seen = stats.rows_written + stats.rows_skipped - base
                if seen > count[0]:
                    written(seen - count[0])
                await asyncio.sleep(0.002)

        watcher = asyncio.ensure_future(watch(sink.stats))  # type: ignore[attr-defined]

    consumer = AsyncPushConsumer(
        unique("bench_sink"),
        namesrv_addr=ns,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **options,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(deliver)
    started = time.perf_counter()
    try:
        await consumer.start()
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except TimeoutError:
            raise RmqkError(
                f"the spark sink acknowledged {count[0]} of {expected} within {timeout:.0f} s"
            ) from None
        elapsed = time.perf_counter() - started
        await consumer.shutdown()
        stats = attrs.asdict(sink.stats) if attrs.has(type(getattr(sink, "stats", None))) else {}
    finally:
        if watcher is not None:
            watcher.cancel()
        await sink.close()
    return ConsumeRun(count[0], elapsed, first[0] - started), stats


def widened(options: dict[str, Any], window_rows: int, given: set[str]) -> dict[str, Any]:
    """``options`` with the flow control ``rmqk run`` gives a consumer of such a sink."""
    from rmqk.app.runtime import widen_for_sink
    from rmqk.options import Where, validate_options

    resolved, problems = validate_options(options, Where("<bench>", "spark-sink"))
    if problems:
        raise RmqkError(f"bad consumer options: {problems}")
    wide = widen_for_sink(resolved, window_rows, frozenset(given))
    out = dict(options)
    for key in ("pull_threshold_for_topic", "consume_concurrently_max_span"):
        if getattr(wide, key) != getattr(resolved, key):
            out[key] = getattr(wide, key)
    return out


def _scalar(text: str) -> Any:
    """A sink option's value as TOML would give it: a number or boolean when it is one."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process and of each child, by kind (diagnostics).

    The children are the embedded broker (a Python process) and Spark's JVM; all
    share the machine's cores with this process, so their CPU shows who competes.
    """
    import os

    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    out: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid, ppid = int(entry), int(fields[1])
        if pid != me and ppid != me:
            continue
        kind = "self" if pid == me else ("jvm" if b"java" in cmd else "child")
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in after}


def count_rows(path: str) -> int:
    from rmqk.plugins.spark.session import get_session

    rows: int = get_session().read.parquet(path).count()
    return rows


def count_table(table: str) -> int:
    from rmqk.plugins.spark.session import get_session

    rows: int = get_session().table(table).count()
    return rows


def spark_alone(messages: int, size: int, sink_options: dict[str, Any]) -> float:
    """Spark's rows/s writing Arrow batches like the sink's to a table, with no consumer.

    The batches are built before the clock starts; what is timed is what the
    sink's Spark writer does per flush (``FrameWriter.write``).
    """
    from rmqk.model.message import MessageExt
    from rmqk.plugins.spark.columns import messages_to_arrow
    from rmqk.plugins.spark.frames import FrameWriter
    from rmqk.plugins.spark.options import parse_sink_options
    from rmqk.plugins.spark.session import get_session

    options = parse_sink_options(sink_options)
    session = get_session(options.master, options.app_name, options.spark_conf)
    body = b"x" * size
    step = options.flush_rows
    batches = [
        messages_to_arrow(
            [
                (
                    None,
                    [
                        MessageExt(
                            topic="bench",
                            body=body,
                            queue_offset=i,
                            store_host="127.0.0.1:10911",
                            properties={"UNIQ_KEY": f"ID{i:012d}", "TAGS": "t"},
                        )
                        for i in range(first, min(first + step, messages))
                    ],
                )
            ]
        )
        for first in range(0, messages, step)
    ]
    frames = FrameWriter(options, session)
    frames.check()
    started = time.perf_counter()
    for batch in batches:
        frames.write(batch)
    return messages / (time.perf_counter() - started)


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    require_sink()
    ns = cluster.namesrv_addr
    topic = unique("bench_sink")
    warm_topic = unique("bench_sink_warm")
    await cluster.create_topic(topic, args.queues)
    await cluster.create_topic(warm_topic, args.queues)
    await fill_topic(ns, topic, args.messages, args.size)
    if args.warmup_messages > 0:
        await fill_topic(ns, warm_topic, args.warmup_messages, args.size)
    options: dict[str, Any] = {
        "consume_message_batch_max_size": args.batch,
        "consume_thread_max": args.consume_thread_max,
        "consume_thread_min": args.consume_thread_max,
    }
    consumer_extra = {
        k: int(v) if v.lstrip("-").isdigit() else v
        for k, v in key_values(args.consumer_option).items()
    }
    options.update(consumer_extra)
    own_out = args.out is None
    out = Path(args.out or tempfile.mkdtemp(prefix="rmqk-bench-sink-"))
    extra = {k: _scalar(v) for k, v in key_values(args.sink_option).items()}
    made = registries().sinks.create("spark", SinkContext(), {"path": str(out), **extra})
    window = made.window_rows if isinstance(made, BufferedSink) else 0
    if window and not args.no_widen:
        options = widened(options, window, set(consumer_extra))
    try:
        warm_s = 0.0
        if args.warmup_messages > 0:
            warm_opts = {"path": str(out / "warmup"), **extra}
            warm, _ = await sink_run(
                ns,
                warm_topic,
                args.warmup_messages,
                options,
                warm_opts,
                args.timeout,
                args.await_write,
            )
            warm_s = warm.elapsed_s
        consume = await consume_all(
            ns,
            topic,
            args.messages,
            batch_size=args.batch,
            listener="async",
            timeout=args.timeout,
            options={k: v for k, v in options.items() if k != "consume_message_batch_max_size"},
        )
        sink_opts = {"path": str(out / "data"), **extra}
        sinked, stats = await sink_run(
            ns, topic, args.messages, options, sink_opts, args.timeout, args.await_write
        )
        rows_on_disk = await asyncio.to_thread(count_rows, str(out / "data"))
        table = (
            None
            if args.no_table
            else await _table_runs(ns, topic, warm_topic, args, options, extra, out)
        )
    finally:
        if own_out:
            shutil.rmtree(out, ignore_errors=True)
    ratio = sinked.rate / consume.rate
    flushes = stats.get("flushes")
    writer = str(extra.get("writer", "arrow"))
    targets = [at_least("parquet/consume", ratio, TARGET_OVER_CONSUME)]
    table_text = ""
    table_figures: dict[str, Any] = {}
    if table is not None:
        table_text = (
            f"; table {table.sink_rate:,.0f} rows/s vs Spark alone {table.spark_rate:,.0f} "
            f"rows/s ({table.ratio:.2f}), {table.rows:,} rows"
        )
        table_figures = {
            "table_rows_per_s": round(table.sink_rate, 1),
            "spark_alone_rows_per_s": round(table.spark_rate, 1),
            "table_over_spark": round(table.ratio, 4),
            "table_rows": table.rows,
            "table_flushes": table.stats.get("flushes"),
            "table_seconds_writing": round(float(table.stats.get("seconds_writing", 0.0)), 3),
            "table_seconds_arrow": round(float(table.stats.get("seconds_arrow", 0.0)), 3),
            "table_first_ack_s": round(table.first_ack_s, 3),
            "table_elapsed_s": round(table.elapsed_s, 3),
            "spark_alone_before_rows_per_s": round(table.stats["spark_alone_before"], 1),
            "spark_alone_after_rows_per_s": round(table.stats["spark_alone_after"], 1),
        }
        targets.append(at_least("table/spark", table.ratio, TARGET_TABLE_OVER_SPARK))
    return Result(
        NAME,
        f"{sinked.rate:,.0f} rows/s into Parquet ({writer} writer) vs consume "
        f"{consume.rate:,.0f} msg/s ({ratio:.2f}); {rows_on_disk:,} rows on disk, "
        f"{flushes} flushes; warm-up {warm_s:.1f} s{table_text}",
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "batch": args.batch,
            "consume_thread_max": args.consume_thread_max,
            "consumer_options": consumer_extra,
            "effective_consumer_options": options,
            "listener": "write" if args.await_write else "submit",
            "warmup_messages": args.warmup_messages,
            "sink_options": extra,
        },
        figures={
            "sink_rows_per_s": round(sinked.rate, 1),
            "consume_msgs_per_s": round(consume.rate, 1),
            "sink_over_consume": round(ratio, 4),
            "rows_on_disk": rows_on_disk,
            "flushes": flushes,
            "warmup_s": round(warm_s, 2),
            "seconds_writing": round(float(stats.get("seconds_writing", 0.0)), 3),
            "seconds_arrow": round(float(stats.get("seconds_arrow", 0.0)), 3),
            "sink_elapsed_s": round(sinked.elapsed_s, 3),
            "sink_first_ack_s": round(sinked.first_s, 3),
            "consume_elapsed_s": round(consume.elapsed_s, 3),
            **table_figures,
        },
        targets=targets,
    )


@attrs.frozen
class TableRun:
    sink_rate: float
    spark_rate: float
    rows: int
    # the sink run's: its statistics, when its first flush was acknowledged, its wall time
    stats: dict[str, Any]
    first_ack_s: float
    elapsed_s: float

    @property
    def ratio(self) -> float:
        return self.sink_rate / self.spark_rate


async def _table_runs(
    ns: str,
    topic: str,
    warm_topic: str,
    args: argparse.Namespace,
    options: dict[str, Any],
    extra: dict[str, Any],
    out: Path,
) -> TableRun:
    """Spark alone writing such batches, the table output through the sink, Spark alone again."""
    conf = {k: v for k, v in extra.items() if k != "writer"}
    conf.setdefault("spark.sql.warehouse.dir", str(out / "warehouse"))
    name = unique("bench_sink_table")
    if args.warmup_messages > 0:
        await sink_run(
            ns,
            warm_topic,
            args.warmup_messages,
            options,
            {"table": name + "_warm", **conf},
            args.timeout,
            args.await_write,
        )
    cpu0 = _cpu_seconds()
    before = await asyncio.to_thread(
        spark_alone, args.messages, args.size, {"table": name + "_alone1", **conf}
    )
    cpu1 = _cpu_seconds()
    sinked, stats = await sink_run(
        ns, topic, args.messages, options, {"table": name, **conf}, args.timeout, args.await_write
    )
    cpu2 = _cpu_seconds()
    rows = await asyncio.to_thread(count_table, name)
    cpu3 = _cpu_seconds()
    after = await asyncio.to_thread(
        spark_alone, args.messages, args.size, {"table": name + "_alone2", **conf}
    )
    cpu4 = _cpu_seconds()
    log.info(
        "table runs, CPU seconds: Spark alone before %s, sink %s, Spark alone after %s",
        _cpu_delta(cpu0, cpu1),
        _cpu_delta(cpu1, cpu2),
        _cpu_delta(cpu3, cpu4),
    )
    # The rate over the mean of the two times (the harmonic mean of the two rates).
    alone = 2 / (1 / before + 1 / after)
    stats = {**stats, "spark_alone_before": before, "spark_alone_after": after}
    return TableRun(sinked.rate, alone, rows, stats, sinked.first_s, sinked.elapsed_s)
