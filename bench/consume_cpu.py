"""Consumer CPU per message: the figure to decide a hot-path change on a busy machine.

``python -m bench consume`` reports wall-clock rates, which move by 2x between
runs when other processes share the cores. The CPU time the consuming process
spends per message moves far less. This fills a topic once (broker in a child
process, as the consume scenario), then consumes it ``--rounds`` times per
variant with a fresh group, alternating the variants, and prints the
``time.process_time()`` of this process per message of each round and the
minimum. ``--profile FILE`` writes a cProfile of the consume rounds alone.

``--shape java,rmqk`` fills one topic per shape: ``rmqk`` as rmqk's batch sends
write messages, ``java`` as Java's producer does (one message a send with TAGS,
KEYS, WAIT and UNIQ_KEY; issue 29); each variant runs on each. The last lines give
the plain ``def`` listener's CPU a message over the ``async def`` one's, per
shape and batch size, from the minima of the same run::

    python -m bench.consume_cpu -n 100000 --rounds 3 --batch 32 --listener async
    python -m bench.consume_cpu -n 60000 --rounds 2 --batch 32,1 --listener sync,async \
        --shape java,rmqk
    RMQK_NO_EXTENSIONS=1 python -m bench.consume_cpu ...   # the pure-Python decoder
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import time

from bench.cluster import Cluster
from bench.consume import int_list, str_list
from bench.load import consume_all, fill_topic, unique, variants
from rmqk.wire import message_codec


async def main_async(args: argparse.Namespace) -> None:
    async with Cluster(mode="process") as cluster:
        topics: dict[str, str] = {}
        for shape in args.shape:
            topics[shape] = unique(f"bench_cpu_{shape}")
            await cluster.create_topic(topics[shape], args.queues)
            await fill_topic(
                cluster.namesrv_addr,
                topics[shape],
                args.messages,
                args.size,
                java_shaped=shape == "java",
            )
        profile = cProfile.Profile() if args.profile else None
        cpu: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for shape, (batch, kind) in [
                (shape, v) for v in variants(args.batch, args.listener) for shape in args.shape
            ]:
                topic = topics[shape]
                if profile is not None:
                    profile.enable()
                before = time.process_time()
                sys_before = os.times().system
                run = await consume_all(
                    cluster.namesrv_addr,
                    topic,
                    args.messages,
                    batch_size=batch,
                    listener=kind,
                    timeout=900,
                )
                used = time.process_time() - before
                kernel = os.times().system - sys_before
                if profile is not None:
                    profile.disable()
                name = f"b{batch}_{kind}" + ("" if args.shape == ["rmqk"] else f"_{shape}")
                cpu.setdefault(name, []).append(used / run.count * 1e6)
                print(
                    f"{name}: {cpu[name][-1]:.2f} us CPU/msg "
                    f"({kernel / run.count * 1e6:.2f} in the kernel), {run.rate:,.0f} msg/s"
                )
        decoder = "compiled" if message_codec.SPEEDUPS else "pure Python"
        for name, values in cpu.items():
            rounds = ", ".join(f"{v:.2f}" for v in values)
            print(f"{name} ({decoder} decoder): min {min(values):.2f} us CPU/msg ({rounds})")
        for shape in args.shape:
            suffix = "" if args.shape == ["rmqk"] else f"_{shape}"
            for batch in args.batch:
                plain, coro = cpu.get(f"b{batch}_sync{suffix}"), cpu.get(f"b{batch}_async{suffix}")
                if plain and coro:
                    print(
                        f"{shape} messages, batch {batch}: plain def / async def listener "
                        f"CPU a message {min(plain) / min(coro):.2f}x (target <= 1.2x)"
                    )
        if profile is not None:
            profile.dump_stats(args.profile)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.consume_cpu", description=__doc__)
    parser.add_argument("-n", "--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("-q", "--queues", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int_list, default=[32])
    parser.add_argument("--listener", type=str_list, default=["async"])
    parser.add_argument(
        "--shape",
        type=str_list,
        default=["rmqk"],
        help="rmqk, java or both: how the messages consumed were produced (default rmqk)",
    )
    parser.add_argument("--profile", help="write a cProfile of the consume rounds here")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
