"""``spark-source``: rows/s from ``format("rocketmq")`` into Parquet (Structured Streaming).

N messages are sent; a streaming query reads the topic from its earliest
offsets with ``trigger(availableNow=True)`` and writes Parquet, and the figure
is N over the query's wall time. A first query over a small topic warms the
session (JVM start, Python workers) and is not counted. The rows written are
counted afterwards.

``--master`` picks the Spark master: ``local[N]``, any ``spark://HOST:PORT``, or
``standalone-2``, a standalone cluster of a master and two one-core workers that
the run starts on loopback from the pyspark package (bench/spark_standalone.py)
and stops at the end; the broker is on loopback too, so the executors reach it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.harness import Result, topic_arguments
from bench.load import fill_topic, unique
from bench.spark_standalone import StandaloneCluster
from bench.sparkbench import Pending, key_values, require_pyspark

NAME = "spark-source"
HELP = "rows/s from the rocketmq Structured Streaming source into Parquet"

# The source's option names; --source-option overrides or adds any of them.
NAMESRV_OPTION = "namesrv"
TOPIC_OPTION = "topics"
STARTING_OPTION = "startingOffsets"

STANDALONE = "standalone-2"
# Executors of the two 1 GiB workers of STANDALONE (Spark's default, 1g, would fill them).
STANDALONE_CONF = {"spark.executor.memory": "512m"}


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
    parser.add_argument(
        "--master",
        default="local[2]",
        help=f"Spark master: local[N], spark://HOST:PORT, or {STANDALONE} (a master and two "
        "one-core workers started for the run on loopback); default local[2]",
    )
    parser.add_argument("--out", default=None, help="output directory (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900.0)


def _session(master: str, conf: dict[str, str]) -> Any:
    require_pyspark()
    try:
        from rmqk.plugins.spark.session import get_session
    except ImportError as exc:
        raise Pending(f"rmqk.plugins.spark has no session helper yet ({exc})") from exc
    return get_session(master=master, conf=conf)


def _stop_session() -> None:
    from rmqk.plugins.spark.session import stop_session

    stop_session()


def executor_count(spark: Any) -> int:
    """Executors registered with the driver (a local master's driver is its one executor)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(1, len(infos) - 1)


def wait_for_executors(spark: Any, count: int, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while executor_count(spark) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} executors after {timeout:.0f} s")
        time.sleep(0.5)


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
    require_pyspark()
    with contextlib.ExitStack() as stack:
        master, conf = args.master, {}
        if master == STANDALONE:
            standalone = await asyncio.to_thread(StandaloneCluster(workers=2).start)
            stack.callback(standalone.stop)
            master, conf = standalone.url, dict(STANDALONE_CONF)
        spark = await asyncio.to_thread(_session, master, conf)
        stack.callback(_stop_session)
        if args.master == STANDALONE:
            await asyncio.to_thread(wait_for_executors, spark, 2)
        return await _measure(cluster, args, spark)


async def _measure(cluster: Cluster, args: argparse.Namespace, spark: Any) -> Result:
    ns = cluster.namesrv_addr
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
    executors = executor_count(spark)
    cores = int(spark.sparkContext.defaultParallelism)
    return Result(
        NAME,
        f"{rate:,.0f} rows/s from format('rocketmq') into Parquet on {args.master} "
        f"({executors} executor(s), {cores} core(s); {rows:,} rows in {elapsed:.1f} s; "
        f"warm-up {warm_s:.1f} s)",
        parameters={
            "master": args.master,
            "executors": executors,
            "cores": cores,
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
