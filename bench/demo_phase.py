"""``rmqk demo``'s consume phase, repeated: its end-to-end ratio with spread, on a noisy machine.

``rmqk demo`` measures its ratio (rows/s landed by the Spark sink over the msg/s of
a no-op consumer on the same backlog) once, and one run moves by +-20% on a shared
2-core machine. This fills the demo's topic once, as the demo does (an embedded
broker in this process, 8 queues, order events), then alternates, ``--rounds``
times, the demo's consumer (``examples/demo.toml``, its exactly-once Parquet sink
into a fresh folder, a fresh group) and the bare consume (a fresh group), and prints
per round both rates, their ratio, the process CPU and the event loop thread's CPU of
each, and the flushes; then the median and range of the ratios. The Arrow writer is
warmed up first, as the demo's Spark start does; Spark itself is not started::

    python -m bench.demo_phase -n 200000 --rounds 6
    python -m bench.demo_phase --config my-demo.toml    # a variant of demo.toml
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from bench.load import unique


@attrs.frozen
class Phase:
    rate: float
    cpu_s: float
    loop_cpu_s: float
    flushes: int = 0
    # From the last batch buffered to the last flush committed: the pipeline's tail.
    tail_ms: float = 0.0


def _warm_up(options: Any, scratch: Path) -> None:
    """One small flush through the Arrow writer: the imports the demo's warm-up made."""
    from rmqk.plugins.spark.arrow_writer import ArrowFileWriter
    from rmqk.plugins.spark.columns import messages_to_arrow
    from rmqk.plugins.spark.demo import warm_up_messages

    def no_spark(batch: Any) -> Any:
        raise RuntimeError("the warm-up batch needs no Spark")

    writer = ArrowFileWriter(options, "warmup", no_spark)
    writer.write(messages_to_arrow([(None, warm_up_messages())]), scratch / "warmup", 0, False)
    shutil.rmtree(scratch / "warmup", ignore_errors=True)


async def _sink_phase(spec: Any, count: int, timeout: float) -> Phase:
    """The demo's consumer until every row is written (as ``rmqk demo`` times it)."""
    from rmqk import ComposedConsumer

    composed = ComposedConsumer(spec)
    sink: Any = composed.sink
    cpu, loop_cpu = time.process_time(), time.thread_time()
    started = time.monotonic()
    await composed.start()
    try:
        while sink.stats.rows_written + sink.stats.rows_skipped < count:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"the sink wrote {sink.stats.rows_written} of {count} rows")
            await asyncio.sleep(0.01)
        stats = sink.stats
        cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
        # The group-commit base's time of the last batch it buffered (a bench-only peek).
        last_buffered: float = sink.writer._last_write_at
    finally:
        await composed.stop()
    ended = stats.last_flush_at or time.monotonic()
    tail_ms = (ended - last_buffered) * 1000
    return Phase(count / max(ended - started, 1e-9), cpu, loop_cpu, stats.flushes, tail_ms)


async def _bare_phase(
    namesrv_addr: str, topic: str, expression: str, count: int, timeout: float
) -> Phase:
    """What ``rmqk demo`` compares with (its own function), with a fresh group."""
    from rmqk.plugins.spark.demo_bare import bare_consume_rate

    cpu, loop_cpu = time.process_time(), time.thread_time()
    rate = await bare_consume_rate(
        namesrv_addr, topic, count, timeout, expression, group=unique("demo_phase_bare")
    )
    return Phase(rate, time.process_time() - cpu, time.thread_time() - loop_cpu)


async def main_async(args: argparse.Namespace) -> None:
    from rmqk.plugins.broker import EmbeddedBroker
    from rmqk.plugins.spark.demo import QUEUES, load_demo_spec, produce_orders
    from rmqk.plugins.spark.options import parse_sink_options

    config: str | None = args.config  # None: the demo's own examples/demo.toml
    data = Path(tempfile.mkdtemp(prefix="rmqk-demo-phase-"))
    try:
        async with EmbeddedBroker(
            str(data / "broker"), namesrv_port=0, broker_port=0, message_index_enable=False
        ) as broker:
            spec = load_demo_spec(config, broker.namesrv_addr, str(data / "out"))
            topic = spec.subscriptions[0].topic
            expression = spec.subscriptions[0].sub_string
            _warm_up(parse_sink_options(spec.sink_options), data)
            await broker.create_topic(topic, queues=QUEUES)
            produced = await produce_orders(broker.namesrv_addr, args.messages, topic=topic)
            count = produced.count
            timeout = 60.0 + count / 1_000
            ratios: list[float] = []
            for n in range(args.rounds):
                out = data / f"out-{n}"
                round_spec = load_demo_spec(config, broker.namesrv_addr, str(out))
                round_spec = attrs.evolve(round_spec, group=unique("demo_phase_sink"))
                sink = await _sink_phase(round_spec, count, timeout)
                bare = await _bare_phase(broker.namesrv_addr, topic, expression, count, timeout)
                shutil.rmtree(out, ignore_errors=True)
                ratios.append(sink.rate / bare.rate)
                print(
                    f"round {n + 1}: sink {sink.rate:,.0f} rows/s ({sink.flushes} flushes, "
                    f"tail {sink.tail_ms:.0f} ms, "
                    f"CPU {sink.cpu_s:.2f} s, loop thread {sink.loop_cpu_s:.2f} s) | bare "
                    f"{bare.rate:,.0f} msg/s (CPU {bare.cpu_s:.2f} s, loop thread "
                    f"{bare.loop_cpu_s:.2f} s) | end to end / bare {ratios[-1]:.2f}",
                    flush=True,
                )
            print(
                f"demo end to end / bare consume, {count:,} messages, {args.rounds} rounds: "
                f"median {statistics.median(ratios):.2f} "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f}; goal >= 0.8)"
            )
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.demo_phase",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", "--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--config", help="a consumer file like examples/demo.toml (the default)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
