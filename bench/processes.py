"""``processes``: aggregate rate and CPU per message of ``rmqk run --processes N``.

For each N (1, 2 and 4 by default) a topic is filled, then ``rmqk run
--processes N`` consumes it into a ``python`` sink that only counts
(:func:`count_batch`). Each worker records, at its first and its last batch, the
wall clock and its own CPU time (``time.process_time``), so the figures cover
consuming only: not the interpreter's start, not the idle time before SIGINT.
Rate is all messages over the span from the first worker's first batch to the
last worker's last; CPU per message is the workers' CPU over that work divided
by the messages. Target: CPU per message with N workers within 15% of one
worker's (more processes must not cost more per message).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.harness import REPO_ROOT, Result, at_most, topic_arguments
from bench.load import fill_topic, unique
from rmqk.errors import RmqkError

NAME = "processes"
HELP = "aggregate rate and CPU per message of rmqk run --processes 1, 2 and 4"

# CPU per message with N workers may exceed one worker's by at most this much.
CPU_TOLERANCE = 1.15
_STATS_ENV = "RMQK_BENCH_STATS_DIR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    topic_arguments(parser, count=200_000)
    parser.set_defaults(queues=8)
    parser.add_argument(
        "--workers", default="1,2,4", help="worker counts to run, comma-separated (1,2,4)"
    )
    parser.add_argument("--batch", type=int, default=32, help="consume batch size (32)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run (s)")


# -- the sink the workers run ------------------------------------------------------

_stats: dict[str, Any] = {}
_lock = threading.Lock()


def _write_stats() -> None:
    folder = os.environ.get(_STATS_ENV)
    if not folder or not _stats:
        return
    with _lock:
        text = json.dumps(_stats)
    path = Path(folder) / f"{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _writer() -> None:
    while True:
        time.sleep(0.1)
        _write_stats()


def count_batch(queue: Any, messages: Any) -> None:
    """The ``python`` sink of the bench: counts, and notes the time and CPU of each batch."""
    now, cpu = time.time(), time.process_time()
    with _lock:
        if not _stats:
            _stats.update(count=0, t_first=now, cpu_first=cpu)
            threading.Thread(target=_writer, daemon=True).start()
            atexit.register(_write_stats)
        _stats["count"] += len(messages)
        _stats["t_last"], _stats["cpu_last"] = now, cpu


# -- the scenario -----------------------------------------------------------------


def _config(path: Path, ns: str, topic: str, group: str, batch: int) -> None:
    path.write_text(
        "[consumers.bench]\n"
        f'group = "{group}"\n'
        f'namesrv_addr = "{ns}"\n'
        f'subscription = {{ {topic} = "*" }}\n'
        'consume_from_where = "CONSUME_FROM_FIRST_OFFSET"\n'
        f"consume_message_batch_max_size = {batch}\n"
        f"pull_batch_size = {max(32, batch)}\n"
        'sink = "python"\n'
        'sink_options = { function = "bench.processes:count_batch" }\n'
    )


def _read_stats(folder: Path) -> list[dict[str, Any]]:
    out = []
    for file in folder.glob("*.json"):
        try:
            out.append(json.loads(file.read_text()))
        except (OSError, ValueError):
            continue
    return out


async def _one_run(cluster: Cluster, args: argparse.Namespace, workers: int) -> dict[str, Any]:
    ns = cluster.namesrv_addr
    topic = unique("bench_procs")
    await cluster.create_topic(topic, args.queues)
    await fill_topic(ns, topic, args.messages, args.size)
    with tempfile.TemporaryDirectory(prefix="rmqk-bench-procs-") as tmp:
        folder = Path(tmp)
        config = folder / "bench.toml"
        _config(config, ns, topic, unique("bench_procs"), args.batch)
        env = {**os.environ, _STATS_ENV: str(folder)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "run", str(config), "--processes", str(workers)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + args.timeout
            while sum(s["count"] for s in _read_stats(folder)) < args.messages:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RmqkError(f"{workers} worker(s) did not consume {args.messages:,}")
                await asyncio.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.to_thread(proc.communicate, timeout=120)
        if proc.returncode != 0:
            raise RmqkError(f"rmqk run --processes {workers} exited {proc.returncode}: {err}")
        stats = _read_stats(folder)
    count = sum(s["count"] for s in stats)
    span = max(s["t_last"] for s in stats) - min(s["t_first"] for s in stats)
    cpu = sum(s["cpu_last"] - s["cpu_first"] for s in stats)
    return {
        "workers": workers,
        "messages": count,
        "rate": round(count / span, 1) if span > 0 else 0.0,
        "cpu_us_per_message": round(cpu / count * 1e6, 3),
        "busy_workers": len(stats),
    }


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    if 1 not in counts:
        counts.insert(0, 1)
    runs = [await _one_run(cluster, args, n) for n in counts]
    base = runs[0]["cpu_us_per_message"]
    targets = [
        at_most(
            f"CPU/msg {r['workers']} workers",
            r["cpu_us_per_message"],
            round(base * CPU_TOLERANCE, 3),
            " us",
        )
        for r in runs[1:]
    ]
    summary = ", ".join(
        f"{r['workers']} worker(s) {r['rate']:,.0f} msg/s, {r['cpu_us_per_message']:.1f} us CPU/msg"
        for r in runs
    )
    return Result(
        NAME,
        f"{summary} ({args.messages:,} x {args.size} B, {args.queues} queues, batch {args.batch})",
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "batch": args.batch,
            "workers": counts,
        },
        figures={
            f"w{r['workers']}_{key}": r[field]
            for r in runs
            for key, field in (("msgs_per_s", "rate"), ("cpu_us_per_msg", "cpu_us_per_message"))
        },
        targets=targets,
    )
