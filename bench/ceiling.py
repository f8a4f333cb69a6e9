"""``ceiling``: raw pulls with no decoding, the serving limit of the broker under test.

One pull of 32 in flight per queue (what the push consumer keeps), the body
never decoded; after a discarded warm-up pass over the topic, the figure is
the median of ``--repeat`` passes.
"""

from __future__ import annotations

import argparse
import statistics

from bench.cluster import Cluster
from bench.harness import Result, topic_arguments
from bench.load import PullRun, fill_topic, raw_pull, unique

NAME = "ceiling"
HELP = "raw pulls without decoding: the serving limit of the broker under test"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="measured passes (3)")
    parser.add_argument("--topic", default=None, help="pull this existing topic instead")


async def measure(namesrv: str, topic: str, repeat: int, warmup: bool = True) -> list[PullRun]:
    if warmup:
        await raw_pull(namesrv, topic)
    return [await raw_pull(namesrv, topic) for _ in range(max(1, repeat))]


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    topic = args.topic
    if topic is None:
        topic = unique("bench_ceiling")
        await cluster.create_topic(topic, args.queues)
        await fill_topic(cluster.namesrv_addr, topic, args.messages, args.size)
    runs = await measure(cluster.namesrv_addr, topic, args.repeat)
    rates = [r.rate for r in runs]
    median = statistics.median(rates)
    return Result(
        NAME,
        f"{median:,.0f} msg/s raw pulls (median of {len(runs)}; "
        f"{min(rates):,.0f}-{max(rates):,.0f}), {runs[0].count} msgs over {args.queues} queues",
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "repeat": args.repeat,
            "pull_batch": 32,
        },
        figures={
            "pull_msgs_per_s": round(median, 1),
            "pull_msgs_per_s_runs": [round(r, 1) for r in rates],
            "messages_per_pass": runs[0].count,
            "pulls_per_pass": runs[0].pulls,
        },
    )
