"""``rebalance``: time for a group to converge after a member joins and after one leaves.

Member A holds every queue of the topic. Each round starts member B and times
until A and B hold disjoint halves that cover the topic (join), then shuts B
down and times until A holds every queue again (leave). Nothing but the
broker's NOTIFY_CONSUMER_IDS_CHANGED tells A to rebalance: the periodic
rebalance runs every 20 s, far beyond the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.cluster import Cluster
from bench.harness import Result, at_most
from bench.load import unique
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.model import MessageQueue
from rmqk.model.errors import RmqkError
from rmqk.model.message import MessageExt

NAME = "rebalance"
HELP = "time for a group to converge after a member joins and after one leaves"

TARGET_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queues", "-q", type=int, default=8, help="queues (8)")
    parser.add_argument("--rounds", type=int, default=5, help="join/leave rounds (5)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per convergence (s)")


def held(consumer: AsyncPushConsumer, topic: str) -> set[MessageQueue]:
    return {
        mq
        for mq, pq in consumer.rebalance.process_queue_table.items()
        if mq.topic == topic and not pq.is_dropped()
    }


async def wait_until(what: str, ok: object, timeout: float) -> float:
    """Seconds until ``ok()`` is true, polled every millisecond."""
    assert callable(ok)
    start = time.perf_counter()
    while not ok():
        if time.perf_counter() - start > timeout:
            raise RmqkError(f"{what}: no convergence within {timeout:.0f} s")
        await asyncio.sleep(0.001)
    return time.perf_counter() - start


def member(ns: str, group: str, topic: str) -> AsyncPushConsumer:
    consumer = AsyncPushConsumer(group, namesrv_addr=ns)
    consumer.subscribe(topic, "*")

    def listener(msgs: list[MessageExt]) -> None:
        return None

    consumer.register_listener(listener)
    return consumer


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    topic = unique("bench_rebalance")
    group = unique("bench_rebalance")
    await cluster.create_topic(topic, args.queues)
    a = member(ns, group, topic)
    started = time.perf_counter()
    await a.start()
    await wait_until("first member", lambda: len(held(a, topic)) == args.queues, args.timeout)
    initial = time.perf_counter() - started
    joins: list[float] = []
    leaves: list[float] = []
    try:
        for _ in range(args.rounds):
            b = member(ns, group, topic)
            t0 = time.perf_counter()
            await b.start()

            def split(b: AsyncPushConsumer = b) -> bool:
                qa, qb = held(a, topic), held(b, topic)
                return (
                    bool(qa)
                    and bool(qb)
                    and not (qa & qb)
                    and len(qa | qb) == args.queues
                    and abs(len(qa) - len(qb)) <= 1
                )

            await wait_until("join", split, args.timeout)
            joins.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await b.shutdown()
            await wait_until("leave", lambda: len(held(a, topic)) == args.queues, args.timeout)
            leaves.append(time.perf_counter() - t0)
    finally:
        await a.shutdown()
    join_med, leave_med = statistics.median(joins), statistics.median(leaves)
    return Result(
        NAME,
        f"join {join_med * 1000:.0f} ms median ({max(joins) * 1000:.0f} max), leave "
        f"{leave_med * 1000:.0f} ms median ({max(leaves) * 1000:.0f} max) over "
        f"{args.rounds} rounds, {args.queues} queues",
        parameters={"queues": args.queues, "rounds": args.rounds},
        figures={
            "join_median_s": round(join_med, 4),
            "join_max_s": round(max(joins), 4),
            "leave_median_s": round(leave_med, 4),
            "leave_max_s": round(max(leaves), 4),
            "first_member_s": round(initial, 4),
            "join_s": [round(x, 4) for x in joins],
            "leave_s": [round(x, 4) for x in leaves],
        },
        targets=[
            at_most("join (max)", max(joins), TARGET_S, " s"),
            at_most("leave (max)", max(leaves), TARGET_S, " s"),
        ],
    )
