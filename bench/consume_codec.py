"""Per-message cost of the consumer's decode and process-queue steps, off the network.

Not a scenario of ``python -m bench`` (nothing here talks to a broker): the wall
clock rates there are too noisy on a loaded 2-core machine to decide on changes
of a microsecond a message. This times, on one pull body of ``--batch`` records
of ``--size`` bytes built like the bench producer's, each step the consumer does
per pull:

* ``decode``: ``decode_pull_body`` (what the transport does with a FOUND body);
* ``pq``: ``ProcessQueue.put_messages`` then ``remove_messages`` of the batch;
* ``ext-columns``: the Python lists a columnar sink needs, read from the decoded
  MessageExt objects (what ``messages_to_arrow`` does before Arrow sees them);
* ``columns``: a prototype decoding the body straight into those lists, no
  MessageExt per record (the "columnar path" of issue 18), to compare with
  ``decode`` + ``ext-columns``;
* ``arrow``: ``messages_to_arrow`` of ``--pulls`` such batches at once (what the
  Spark sink does per slice of a flush), the compiled column builder unless
  ``RMQK_NO_EXTENSIONS=1``;
* ``parquet``: ``pyarrow.parquet.write_table`` of that record batch into memory
  (snappy), the cost ``arrow`` is to be compared with.

``--loops N`` runs only the chosen step N times and prints nothing: for
instruction counts, run it under ``valgrind --tool=callgrind`` with two values
of N and divide the difference by the extra messages (that cancels start-up)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m bench.consume_codec --step decode --loops 2000

``RMQK_NO_EXTENSIONS=1`` selects the pure-Python decoder and column builder.
"""

from __future__ import annotations

import argparse
import os
import struct
import time
import timeit
from collections.abc import Callable

from rmqk.engine.process_queue import ProcessQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.remoting.pull_body import decode_pull_body
from rmqk.wire import message_codec
from rmqk.wire.message_codec import encode_stored_message
from rmqk.wire.uniq_id import create_uniq_id

STEPS = ("decode", "pq", "ext-columns", "columns", "arrow", "parquet")


def pull_body(batch: int, size: int) -> bytes:
    """``batch`` records as a broker serves them to a pull of the bench's topic."""
    parts = []
    for i in range(batch):
        props = f"UNIQ_KEY\x01{create_uniq_id()}\x02WAIT\x01true\x02TAGS\x01bench"
        parts.append(
            encode_stored_message(
                topic="bench_consume_0123456789",
                body=bytes(size),
                queue_id=1,
                queue_offset=1000 + i,
                commit_log_offset=123456 + i * 200,
                born_timestamp=1_700_000_000_000 + i,
                born_host="10.0.0.7:51234",
                store_timestamp=1_700_000_000_005 + i,
                store_host="10.0.0.1:10911",
                properties_raw=props,
            )
        )
    return b"".join(parts)


def decode(body: bytes) -> list[MessageExt]:
    pulled = decode_pull_body(
        body,
        "broker-a",
        queue_id=1,
        request_offset=1000,
        next_begin_offset=1000 + 10_000,
        max_body_size=4 << 20,
    )
    return list(pulled.messages)


def ext_columns(msgs: list[MessageExt]) -> tuple[list[object], ...]:
    return (
        [m.topic for m in msgs],
        [m.queue_offset for m in msgs],
        [m.body for m in msgs],
        [m.born_timestamp for m in msgs],
        [m.store_timestamp for m in msgs],
        [m.reconsume_times for m in msgs],
        [m.properties_text() for m in msgs],
    )


_PREFIX = struct.Struct(">iiiiiqqiq8sq8siqi")


def columns(body: bytes) -> tuple[list[object], ...]:
    """The prototype: the same lists straight from the body (IPv4, V1, happy path only)."""
    topic: list[object] = []
    offsets: list[object] = []
    bodies: list[object] = []
    born: list[object] = []
    stored: list[object] = []
    reconsume: list[object] = []
    props: list[object] = []
    unpack = _PREFIX.unpack_from
    off = 0
    end = len(body)
    last_raw = b""
    last_topic = ""
    while off < end:
        vals = unpack(body, off)
        pos = off + 88
        body_len = vals[14]
        bodies.append(body[pos : pos + body_len])
        pos += body_len
        topic_len = body[pos]
        raw = body[pos + 1 : pos + 1 + topic_len]
        if raw != last_raw:
            last_raw = raw
            last_topic = raw.decode("utf-8", "replace")
        topic.append(last_topic)
        pos += 1 + topic_len + 2
        off += vals[0]
        props.append(body[pos:off])
        offsets.append(vals[5])
        born.append(vals[8])
        stored.append(vals[10])
        reconsume.append(vals[12])
    return topic, offsets, bodies, born, stored, reconsume, props


def arrow_steps(name: str, body: bytes, pulls: int) -> Callable[[], object]:
    """messages_to_arrow of ``pulls`` decoded pulls, or the Parquet write of its result."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqk.model import MessageQueue
    from rmqk.plugins.spark.columns import messages_to_arrow

    queue = MessageQueue("bench_consume_0123456789", "broker-a", 1)
    # Fresh messages per pull, as consumed: raw properties, queue bounds recorded.
    pairs = []
    for _ in range(pulls):
        msgs = decode(body)
        for m in msgs:
            m.set_queue_bounds((0, 10_000))
        pairs.append((queue, msgs))
    if name == "arrow":
        return lambda: messages_to_arrow(pairs)
    table = pa.Table.from_batches([messages_to_arrow(pairs)])

    def write() -> None:
        pq.write_table(table, pa.BufferOutputStream(), compression="snappy")

    return write


def step(name: str, body: bytes, pulls: int) -> Callable[[], object]:
    if name == "decode":
        return lambda: decode(body)
    if name == "columns":
        return lambda: columns(body)
    if name in ("arrow", "parquet"):
        return arrow_steps(name, body, pulls)
    msgs = decode(body)
    if name == "ext-columns":
        return lambda: ext_columns(msgs)

    def put_remove() -> None:
        pq = ProcessQueue()
        pq.put_messages(msgs)
        pq.remove_messages(msgs)

    return put_remove


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.consume_codec", description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--step", choices=STEPS, action="append")
    parser.add_argument("--pulls", type=int, default=256, help="pulls per arrow/parquet call")
    parser.add_argument("--loops", type=int, default=0, help="run only, N times (callgrind)")
    args = parser.parse_args()
    body = pull_body(args.batch, args.size)
    steps = args.step or list(STEPS)
    if args.loops:
        for name in steps:
            fn = step(name, body, args.pulls)
            for _ in range(args.loops):
                fn()
        return
    compiled = "compiled" if message_codec.SPEEDUPS else "pure Python"
    no_ext = os.environ.get("RMQK_NO_EXTENSIONS", "")
    print(f"decoder: {compiled} (RMQK_NO_EXTENSIONS={no_ext!r}), {args.batch} x {args.size} B")
    for name in steps:
        fn = step(name, body, args.pulls)
        pulls = args.pulls if name in ("arrow", "parquet") else 1
        number = max(1, 2000 // pulls)
        # CPU time, not wall clock: other processes share the machine's cores.
        timer = timeit.Timer(fn, timer=time.process_time)
        best = min(timer.repeat(number=number, repeat=7)) / number / pulls / args.batch
        print(f"{name:12} {best * 1e6:6.3f} us/msg (best of 7 x {number * pulls} pulls)")


if __name__ == "__main__":
    main()
