"""``rmqk demo``: the whole path on one machine, checked.

1. start the embedded broker (a temporary directory, or ``--data``) and, in
   parallel, the Spark session (needed only to read the output back);
2. create the topic ``Orders`` with 8 queues and produce order events (JSON
   bodies, a tag per event type, the order id as key; one order's events go to
   one queue);
3. once Spark is ready (its start takes both cores for seconds, and would
   share them with the consumer whose rate the demo measures), run the consumer
   ``examples/demo.toml`` composes, pointed at the embedded broker, with the
   Spark sink writing Parquet (to ``--out``), then a no-op consumer over the
   same messages for comparison;
4. wait until every message is written, read the output back with Spark and
   print a report (rows per tag, offsets and lag per queue, throughput);
5. exit 0 only if every produced message landed exactly once (row count,
   distinct message ids, distinct queue offsets, and the same ids as sent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from rmqk.model.errors import RmqkError
from rmqk.plugins.spark.demo_bare import bare_consume_rate
from rmqk.plugins.spark.demo_console import DemoConsole, jvm_output_to
from rmqk.plugins.spark.demo_report import DemoResult, format_report, queue_offsets, read_back
from rmqk.spi.commands import Command

__all__ = [
    "DEMO_COMMAND",
    "DEMO_TOML",
    "DemoResult",
    "ProduceResult",
    "order_events",
    "produce_orders",
    "run_demo",
]

TOPIC = "Orders"
QUEUES = 8
EVENTS = ("created", "paid", "shipped", "cancelled")

# The copy of examples/demo.toml used when the package runs without the repository
# (a test keeps the two identical).
DEMO_TOML = """\
# The consumer `rmqk demo` runs: every order event of the Orders topic goes to
# Parquet files through the Spark sink, in group commits, exactly once.
# `rmqk demo` points it at its embedded broker and at its output directory.
#
#   rmqk check examples/demo.toml          # validate and show every resolved option
#   rmqk run examples/demo.toml            # against a broker on 127.0.0.1:9876

[consumers.orders]
group = "rmqk-demo-orders"
namesrv_addr = "127.0.0.1:9876"
# The four event types by tag: the broker filters by the tags' hash codes and the
# client checks each message's tag again, as Java's consumer does.
subscription = { Orders = "created || paid || shipped || cancelled" }
consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
allocate_message_queue_strategy = "AVG"
# A broker answers at most 32 messages per pull; each pull is one batch for the sink.
pull_batch_size = 32
consume_message_batch_max_size = 32
# The sink acknowledges each batch when the flush that covers it commits, without
# holding a consume worker; `rmqk run` widens the consumer's window so at least two
# flushes' worth stays in flight (one written while the next fills).
# On shutdown, let batches whose flush is under way finish and commit their offsets.
await_termination_millis_when_shutdown = 5000
sink = "spark"

[consumers.orders.sink_options]
path = "out/orders"
format = "parquet"
partition_by = "tags"
# The JSON body becomes columns; the other columns are the message's metadata.
body_format = "json"
body_schema = "order_id STRING, customer_id STRING, event STRING, amount DOUBLE, \
currency STRING, items INT, ts BIGINT"
exactly_once = true
# One flush is written while the next one fills; the last rows of a backlog go as
# soon as every queue is consumed to its end, those of a trickle wait at most
# flush_seconds.
# Each exactly-once flush has a fixed cost (a file per tag, the commit log, the
# publish): 50,000-row flushes landed 0.43-0.45 of the bare consume rate where
# 15,000-row ones landed 0.34.
flush_rows = 50000
flush_seconds = 0.25
master = "local[2]"
app_name = "rmqk-demo"
"spark.driver.memory" = "1g"
"spark.sql.shuffle.partitions" = "2"
# Partitioned writes keep one open file per tag instead of sorting the rows.
"spark.sql.maxConcurrentOutputFileWriters" = "8"
# A JVM that lives for a minute: compile with C1 only and collect with one thread
# (about 40% less CPU to start it, on a machine the demo shares with the broker and
# the consumer). Drop it for long-running Spark jobs.
"spark.driver.extraJavaOptions" = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""


def repo_demo_toml() -> Path | None:
    """examples/demo.toml of the source tree this package runs from, if there is one."""
    candidate = Path(__file__).resolve().parents[2] / "examples" / "demo.toml"
    return candidate if candidate.is_file() else None


# -- the dataset ---------------------------------------------------------------------


@attrs.frozen
class OrderEvent:
    order_id: str
    tag: str
    body: bytes


def order_events(count: int, seed: int = 7) -> list[OrderEvent]:
    """``count`` events of orders: created, then paid and shipped, or cancelled."""
    rng = random.Random(seed)
    events: list[OrderEvent] = []
    base_ts = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    order = 0
    while len(events) < count:
        order += 1
        order_id = f"O-{order:07d}"
        customer = f"C-{rng.randrange(1, 5000):05d}"
        amount = round(rng.uniform(5, 500), 2)
        items = rng.randrange(1, 9)
        flow = ["created", "cancelled"] if rng.random() < 0.1 else ["created", "paid", "shipped"]
        for step, event in enumerate(flow):
            if len(events) >= count:
                break
            events.append(
                OrderEvent(
                    order_id,
                    event,
                    _order_json(
                        order_id,
                        customer,
                        event,
                        amount,
                        items,
                        base_ts + order * 1000 + step * 250,
                    ),
                )
            )
    return events


def _order_json(
    order_id: str, customer: str, event: str, amount: float, items: int, ts: int
) -> bytes:
    # json.dumps's bytes for these ASCII-only values (a test compares), at a quarter of its cost.
    return (
        f'{{"order_id": "{order_id}", "customer_id": "{customer}", "event": "{event}", '
        f'"amount": {amount!r}, "currency": "EUR", "items": {items}, "ts": {ts}}}'
    ).encode()


@attrs.frozen
class ProduceResult:
    count: int
    seconds: float
    msg_ids: tuple[str, ...]
    per_tag: tuple[tuple[str, int], ...]


async def produce_orders(
    namesrv_addr: str,
    count: int,
    *,
    topic: str = TOPIC,
    batch: int = 256,
    progress: Callable[[int, int], None] | None = None,
    group: str = "rmqk-demo-producer",
) -> ProduceResult:
    """Send ``count`` order events; each order's events go to one queue, in order."""
    from rmqk import AsyncProducer
    from rmqk.model import java_string_hash
    from rmqk.model.message import Message, MessageProperty

    started = time.monotonic()
    events = order_events(count)
    ids: list[str] = []
    tags: dict[str, int] = {}
    sent = 0
    async with AsyncProducer(group, namesrv_addr=namesrv_addr) as producer:
        queues = await producer.queues_for(topic)
        pending: dict[int, list[Message]] = {}
        # One batch in flight per queue keeps each order's events in order while
        # the queues' batches overlap.
        in_flight: dict[int, asyncio.Task[None]] = {}

        async def send(index: int, msgs: list[Message]) -> None:
            nonlocal sent
            await producer.send_batch(msgs, queue=queues[index])
            ids.extend(m.properties[MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs)
            sent += len(msgs)
            if progress is not None:
                progress(sent, count)

        async def launch(index: int) -> None:
            previous = in_flight.get(index)
            if previous is not None:
                await previous
            in_flight[index] = asyncio.ensure_future(send(index, pending.pop(index)))

        order_id = ""
        index = 0
        for event in events:
            if event.order_id != order_id:  # an order's events come one after the other
                order_id = event.order_id
                index = abs(java_string_hash(order_id)) % len(queues)
            tags[event.tag] = tags.get(event.tag, 0) + 1
            bucket = pending.setdefault(index, [])
            bucket.append(Message(topic, event.body, tags=event.tag, keys=event.order_id))
            if len(bucket) >= batch:
                await launch(index)
        for index in sorted(pending):
            await launch(index)
        await asyncio.gather(*in_flight.values())
    return ProduceResult(
        count=sent,
        seconds=time.monotonic() - started,
        msg_ids=tuple(ids),
        per_tag=tuple(sorted(tags.items())),
    )


# -- the run -------------------------------------------------------------------------


def _start_spark(options: Any, jvm_log: str | None = None) -> Any:
    """The session, warmed up with one small write like the sink's (then deleted).

    With ``jvm_log``, the JVM's stdout and stderr go to that file for good.
    """
    from rmqk.plugins.spark.arrow_writer import ArrowFileWriter
    from rmqk.plugins.spark.columns import messages_to_arrow
    from rmqk.plugins.spark.frames import FrameWriter
    from rmqk.plugins.spark.session import get_session

    with jvm_output_to(jvm_log) if jvm_log else contextlib.nullcontext():
        session = get_session(options.master, options.app_name, options.spark_conf)
    # The demo prints its own report; Spark's warnings (task sizes, native libraries)
    # would only bury it.
    session.sparkContext.setLogLevel("ERROR")
    scratch = tempfile.mkdtemp(prefix="rmqk-demo-warmup-")
    try:
        batch = messages_to_arrow([(None, warm_up_messages())])
        target = os.path.join(scratch, "w")
        if options.resolved_writer == "spark":
            writer = FrameWriter(attrs.evolve(options, path=scratch, table=None), session)
            writer.check()
            writer.write(batch, target)
        else:
            # The sink writes without Spark: warm up only what reads the output back.
            files = ArrowFileWriter(options, "warmup", lambda b: writer_rows(session, b))
            files.write(batch, Path(target), 0, temporary=False)
        df = session.read.parquet(target)
        df.groupBy("queue_id", "tags").count().collect()
        df.select("msg_id", "queue_offset").toArrow()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return session


def warm_up_messages() -> list[Any]:
    """64 order events as consumed messages: the batch the writer is warmed up with."""
    from rmqk.model.message import MessageExt

    return [
        MessageExt(
            topic=TOPIC,
            body=e.body,
            queue_offset=i,
            store_host="127.0.0.1:10911",
            properties={"TAGS": e.tag, "KEYS": e.order_id},
        )
        for i, e in enumerate(order_events(64))
    ]


def writer_rows(session: Any, batch: Any) -> Any:
    """Rows Spark makes of a batch (the warm-up's bodies never need it)."""
    raise RmqkError("the demo's warm-up batch needs no Spark decoding")


def load_demo_spec(config_path: str | None, namesrv_addr: str, out_dir: str) -> Any:
    """The demo's consumer spec, pointed at the embedded broker and the output directory."""
    from rmqk import load_config

    if config_path is None:
        repo = repo_demo_toml()
        if repo is not None:
            config_path = str(repo)
    if config_path is None:
        with tempfile.TemporaryDirectory(prefix="rmqk-demo-config-") as scratch:
            config_path = os.path.join(scratch, "demo.toml")
            Path(config_path).write_text(DEMO_TOML)
            config = load_config(config_path)
    else:
        config = load_config(config_path)
    spec = config.consumers[0]
    if spec.sink != "spark":
        raise RmqkError(f"{config_path}: the demo needs a consumer whose sink is 'spark'")
    options = attrs.evolve(spec.options, namesrv_addr=(namesrv_addr,))
    sink_options = dict(spec.sink_options)
    sink_options["path"] = out_dir
    return attrs.evolve(spec, options=options, sink_options=sink_options)


async def _wait_for_spark(session_task: asyncio.Future[Any], console: DemoConsole, why: str) -> Any:
    """The session, with a ticking line while it is not ready yet."""
    started = time.monotonic()
    if not session_task.done():
        while not session_task.done():
            waited = time.monotonic() - started
            console.status(
                f"waiting for Spark {why} (its start takes ~10 s the first time)... {waited:.0f} s"
            )
            await asyncio.wait({session_task}, timeout=0.5)
        console.say(f"Spark ready ({time.monotonic() - started:.1f} s after producing ended)")
    return await session_task


async def run_demo(
    messages: int,
    *,
    data_dir: str,
    out_dir: str,
    config_path: str | None = None,
    timeout: float | None = None,
    console: DemoConsole | None = None,
    jvm_log: str | None = None,
) -> DemoResult:
    """The demo's run; ``jvm_log`` is where Spark's JVM writes (None: the terminal)."""
    from rmqk import ComposedConsumer
    from rmqk.plugins.broker import EmbeddedBroker
    from rmqk.plugins.spark.options import parse_sink_options

    if console is None:
        console = DemoConsole()
    if timeout is None:
        timeout = 60.0 + messages / 2_000
    # No message key index (QUERY_MESSAGE by key): nothing in the demo looks a message
    # up by key, and indexing two keys per message was a third of producing.
    async with EmbeddedBroker(
        data_dir, namesrv_port=0, broker_port=0, message_index_enable=False
    ) as broker:
        spec = load_demo_spec(config_path, broker.namesrv_addr, out_dir)
        sink_opts = parse_sink_options(spec.sink_options)
        # Spark takes seconds to start and its first query is slow (JIT): do both
        # while the dataset is produced.
        session_task = asyncio.ensure_future(asyncio.to_thread(_start_spark, sink_opts, jvm_log))
        topic = spec.subscriptions[0].topic
        await broker.create_topic(topic, queues=QUEUES)
        console.say(
            f"embedded broker: name server {broker.namesrv_addr}, broker {broker.broker_addr}"
        )
        where = f"; its output goes to {jvm_log}" if jvm_log else ""
        console.say(f"starting Spark in the background{where} (it reads the output back)")
        produced = await produce_orders(
            broker.namesrv_addr, messages, topic=topic, progress=console.progress("producing")
        )
        console.say(
            f"produced {produced.count:,} order events to {topic} ({QUEUES} queues) "
            f"in {produced.seconds:.1f}s "
            f"({produced.count / max(produced.seconds, 1e-9):,.0f} msg/s)"
        )
        # The sink writes Parquet with pyarrow (unless writer = "spark"), so the consumer
        # needs no Spark; but Spark's start takes both cores and would slow the rate this
        # demo measures, so the consumer waits for it.
        session = await _wait_for_spark(session_task, console, "before consuming")
        composed = ComposedConsumer(spec)
        sink = composed.sink
        started = time.monotonic()
        console.status("starting the consumer (group commits into Parquet)...")
        await composed.start()
        bar = console.progress("consuming")
        deadline = started + timeout
        try:
            while True:
                stats = sink.stats  # type: ignore[attr-defined]
                done = stats.rows_written + stats.rows_skipped
                bar(min(done, produced.count), produced.count)
                if done >= produced.count:
                    break
                if time.monotonic() > deadline:
                    raise RmqkError(
                        f"only {done:,} of {produced.count:,} messages were written within "
                        f"{timeout:.0f}s"
                    )
                await asyncio.sleep(0.1)
            stats = sink.stats  # type: ignore[attr-defined]
            first = stats.first_write_at or started
            consume_seconds = (stats.last_flush_at or time.monotonic()) - started
            flushes = stats.flushes
            console.say(
                f"consumed and wrote {done:,} rows in {flushes} flushes, {consume_seconds:.1f}s "
                f"({done / max(consume_seconds, 1e-9):,.0f} rows/s; first after "
                f"{first - started:.1f}s)"
            )
        finally:
            console.status("stopping the consumer (committing offsets)...")
            await composed.stop()
        queues = await queue_offsets(broker.namesrv_addr, spec.group, topic)
        console.status("consuming the same messages with a no-op listener, for comparison...")
        subscription = spec.subscriptions[0]
        bare_rate = await bare_consume_rate(
            broker.namesrv_addr,
            topic,
            produced.count,
            timeout,
            subscription.sub_string,
            subscription.expression_type.value,
        )
    console.status("reading the Parquet output back with Spark and checking it...")
    read_started = time.monotonic()
    result = await asyncio.to_thread(read_back, session, out_dir, produced, queues, spec.group)
    read_seconds = time.monotonic() - read_started
    console.clear()
    return attrs.evolve(
        result,
        produce_seconds=produced.seconds,
        consume_seconds=consume_seconds,
        read_seconds=read_seconds,
        flushes=flushes,
        bare_consume_rate=bare_rate,
    )


# -- the command -------------------------------------------------------------------------


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages",
        type=int,
        default=200_000,
        metavar="N",
        help="order events to produce (default 200000)",
    )
    parser.add_argument(
        "--data", metavar="DIR", help="broker data directory (default: a temporary one)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="Parquet output directory (default: a temporary one)"
    )
    parser.add_argument(
        "--config", metavar="TOML", help="consumer config (default: examples/demo.toml)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary directories (output, broker data, Spark log) and print them",
    )
    parser.add_argument(
        "--spark-log",
        action="store_true",
        help="show Spark's and the JVM's own output on the terminal instead of in spark.log",
    )


class _FlowControlNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "so do flow control" not in record.getMessage()


@attrs.frozen
class _Workspace:
    """Where the demo writes, and which of it is temporary (deleted at exit)."""

    data_dir: str
    out_dir: str
    jvm_log: str | None
    temporary: tuple[str, ...]

    @property
    def out_is_temporary(self) -> bool:
        return any(self.out_dir.startswith(p + os.sep) for p in self.temporary)

    def kept(self) -> list[tuple[str, str]]:
        """What a kept workspace holds, for the closing lines."""
        shown = [("Parquet output", self.out_dir), ("broker data", self.data_dir)]
        if self.jvm_log:
            shown.append(("Spark log", self.jvm_log))
        return [(label, path) for label, path in shown if os.path.exists(path)]


def _workspace(args: argparse.Namespace) -> _Workspace:
    # One temporary folder holds what the user did not place: broker data, output, log.
    work = tempfile.mkdtemp(prefix="rmqk-demo-")
    data_dir = args.data or os.path.join(work, "broker")
    out_dir = args.out or os.path.join(work, "orders")
    jvm_log = None if args.spark_log else os.path.join(work, "spark.log")
    return _Workspace(data_dir, out_dir, jvm_log, (work,))


def _run(args: argparse.Namespace) -> int:
    from rmqk.plugins.spark.session import require_spark, stop_session

    require_spark()
    # The demo's consumer outruns the sink on purpose (flow control is how a push
    # consumer waits for it); its per-queue notices would bury the report.
    logging.getLogger("rmqk.engine.consumer").addFilter(_FlowControlNotices())
    if args.messages < 1:
        raise RmqkError("--messages must be at least 1")
    if args.out is not None and os.path.exists(args.out) and any(Path(args.out).iterdir()):
        raise RmqkError(f"--out {args.out} is not empty; the demo checks what it writes there")
    space = _workspace(args)
    console = DemoConsole()
    started = time.monotonic()
    ok = False
    try:
        result = asyncio.run(
            run_demo(
                args.messages,
                data_dir=space.data_dir,
                out_dir=space.out_dir,
                config_path=args.config,
                console=console,
                jvm_log=space.jvm_log,
            )
        )
        deleted = space.out_is_temporary and not args.keep
        console.say(format_report(result, deleted=deleted, unicode=console.unicode))
        console.say(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        ok = result.ok
        return 0 if ok else 1
    finally:
        console.status("stopping Spark...")
        with contextlib.suppress(Exception):
            stop_session()
        console.clear()
        if args.keep or not ok:
            # A failed run keeps everything: the Spark log is where its cause is.
            why = "--keep" if args.keep else "the demo failed"
            console.say(f"kept ({why}):")
            for label, path in space.kept():
                console.say(f"  {label:<15} {path}")
        else:
            for path in space.temporary:
                shutil.rmtree(path, ignore_errors=True)
        console.close()


DEMO_COMMAND = Command(
    help="run the embedded broker, produce orders, consume them into Parquet via Spark, check",
    run=_run,
    add_arguments=_add_arguments,
    description=__doc__,
    examples=(
        "rmqk demo",
        "rmqk demo --messages 20000 --keep",
        "rmqk demo --out /tmp/orders --data /tmp/broker",
        "rmqk demo --messages 5000 --spark-log",
    ),
)
