"""The body of one worker process of ``processes = N``: one consumer, reporting to its pipe.

:mod:`rmqk.app.supervisor` starts :func:`worker_main` in a fresh interpreter
(multiprocessing's ``spawn`` context: no state of the supervisor, no forked
event loop or threads). The worker runs its one consumer exactly as ``rmqk run``
runs it in a single process, so SIGINT/SIGTERM stop it the same way: sink
flushed, batches acknowledged, offsets committed. Its log records and its
counters go to the supervisor over the pipe; when the pipe breaks (the
supervisor is gone) the worker stops itself rather than run unsupervised.

The worker starts its consumer paused: the start registers it with the brokers
(its heartbeat is answered before the start returns) but no rebalance takes a
queue. Only then does it report :class:`WorkerReady` and wait for the
supervisor's word on the same pipe, and on the word it resumes, which rebalances
at once. The first workers of a run get the word together, once all are ready,
so each one's first rebalance already sees every sibling in the group: no worker
takes queues while its siblings are still importing or registering, only to hand
them over a moment later (re-pulling, and delivering twice what was in flight, as
any rebalance does). Java's own start sends its heartbeat before its first
rebalance too, but that orders one client, not N processes starting together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import attrs

from rmqk.app.worker_messages import (
    WorkerFailed,
    WorkerFigures,
    WorkerLog,
    WorkerReady,
    WorkerStarted,
)
from rmqk.spi.workers import WorkerIdentity, set_current_worker

__all__ = ["WorkerJob", "worker_config", "worker_main"]

log = logging.getLogger("rmqk.worker")

# Seconds between two fetches of the brokers' max offsets (the lag), as the summary line.
_LAG_INTERVAL = 5.0


@attrs.frozen
class WorkerJob:
    """Everything a worker needs, picklable: it crosses into a fresh interpreter."""

    config_path: str
    identity: WorkerIdentity
    log_level: str = "WARNING"
    log_format: str = "text"
    report_interval: float = 1.0
    cwd: str = ""


class _Pipe:
    """The worker's end of the pipe; a lock, since log records come from any thread."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.broken = False

    def send(self, message: object) -> bool:
        if self.broken:
            return False
        try:
            with self.lock:
                self.conn.send(message)
        except (OSError, EOFError, ValueError):
            self.broken = True
        return not self.broken


class _LogStream:
    """A text stream whose writes reach the supervisor as :class:`WorkerLog` messages."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe

    def write(self, text: str) -> int:
        if text and not self.pipe.send(WorkerLog(text)):
            # No supervisor to read it: stderr is still the terminal or the log file.
            sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        pass


def worker_config(config: Any, identity: WorkerIdentity) -> Any:
    """``config`` with only the worker's consumer, under an instance name of its own.

    The default instance name becomes ``<pid>#<nanotime>`` at start, so it is already
    distinct; a name the file gives is suffixed with the worker's index, or all the
    workers would be one client id and the group would not spread over them.
    """
    spec = config.consumer(identity.consumer)
    options = spec.options
    if options.instance_name != "DEFAULT":
        options = attrs.evolve(options, instance_name=f"{options.instance_name}-w{identity.index}")
    spec = attrs.evolve(spec, options=options, processes=1)
    return attrs.evolve(config, consumers=(spec,))


def worker_main(job: WorkerJob, conn: Connection) -> None:
    """The worker process: exit code 0 after a clean stop, 1 (with a reason sent) on error."""
    from rmqk.app.cli import error_line
    from rmqk.app.logsetup import configure_logging

    if job.cwd and job.cwd not in sys.path:
        # Configs name modules of the directory rmqk was started in (python sink functions).
        sys.path.insert(0, job.cwd)
    pipe = _Pipe(conn)
    set_current_worker(job.identity)
    configure_logging(job.log_level, job.log_format, stream=_LogStream(pipe))  # type: ignore[arg-type]
    try:
        try:
            asyncio.run(_run(job, pipe))
        finally:
            # Stopped (or failed): the loop's close put the default handlers back, so a
            # late Ctrl-C or the supervisor's SIGTERM (sent up to a poll later than the
            # terminal's SIGINT) would print a KeyboardInterrupt traceback, or kill the
            # worker, while it exits. A stop is under way: further ones change nothing.
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        log.debug("worker %s failed", job.identity.label, exc_info=True)
        from rmqk.model.errors import SinkHalted
        from rmqk.model.offsets_reset import OffsetsWentBackwardsError

        # Errors a restart would meet again: offsets gone backwards, a sink refusing a
        # message (on_bad_body = "fail": the same body comes first again).
        final = isinstance(exc, OffsetsWentBackwardsError | SinkHalted)
        pipe.send(WorkerFailed(error_line(exc), final=final))
        with contextlib.suppress(OSError):
            conn.close()
        sys.exit(1)
    with contextlib.suppress(OSError):
        conn.close()


async def _run(job: WorkerJob, pipe: _Pipe) -> None:
    from rmqk.app.config import load_config
    from rmqk.app.preflight import preflight
    from rmqk.app.runtime import install_stop_signals, run_config

    stop = asyncio.Event()
    install_stop_signals(stop)
    config = worker_config(load_config(job.config_path), job.identity)
    # Imports the plugins (the sink's module too) while the siblings start, not after.
    preflight(config)
    running: list[Any] = []
    consuming: list[asyncio.Task[None]] = []

    def created(composed: Any) -> None:
        # No rebalance until the go: see the module's docstring.
        composed.consumer.pause()

    def started(consumers: Sequence[Any]) -> None:
        running.extend(consumers)
        consuming.append(
            asyncio.get_running_loop().create_task(_consume_on_go(job, pipe, running, stop))
        )

    try:
        await run_config(config, stop, [job.identity.consumer], started, on_created=created)
    finally:
        stop.set()
        for task in consuming:
            await task
    if running:
        figures = attrs.evolve(_figures(running[0], None), final=True, queues=0, cached=0)
        pipe.send(figures)


async def _consume_on_go(
    job: WorkerJob, pipe: _Pipe, running: list[Any], stop: asyncio.Event
) -> None:
    """Report ready, resume the paused consumers on the go, then report figures until stopped."""
    if not await _wait_for_go(pipe, stop):
        # Stopped first: the consumers stop as they are, holding no queue.
        stop.set()
        return
    for composed in running:
        composed.consumer.resume()
    if not pipe.send(WorkerStarted(os.getpid())):
        stop.set()
        return
    await _report(job, pipe, running, stop)


async def _wait_for_go(pipe: _Pipe, stop: asyncio.Event) -> bool:
    """Report ready, then wait for the supervisor's go; False when stopped first.

    The go is anything readable on the pipe: a message, or the end of the pipe when
    the supervisor is gone (the first figures sent then notice it and stop the worker).
    """
    if not pipe.send(WorkerReady(os.getpid())):
        return False
    loop = asyncio.get_running_loop()
    go = asyncio.Event()
    fd = pipe.conn.fileno()
    loop.add_reader(fd, go.set)
    try:
        stopped = asyncio.ensure_future(stop.wait())
        ready = asyncio.ensure_future(go.wait())
        await asyncio.wait((stopped, ready), return_when=asyncio.FIRST_COMPLETED)
        for task in (stopped, ready):
            task.cancel()
    finally:
        loop.remove_reader(fd)
    return not stop.is_set()


def _figures(composed: Any, max_offsets: Any) -> WorkerFigures:
    from rmqk.console.progress import snapshot

    progress = snapshot(composed.consumer, max_offsets)
    return WorkerFigures(
        queues=len(progress.queues),
        consumed_ok=progress.consumed_ok,
        consumed_failed=progress.consumed_failed,
        cached=progress.cached_messages,
        flow_control_events=progress.flow_control_events,
        bad_bodies=progress.bad_bodies,
        lag=progress.lag,
        namesrv=progress.namesrv,
        namesrv_error=progress.namesrv_error,
        unrouted_topics=progress.unrouted_topics,
    )


async def _report(job: WorkerJob, pipe: _Pipe, running: list[Any], stop: asyncio.Event) -> None:
    from rmqk.console.progress import fetch_max_offsets
    from rmqk.spi.aio import wait_event

    loop = asyncio.get_running_loop()
    next_lag = 0.0
    max_offsets: Any = None
    held: set[Any] = set()
    while not stop.is_set():
        try:
            composed = running[0]
            queues = set(composed.consumer.rebalance.process_queue_table)
            if loop.time() >= next_lag or queues != held:
                max_offsets = await fetch_max_offsets(composed.consumer)
                held = queues
                next_lag = loop.time() + _LAG_INTERVAL
            if not pipe.send(_figures(composed, max_offsets)):
                log.warning("worker %s lost its supervisor: stopping", job.identity.label)
                stop.set()
        except Exception:
            # Figures are a convenience: they must never take the consumer down.
            log.debug("worker figures failed", exc_info=True)
        await wait_event(stop, job.report_interval)
