"""``processes``: aggregate rate and CPU per message of ``rmqk run --processes N``.

For each N (1, 2 and 4 by default) a topic is filled, then ``rmqk run
--processes N`` consumes it into a ``python`` sink that only counts
(:func:`count_batch`). Each worker records, at its first and its last batch, the
wall clock and its own resource usage (``getrusage``: user and system CPU, of all
its threads, and its voluntary and involuntary context switches), so the figures
cover consuming only: not the interpreter's start, not the idle time before
SIGINT. Rate is all messages over the span from the first worker's first batch
to the last worker's last; CPU per message is the workers' CPU over that work
divided by the messages counted (a message delivered twice, as a rebalance may
do, counts twice: it was consumed twice). Target: CPU per message with N workers
within 15% of one worker's (more processes must not cost more per message).

What moves the figure besides rmqk (see docs/performance.md, "Several
processes"):

* the machine: the line says how many cores the run had and flags a run with
  more busy processes (the workers, plus the embedded broker unless
  ``--namesrv`` names one elsewhere) than cores. Oversubscribed, every wake-up
  of a worker may find its core busy and its caches cold; the user and system
  CPU and the context switches per 1,000 messages show it.
* each worker's share of the queues: a queue has one pull in flight, so a
  worker with 2 of 8 queues has 2 pulls in flight where one worker has 8; it
  then sleeps between responses and pays a wake-up for a pull's worth of
  messages instead of for several. One process on 2 queues pays the same. So
  for each N-worker run the bench also runs one worker on a topic of that
  share (8 / N queues; ``--no-share-control`` skips these) and prints both
  ratios: N workers against one worker with the same share is what running N
  processes adds; one worker on the share against one on all the queues is
  what the thinner pull pipeline costs. ``--queues-per-worker K`` instead gives
  every run K x N queues, so every worker has the single one's share.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import resource
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
from rmqk.model.errors import RmqkError

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
    parser.add_argument(
        "--queues-per-worker",
        type=int,
        default=None,
        metavar="K",
        help="give the run with N workers K x N queues (default: --queues for every run)",
    )
    parser.add_argument(
        "--no-share-control",
        action="store_true",
        help="skip the runs of 1 worker on each N-worker run's share of the queues",
    )
    parser.add_argument("--batch", type=int, default=32, help="consume batch size (32)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run (s)")


# -- the sink the workers run ------------------------------------------------------

_stats: dict[str, Any] = {}
_lock = threading.Lock()
# The writer thread and the exit hook both write the file; one at a time, or a rename
# may move a half-written file into place and the bench read it as missing.
_file_lock = threading.Lock()
_written = [-1]


def _usage() -> list[float]:
    """CPU (user, system) in seconds and context switches (voluntary, involuntary)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return [r.ru_utime, r.ru_stime, r.ru_nvcsw, r.ru_nivcsw]


def _write_stats() -> None:
    folder = os.environ.get(_STATS_ENV)
    if not folder or not _stats:
        return
    with _file_lock:
        with _lock:
            if _stats["count"] == _written[0]:
                return
            text = json.dumps(_stats)
            count = _stats["count"]
        path = Path(folder) / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        _written[0] = count


def _writer() -> None:
    while True:
        time.sleep(0.1)
        _write_stats()


def count_batch(queue: Any, messages: Any) -> None:
    """The ``python`` sink of the bench: counts, and notes the time and usage of each batch."""
    # One getrusage per batch, as the process_time it replaces (both are one system call).
    now, usage = time.time(), _usage()
    with _lock:
        if not _stats:
            _stats.update(count=0, t_first=now, usage_first=usage)
            threading.Thread(target=_writer, daemon=True).start()
            atexit.register(_write_stats)
        _stats["count"] += len(messages)
        _stats["t_last"], _stats["usage_last"] = now, usage


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


def _cores() -> int:
    """The cores this run may use (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _queues(args: argparse.Namespace, workers: int) -> int:
    per_worker: int | None = args.queues_per_worker
    return int(args.queues) if per_worker is None else per_worker * workers


def _figures(stats: list[dict[str, Any]], workers: int, queues: int, sent: int) -> dict[str, Any]:
    count = sum(s["count"] for s in stats)
    if count < sent:
        raise RmqkError(f"{workers} worker(s) reported {count:,} of {sent:,} messages")
    span = max(s["t_last"] for s in stats) - min(s["t_first"] for s in stats)
    user, system, voluntary, involuntary = (
        sum(s["usage_last"][i] - s["usage_first"][i] for s in stats) for i in range(4)
    )
    return {
        "workers": workers,
        "queues": queues,
        "messages": count,
        "rate": round(count / span, 1) if span > 0 else 0.0,
        "cpu_us_per_message": round((user + system) / count * 1e6, 3),
        "user_us_per_message": round(user / count * 1e6, 3),
        "sys_us_per_message": round(system / count * 1e6, 3),
        "vcsw_per_1000": round(voluntary / count * 1000, 1),
        "ivcsw_per_1000": round(involuntary / count * 1000, 1),
        # Delivered twice: in flight on a queue that moved to another worker.
        "duplicates": count - sent,
        # From the first worker's first batch to the last worker's first batch.
        "start_spread_s": round(
            max(s["t_first"] for s in stats) - min(s["t_first"] for s in stats), 3
        ),
        "busy_workers": len(stats),
    }


async def _one_run(
    cluster: Cluster, args: argparse.Namespace, workers: int, queues: int
) -> dict[str, Any]:
    ns = cluster.namesrv_addr
    topic = unique("bench_procs")
    await cluster.create_topic(topic, queues)
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
    return _figures(stats, workers, queues, args.messages)


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['workers']} worker(s) {r['rate']:,.0f} msg/s, {r['cpu_us_per_message']:.1f} us "
        f"CPU/msg (user {r['user_us_per_message']:.1f} + sys {r['sys_us_per_message']:.1f}; "
        f"{r['vcsw_per_1000']:.0f} + {r['ivcsw_per_1000']:.0f} switches/1000 msgs; "
        f"{r['queues'] / r['workers']:g} queues/worker; {r['duplicates']:,} twice)"
    )


def _share_controls(args: argparse.Namespace, counts: list[int]) -> dict[int, int]:
    """Worker count -> the queues each of its workers holds, where that differs from 1's."""
    if args.no_share_control or args.queues_per_worker is not None:
        return {}
    return {
        n: args.queues // n for n in counts if n > 1 and args.queues % n == 0 and args.queues // n
    }


async def run(cluster: Cluster, args: argparse.Namespace) -> Result:
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    if 1 not in counts:
        counts.insert(0, 1)
    runs = [await _one_run(cluster, args, n, _queues(args, n)) for n in counts]
    shares = _share_controls(args, counts)
    controls = {
        share: await _one_run(cluster, args, 1, share) for share in sorted(set(shares.values()))
    }
    cores = _cores()
    # The embedded broker is one more busy process on these cores; an external one may not be.
    broker_here = cluster.mode != "external"
    base = runs[0]["cpu_us_per_message"]

    def oversubscribed(workers: int) -> bool:
        return workers + broker_here > cores

    def note(workers: int) -> str:
        if not oversubscribed(workers):
            return ""
        who = f"{workers} workers + broker" if broker_here else f"{workers} workers"
        return f" ({who} on {cores} cores: oversubscribed)"

    targets = [
        at_most(
            f"CPU/msg {r['workers']} workers{note(r['workers'])}",
            r["cpu_us_per_message"],
            round(base * CPU_TOLERANCE, 3),
            " us",
        )
        for r in runs[1:]
    ]
    split = []
    figures: dict[str, Any] = {"cores": cores}
    for r in runs[1:]:
        control = controls.get(shares.get(r["workers"], 0))
        if control is None:
            continue
        cpu, own = r["cpu_us_per_message"], control["cpu_us_per_message"]
        figures[f"w{r['workers']}_share_cpu_us_per_msg"] = own
        figures[f"w{r['workers']}_vs_share"] = round(cpu / own, 3)
        figures[f"w{r['workers']}_share_vs_w1"] = round(own / base, 3)
        split.append(
            f"{r['workers']} workers {cpu / base:.2f}x of 1 worker's CPU/msg = "
            f"{own / base:.2f}x for a {control['queues']}-queue share (1 worker on "
            f"{control['queues']} queues: {own:.1f} us, user {control['user_us_per_message']:.1f}"
            f" + sys {control['sys_us_per_message']:.1f}; {control['vcsw_per_1000']:.0f} + "
            f"{control['ivcsw_per_1000']:.0f} switches/1000 msgs) x {cpu / own:.2f}x for "
            f"{r['workers']} processes"
        )
    shape = (
        f"{args.queues_per_worker} queues per worker"
        if args.queues_per_worker is not None
        else f"{args.queues} queues"
    )
    where = "embedded broker on the same cores" if broker_here else "broker elsewhere"
    summary = (
        "; ".join(_line(r) for r in runs)
        + f" ({args.messages:,} x {args.size} B, {shape}, batch {args.batch}; "
        f"{cores} cores, {where})"
    )
    if split:
        summary += ". Split: " + "; ".join(split)
    for r in runs:
        for key, field in (
            ("msgs_per_s", "rate"),
            ("cpu_us_per_msg", "cpu_us_per_message"),
            ("user_us_per_msg", "user_us_per_message"),
            ("sys_us_per_msg", "sys_us_per_message"),
            ("vcsw_per_1000_msgs", "vcsw_per_1000"),
            ("ivcsw_per_1000_msgs", "ivcsw_per_1000"),
            ("duplicates", "duplicates"),
            ("start_spread_s", "start_spread_s"),
        ):
            figures[f"w{r['workers']}_{key}"] = r[field]
    return Result(
        NAME,
        summary,
        parameters={
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "queues_per_worker": args.queues_per_worker,
            "batch": args.batch,
            "workers": counts,
            "cores": cores,
        },
        figures=figures,
        targets=targets,
        notes=(
            "oversubscribed: more busy processes than cores, so CPU per message includes "
            "waiting for and warming a shared core; see the docstring of bench/processes.py"
            if any(oversubscribed(n) for n in counts[1:])
            else ""
        ),
    )
