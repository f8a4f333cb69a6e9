"""``consume``: push consumer throughput, as msg/s and as a ratio to ``ceiling``.

N messages of a given size over Q queues are sent once; each variant (listener
batch size x sync/async listener) then consumes all of them with a fresh group
from the first offset. The ceiling (raw undecoded pulls of the same topic) is
measured in the same run, before and after the variants, and their mean is the
denominator of each ratio.
"""

from __future__ import annotations

import argparse
import statistics

from bench.ceiling import measure
from bench.cluster import Cluster
from bench.harness import Result, TargetCheck, at_least, topic_arguments
from bench.load import consume_all, fill_topic, unique, variants

NAME = "consume"
HELP = "push consumer throughput (batch sizes x sync/async listeners) against the ceiling"

# The targets: a fraction of the ceiling measured in the same run.
TARGET_BATCH = {1: 0.35, 32: 0.7}


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser)
    parser.add_argument(
        "--batch", type=int_list, default=[1, 32], help="listener batch sizes, e.g. 1,32"
    )
    parser.add_argument("--listener", type=str_list, default=["sync", "async"], help="sync,async")
    parser.add_argument("--timeout", type=float, default=900.0, help="per variant (s)")


def variant_name(batch: int, kind: str) -> str:
    return f"b{batch}_{kind}"


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    topic = unique("bench_consume")
    await cluster.create_topic(topic, args.queues)
    fill = await fill_topic(ns, topic, args.messages, args.size)
    before = await measure(ns, topic, repeat=1)
    figures: dict[str, object] = {"fill_msgs_per_s": round(fill.rate, 1)}
    rates: dict[str, float] = {}
    for batch, kind in variants(args.batch, args.listener):
        result = await consume_all(
            ns, topic, args.messages, batch_size=batch, listener=kind, timeout=args.timeout
        )
        name = variant_name(batch, kind)
        rates[name] = result.rate
        figures[f"{name}_msgs_per_s"] = round(result.rate, 1)
        figures[f"{name}_first_message_s"] = round(result.first_s, 4)
    after = await measure(ns, topic, repeat=1, warmup=False)
    ceiling = statistics.mean([before[0].rate, after[0].rate])
    figures["ceiling_msgs_per_s"] = round(ceiling, 1)
    figures["ceiling_before_after"] = [round(before[0].rate, 1), round(after[0].rate, 1)]
    checks: list[TargetCheck] = []
    parts = []
    for batch, kind in variants(args.batch, args.listener):
        name = variant_name(batch, kind)
        ratio = rates[name] / ceiling
        figures[f"{name}_ratio"] = round(ratio, 4)
        parts.append(f"{name} {rates[name]:,.0f} msg/s ({ratio:.2f})")
        if batch in TARGET_BATCH:
            checks.append(at_least(f"{name}/ceiling", ratio, TARGET_BATCH[batch]))
    summary = (
        f"{', '.join(parts)}; ceiling {ceiling:,.0f} msg/s; "
        f"{args.messages} x {args.size} B over {args.queues} queues"
    )
    return Result(
        NAME,
        summary,
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "batch": list(args.batch),
            "listener": list(args.listener),
        },
        figures=figures,
        targets=checks,
    )
