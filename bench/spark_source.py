"""``spark-source``: rows/s from ``format("rocketmq")`` into Parquet (Structured Streaming).

N messages are sent; a streaming query reads the topic from its earliest
offsets with ``trigger(availableNow=True)`` and writes Parquet, and the figure
is N over the query's wall time. A first query over a small topic warms the
session (JVM start, Python workers) and is not counted. The rows written are
counted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.harness import Result, topic_arguments
from bench.load import fill_topic, unique
from bench.sparkbench import Pending, key_values, require_pyspark

NAME = "spark-source"
HELP = "rows/s from the rocketmq Structured Streaming source into Parquet"

# The source's option names; --source-option overrides or adds any of them.
NAMESRV_OPTION = "namesrv"
TOPIC_OPTION = "topics"
STARTING_OPTION = "startingOffsets"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser)
    parser.add_argument(
        "--warmup-messages", type=int, default=20_000, help="read before measuring; 0: none"
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra source option, e.g. maxMessagesPerTrigger=100000 (repeatable)",
    )
    parser.add_argument("--out", default=None, help="output directory (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900.0)


def _session() -> Any:
    require_pyspark()
    try:
        from rmqk.plugins.spark.session import get_session
    except ImportError as exc:
        raise Pending(f"rmqk.plugins.spark has no session helper yet ({exc})") from exc
    return get_session()


def stream_once(
    spark: Any, options: dict[str, str], out: Path, timeout: float
) -> tuple[float, int]:
    """Run one availableNow query into ``out``; returns (seconds, rows written)."""
    try:
        frame = spark.readStream.format("rocketmq").options(**options).load()
    except Exception as exc:  # pyspark raises AnalysisException for an unknown format
        if "rocketmq" in str(exc) and ("find" in str(exc).lower() or "not" in str(exc).lower()):
            raise Pending(f"no Spark data source named 'rocketmq' yet: {exc}") from exc
        raise
    started = time.perf_counter()
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(timeout):
        query.stop()
        raise TimeoutError(f"the streaming query did not finish within {timeout:.0f} s")
    elapsed = time.perf_counter() - started
    rows: int = spark.read.parquet(str(out / "data")).count()
    return elapsed, rows


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    spark = await asyncio.to_thread(_session)
    topic = unique("bench_source")
    warm_topic = unique("bench_source_warm")
    await cluster.create_topic(topic, args.queues)
    await cluster.create_topic(warm_topic, args.queues)
    await fill_topic(ns, topic, args.messages, args.size)
    if args.warmup_messages > 0:
        await fill_topic(ns, warm_topic, args.warmup_messages, args.size)
    extra = key_values(args.source_option)
    own_out = args.out is None
    out = Path(args.out or tempfile.mkdtemp(prefix="rmqk-bench-source-"))

    def options(t: str) -> dict[str, str]:
        return {NAMESRV_OPTION: ns, TOPIC_OPTION: t, STARTING_OPTION: "earliest", **extra}

    try:
        warm_s = 0.0
        if args.warmup_messages > 0:
            warm_s, _ = await asyncio.to_thread(
                stream_once, spark, options(warm_topic), out / "warmup", args.timeout
            )
        elapsed, rows = await asyncio.to_thread(
            stream_once, spark, options(topic), out / "main", args.timeout
        )
    finally:
        if own_out:
            shutil.rmtree(out, ignore_errors=True)
    rate = args.messages / elapsed
    return Result(
        NAME,
        f"{rate:,.0f} rows/s from format('rocketmq') into Parquet ({rows:,} rows in "
        f"{elapsed:.1f} s; warm-up {warm_s:.1f} s)",
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "warmup_messages": args.warmup_messages,
            "source_options": extra,
        },
        figures={
            "source_rows_per_s": round(rate, 1),
            "rows_on_disk": rows,
            "elapsed_s": round(elapsed, 3),
            "warmup_s": round(warm_s, 2),
        },
    )
