"""``latency``: produce-to-listener p50 / p99 / p999 at a fixed low rate, long polling.

The consumer starts first on an empty topic, so every queue has a long poll
waiting at the broker; a producer in another process then sends one message at
a time at ``--rate`` for ``--duration`` seconds, each body starting with its
send time (``time.time_ns``, one clock for both processes). The listener
records now minus that time. Messages sent in the first ``--warmup`` seconds
are left out of the percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
from typing import Any

from bench.children import Child
from bench.cluster import Cluster
from bench.harness import Result, at_most, percentile
from bench.load import unique
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.model.errors import RmqkError
from rmqk.model.message import Message, MessageExt

NAME = "latency"
HELP = "produce-to-listener latency percentiles at a fixed low rate (long polling)"

TARGET_P99_MS = 5.0
_STAMP = struct.Struct(">q")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second (1000)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of sending (30)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds left out (2)")
    parser.add_argument("--size", type=int, default=100, help="body bytes (100)")
    parser.add_argument("--queues", "-q", type=int, default=4, help="queues (4)")
    parser.add_argument("--listener", choices=["sync", "async"], default="sync")
    parser.add_argument("--batch", type=int, default=1, help="listener batch size (1)")


async def paced_producer(
    namesrv: str, topic: str, rate: float, duration: float, size: int
) -> dict[str, Any]:
    """Runs in the child: sends ``rate`` msg/s for ``duration`` s, each stamped at send."""
    pad = b"x" * max(0, size - _STAMP.size)
    producer = AsyncProducer(unique("bench_latency_p"), namesrv_addr=namesrv)
    await producer.start()
    sent = 0
    failed = 0
    slots = asyncio.Semaphore(256)
    pending: set[asyncio.Task[None]] = set()

    async def send(msg: Message) -> None:
        nonlocal failed
        try:
            await producer.send(msg)
        except Exception:
            failed += 1
        finally:
            slots.release()

    try:
        # Route and connection are warm before the first stamped message.
        await producer.queues_for(topic)
        interval = 1.0 / rate
        start = time.perf_counter()
        total = int(rate * duration)
        for i in range(total):
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            body = _STAMP.pack(time.time_ns()) + pad
            task = asyncio.create_task(send(Message(topic, body)))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        if pending:
            await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
    finally:
        await producer.shutdown()
    return {"sent": sent - failed, "failed": failed, "elapsed_s": elapsed}


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    ns = cluster.namesrv_addr
    topic = unique("bench_latency")
    await cluster.create_topic(topic, args.queues)
    samples: list[tuple[int, float]] = []  # (send ns, latency ms)
    # The broker's store timestamp (ms) splits each latency into send-to-stored and
    # stored-to-listener.
    legs: list[tuple[int, float, float]] = []

    def record(msgs: list[MessageExt]) -> None:
        now = time.time_ns()
        for m in msgs:
            sent_ns = _STAMP.unpack_from(m.body)[0]
            samples.append((sent_ns, (now - sent_ns) / 1e6))
            legs.append((sent_ns, m.store_timestamp - sent_ns / 1e6, now / 1e6 - m.store_timestamp))

    async def on_async(msgs: list[MessageExt]) -> None:
        record(msgs)

    consumer = AsyncPushConsumer(
        unique("bench_latency"),
        namesrv_addr=ns,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_message_batch_max_size=args.batch,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(on_async if args.listener == "async" else record)
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while len(consumer.rebalance.process_queue_table) < args.queues:
            if time.monotonic() > deadline:
                raise RmqkError(f"the consumer was not assigned the {args.queues} queues in 30 s")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # every queue's first pull is now held at the broker
        child = Child(
            paced_producer,
            namesrv=ns,
            topic=topic,
            rate=args.rate,
            duration=args.duration,
            size=args.size,
        ).start()
        produced = await child.result(timeout=args.duration + 120)
        sent = int(produced["sent"])
        deadline = time.monotonic() + 30
        while len(samples) < sent and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await consumer.shutdown()
    if len(samples) < sent:
        raise RmqkError(f"the listener got {len(samples)} of {sent} messages")
    first = min(s for s, _ in samples)
    cut = first + int(args.warmup * 1e9)
    kept = sorted(lat for s, lat in samples if s >= cut)
    if not kept:
        kept = sorted(lat for _, lat in samples)
    p50, p99, p999 = (percentile(kept, q) for q in (0.5, 0.99, 0.999))
    to_store = sorted(a for t, a, _ in legs if t >= cut) or [0.0]
    from_store = sorted(b for t, _, b in legs if t >= cut) or [0.0]
    achieved = sent / produced["elapsed_s"] if produced["elapsed_s"] else 0.0
    return Result(
        NAME,
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, p999 {p999:.2f} ms, max {kept[-1]:.2f} ms "
        f"({len(kept)} msgs at {achieved:,.0f} msg/s, {args.listener} listener, "
        f"batch {args.batch}); p50/p99 send-to-stored {percentile(to_store, 0.5):.1f}/"
        f"{percentile(to_store, 0.99):.1f} ms, stored-to-listener "
        f"{percentile(from_store, 0.5):.1f}/{percentile(from_store, 0.99):.1f} ms",
        parameters={
            "rate": args.rate,
            "duration": args.duration,
            "warmup": args.warmup,
            "size": args.size,
            "queues": args.queues,
            "listener": args.listener,
            "batch": args.batch,
        },
        figures={
            "p50_ms": round(p50, 3),
            "p99_ms": round(p99, 3),
            "p999_ms": round(p999, 3),
            "max_ms": round(kept[-1], 3),
            "mean_ms": round(sum(kept) / len(kept), 3),
            "samples": len(kept),
            "sent": sent,
            "achieved_rate": round(achieved, 1),
            # ms resolution (the store timestamp is in ms)
            "send_to_stored_p50_ms": round(percentile(to_store, 0.5), 2),
            "send_to_stored_p99_ms": round(percentile(to_store, 0.99), 2),
            "stored_to_listener_p50_ms": round(percentile(from_store, 0.5), 2),
            "stored_to_listener_p99_ms": round(percentile(from_store, 0.99), 2),
        },
        targets=[at_most("p99", p99, TARGET_P99_MS, " ms")],
    )
