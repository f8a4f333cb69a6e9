"""``memory``: peak RSS of a consumer with a slow listener over a large backlog.

The backlog is sent first; then a consumer in a fresh process (so the figure is
the consumer's alone) consumes it with default flow-control settings and a
listener that sleeps ``--listener-delay-ms`` per call, for ``--duration``
seconds, sampling its resident set size. Peak is the kernel's high-water mark
(VmHWM). "Flat" is the growth between the mean RSS of the second quarter of
the samples and that of the last quarter.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import threading
import time
from pathlib import Path
from typing import Any

from bench.children import Child
from bench.cluster import Cluster
from bench.harness import Result, at_most, topic_arguments
from bench.load import fill_topic, unique
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model.message import MessageExt

NAME = "memory"
HELP = "peak RSS with a slow listener over a backlog (default flow control)"

TARGET_PEAK_MB = 150.0
# The issue asks for RSS "flat over the run"; we read that as under 10 MB of growth
# between the second and the last quarter of the run.
TARGET_GROWTH_MB = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser, count_flag="--backlog", count=1_000_000)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds consuming (60)")
    parser.add_argument(
        "--listener-delay-ms", type=float, default=5.0, help="sleep per listener call (5)"
    )
    parser.add_argument("--batch", type=int, default=1, help="listener batch size (1, default)")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_mb() -> float:
    try:
        return _status_kb("VmRSS") / 1024
    except OSError:
        return 0.0


def peak_rss_mb() -> float:
    try:
        return _status_kb("VmHWM") / 1024
    except OSError:
        # ru_maxrss is in KiB on Linux.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def slow_consumer(
    namesrv: str, topic: str, duration: float, delay_ms: float, batch: int
) -> dict[str, Any]:
    """Runs in the child: consume for ``duration`` s, sampling RSS every 0.25 s."""
    consumed = [0]
    lock = threading.Lock()
    delay = delay_ms / 1000

    def slow(msgs: list[MessageExt]) -> None:
        time.sleep(delay)
        with lock:
            consumed[0] += len(msgs)

    baseline = rss_mb()
    consumer = AsyncPushConsumer(
        unique("bench_memory"),
        namesrv_addr=namesrv,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_message_batch_max_size=batch,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(slow)
    samples: list[tuple[float, float]] = []
    cached: list[int] = []
    await consumer.start()
    start = time.monotonic()
    try:
        while (now := time.monotonic()) - start < duration:
            samples.append((round(now - start, 3), round(rss_mb(), 2)))
            cached.append(
                sum(pq.msg_count for pq in consumer.rebalance.process_queue_table.values())
            )
            await asyncio.sleep(0.25)
    finally:
        await consumer.shutdown()
    return {
        "baseline_mb": baseline,
        "peak_mb": peak_rss_mb(),
        "samples": samples,
        "consumed": consumed[0],
        "max_cached": max(cached) if cached else 0,
        "elapsed_s": time.monotonic() - start,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    topic = unique("bench_memory")
    await cluster.create_topic(topic, args.queues)
    fill = await fill_topic(ns, topic, args.backlog, args.size, batch=128)
    child = Child(
        slow_consumer,
        namesrv=ns,
        topic=topic,
        duration=args.duration,
        delay_ms=args.listener_delay_ms,
        batch=args.batch,
    ).start()
    out = await child.result(timeout=args.duration + 120)
    rss = [r for _, r in out["samples"]]
    n = len(rss)
    second_q = _mean(rss[n // 4 : n // 2]) if n >= 4 else _mean(rss)
    last_q = _mean(rss[3 * n // 4 :]) if n >= 4 else _mean(rss)
    growth = last_q - second_q
    peak = float(out["peak_mb"])
    consumed = int(out["consumed"])
    return Result(
        NAME,
        f"peak RSS {peak:.1f} MB (start {out['baseline_mb']:.1f} MB), growth {growth:+.1f} MB "
        f"over the second half; {consumed:,} of {args.backlog:,} consumed in "
        f"{out['elapsed_s']:.0f} s, at most {out['max_cached']} cached",
        parameters={
            "backlog": args.backlog,
            "size": args.size,
            "queues": args.queues,
            "duration": args.duration,
            "listener_delay_ms": args.listener_delay_ms,
            "batch": args.batch,
        },
        figures={
            "peak_rss_mb": round(peak, 2),
            "baseline_rss_mb": round(float(out["baseline_mb"]), 2),
            "rss_second_quarter_mb": round(second_q, 2),
            "rss_last_quarter_mb": round(last_q, 2),
            "rss_growth_mb": round(growth, 2),
            "consumed": consumed,
            "max_cached_messages": out["max_cached"],
            "fill_msgs_per_s": round(fill.rate, 1),
            "rss_samples": out["samples"][:: max(1, n // 60)],
        },
        targets=[
            at_most("peak RSS", peak, TARGET_PEAK_MB, " MB"),
            at_most("RSS growth", max(growth, 0.01), TARGET_GROWTH_MB, " MB"),
        ],
    )
