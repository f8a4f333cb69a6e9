"""``broker``: send and pull rates of the broker under test, and its headroom over consume.

Send rates: batches of ``--send-batch`` (``SEND_BATCH_MESSAGE``) and single
messages (``SEND_MESSAGE_V2``), ``--in-flight`` requests outstanding. The pull
serving rate is the ``ceiling`` measurement; the consume rate is the push
consumer with a batch-32 sync listener on the same data, so the headroom ratio
comes from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.ceiling import measure
from bench.cluster import Cluster
from bench.harness import Result, at_least
from bench.load import consume_all, fill_topic, unique
from rmqk.engine.producer import AsyncProducer
from rmqk.model.message import Message

NAME = "broker"
HELP = "send and pull rates of the broker under test, against the consume rate"

TARGET_PULL_OVER_CONSUME = 1.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", "-n", type=int, default=200_000, help="batch-sent (200000)")
    parser.add_argument(
        "--single", type=int, default=20_000, help="messages sent one by one (20000)"
    )
    parser.add_argument("--size", type=int, default=100, help="body bytes (100)")
    parser.add_argument("--queues", "-q", type=int, default=4, help="queues (4)")
    parser.add_argument("--send-batch", type=int, default=32, help="messages per batch (32)")
    parser.add_argument("--in-flight", type=int, default=8, help="outstanding sends (8)")
    parser.add_argument("--consume-batch", type=int, default=32, help="listener batch (32)")
    parser.add_argument("--timeout", type=float, default=900.0)


async def send_singles(ns: str, topic: str, count: int, size: int, in_flight: int) -> float:
    body = b"s" * size
    producer = AsyncProducer(unique("bench_single"), namesrv_addr=ns)
    await producer.start()
    try:
        await producer.queues_for(topic)
        remaining = [count]

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                await producer.send(Message(topic, body))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return count / (time.perf_counter() - started)
    finally:
        await producer.shutdown()


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    topic = unique("bench_broker")
    await cluster.create_topic(topic, args.queues)
    single = await send_singles(ns, topic, args.single, args.size, args.in_flight)
    fill = await fill_topic(
        ns, topic, args.messages, args.size, batch=args.send_batch, in_flight=args.in_flight
    )
    total = args.messages + args.single
    pull = (await measure(ns, topic, repeat=1))[0]
    consume = await consume_all(
        ns, topic, total, batch_size=args.consume_batch, listener="sync", timeout=args.timeout
    )
    headroom = pull.rate / consume.rate
    return Result(
        NAME,
        f"send {fill.rate:,.0f} msg/s in batches of {args.send_batch}, {single:,.0f} msg/s "
        f"one by one; pull {pull.rate:,.0f} msg/s; consume (b{args.consume_batch} sync) "
        f"{consume.rate:,.0f} msg/s; pull/consume {headroom:.2f}",
        parameters={
            "messages": args.messages,
            "single": args.single,
            "size": args.size,
            "queues": args.queues,
            "send_batch": args.send_batch,
            "in_flight": args.in_flight,
            "consume_batch": args.consume_batch,
        },
        figures={
            "send_batch_msgs_per_s": round(fill.rate, 1),
            "send_single_msgs_per_s": round(single, 1),
            "pull_msgs_per_s": round(pull.rate, 1),
            "consume_msgs_per_s": round(consume.rate, 1),
            "pull_over_consume": round(headroom, 4),
        },
        targets=[at_least("pull/consume", headroom, TARGET_PULL_OVER_CONSUME)],
    )
