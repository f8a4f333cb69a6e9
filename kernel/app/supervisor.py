"""``processes = N``: running consumers as supervised worker processes.

One Python process uses one core. A consumer with ``processes = N`` (or every
consumer, with ``rmqk run --processes N``) runs as N worker processes
(:mod:`rmqk.app.worker`), each its own client instance of the group, so the
allocation strategy spreads the group's queues over them as over any N
members. The supervisor holds no consumer and no connection; it

* starts every worker in a fresh interpreter (multiprocessing ``spawn``) and lets
  the first ones consume together, once all have reported ready (consumer
  started paused, so registered with the brokers but holding no queue) or
  ``start_together_timeout`` after the launch: the group's queues are dealt out
  once rather than taken by the quickest worker and handed over as the others
  come up; a restarted worker consumes at once,
* restarts a worker that dies, after 1, 2, 4, ... seconds (capped); a worker that
  keeps dying within ``stable_after`` seconds of its start is given up on after
  ``give_up_after`` tries, and then everything stops and the run exits 1 with
  the worker's last reason,
* stops them all on SIGINT/SIGTERM: each worker stops as a single process does
  (sink flushed, batches acknowledged, offsets committed) and is killed only if it
  has not exited ``stop_timeout`` seconds later,
* draws one summary line and prints one final tally for the group, from the
  counters each worker sends over its pipe, and writes the workers' log records.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import IO, Any

import attrs

from rmqk.app.worker import WorkerJob, worker_main
from rmqk.app.worker_messages import (
    WorkerFailed,
    WorkerFigures,
    WorkerLog,
    WorkerReady,
    WorkerStarted,
)
from rmqk.spi.workers import WorkerIdentity

__all__ = ["Supervisor", "SupervisorSettings", "worker_identities"]

log = logging.getLogger("rmqk.supervisor")


@attrs.frozen
class SupervisorSettings:
    restart_delay: float = 1.0
    restart_delay_max: float = 30.0
    # A worker that lived this long before dying was not dying at start.
    stable_after: float = 10.0
    give_up_after: int = 5
    stop_timeout: float = 60.0
    report_interval: float = 1.0
    # The longest the first workers wait for their slowest sibling before starting.
    start_together_timeout: float = 30.0


def worker_identities(counts: Sequence[tuple[str, int]]) -> list[WorkerIdentity]:
    """One identity per worker of each (consumer, processes), slots numbered across all."""
    out: list[WorkerIdentity] = []
    for name, count in counts:
        for index in range(count):
            out.append(WorkerIdentity(name, index, count, slot=len(out)))
    return out


class _Slot:
    """One worker position: the process holding it now and what its predecessors did."""

    def __init__(self, job: WorkerJob) -> None:
        self.job = job
        self.process: Any = None
        self.conn: Connection | None = None
        self.launched = 0.0
        self.started = False
        self.ready = False
        self.go_sent = False
        self.failures = 0
        self.next_start = 0.0
        self.banked = WorkerFigures(lag=0)
        self.last: WorkerFigures | None = None
        self.last_error: str | None = None
        self.last_error_final = False
        self.restarts = 0

    @property
    def label(self) -> str:
        return self.job.identity.label

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.exitcode is None

    def figures(self) -> WorkerFigures:
        return self.banked if self.last is None else self.banked.plus(self.last)


class Supervisor:
    """Runs ``jobs`` as worker processes until stopped; :meth:`run` returns the exit code."""

    def __init__(
        self,
        jobs: Sequence[WorkerJob],
        settings: SupervisorSettings | None = None,
        log_stream: IO[str] | None = None,
        summary: Any = None,
    ) -> None:
        self.settings = settings or SupervisorSettings()
        self.slots = [_Slot(job) for job in jobs]
        self.log_stream = log_stream
        # A SummaryLine to draw on (its draw/clear), or None for no live line.
        self.summary = summary
        self._context = multiprocessing.get_context("spawn")
        self._stop_requested = False
        self._failure: str | None = None
        self._last_rates: dict[str, tuple[float, int, int]] = {}
        # Until this is set, launched workers wait for the word to start their consumers.
        self._released = False
        self._first_launch: float | None = None

    # -- lifecycle -----------------------------------------------------------------

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        self._stop_requested = True

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.summary is not None:
                self.summary.clear()

    def _run(self) -> int:
        next_draw = 0.0
        while not self._stop_requested:
            now = time.monotonic()
            for slot in self.slots:
                if slot.process is None and now >= slot.next_start:
                    self._launch(slot)
            self._poll(0.25)
            for slot in self.slots:
                if slot.process is not None and not slot.alive:
                    self._exited(slot)
            self._release()
            if self._failure is not None:
                break
            if self.summary is not None and time.monotonic() >= next_draw:
                self.summary.draw(self.render())
                next_draw = time.monotonic() + self.settings.report_interval
        killed = self._stop_all()
        if self.summary is not None:
            self.summary.clear()
        self._print_tally()
        if self._failure is not None:
            print(f"rmqk: error: {self._failure}", file=sys.stderr)
            return 1
        if killed:
            print(
                f"rmqk: error: {', '.join(killed)} did not stop within "
                f"{self.settings.stop_timeout:g} s and was killed",
                file=sys.stderr,
            )
            return 1
        return 0

    def _launch(self, slot: _Slot) -> None:
        # Duplex: the worker reports on it and waits on it for the word to start.
        receive, send = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=worker_main,
            args=(slot.job, send),
            name=f"rmqk-worker-{slot.label}",
            daemon=False,
        )
        process.start()
        # The child holds its own copy; ours must close so EOF comes when the worker exits.
        send.close()
        slot.process, slot.conn = process, receive
        slot.launched = time.monotonic()
        slot.started = slot.ready = slot.go_sent = False
        if self._first_launch is None:
            self._first_launch = slot.launched
        log.info("worker %s started (pid %s)", slot.label, process.pid)
        if self._released:
            self._go(slot)

    def _release(self) -> None:
        """Once every first worker is ready (or gone, or too slow), tell them all to start."""
        if not self._released:
            waited = time.monotonic() - (self._first_launch or time.monotonic())
            pending = [s for s in self.slots if s.alive and not s.ready]
            if pending and waited < self.settings.start_together_timeout:
                return
            if pending:
                log.warning(
                    "%s not ready %g s after launch; starting the others",
                    ", ".join(f"worker {s.label}" for s in pending),
                    self.settings.start_together_timeout,
                )
            self._released = True
        for slot in self.slots:
            if slot.alive and not slot.go_sent:
                self._go(slot)

    def _go(self, slot: _Slot) -> None:
        slot.go_sent = True
        try:
            if slot.conn is not None:
                slot.conn.send_bytes(b"go")
        except OSError:
            # The worker is gone; its exit is handled like any other.
            pass

    def _exited(self, slot: _Slot) -> None:
        """A worker exited on its own: bank its counts and schedule a restart, or give up."""
        self._drain(slot)
        code = slot.process.exitcode
        lived = time.monotonic() - slot.launched
        self._retire(slot)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        reason = slot.last_error or how
        if slot.last_error_final and slot.last_error:
            # A restart would meet the same (offsets gone backwards, a sink's halt): end
            # with that error.
            self._failure = slot.last_error.removeprefix("rmqk: error: ")
            return
        if lived >= self.settings.stable_after:
            slot.failures = 0
        slot.failures += 1
        if slot.failures >= self.settings.give_up_after:
            self._failure = (
                f"worker {slot.label} died {slot.failures} times in a row within "
                f"{self.settings.stable_after:g} s of its start; giving up (last: {reason})"
            )
            return
        delay = min(
            self.settings.restart_delay * 2 ** (slot.failures - 1), self.settings.restart_delay_max
        )
        slot.next_start = time.monotonic() + delay
        slot.restarts += 1
        log.warning(
            "worker %s (pid %s) died after %.1f s (%s); restarting it in %g s",
            slot.label,
            slot.process.pid,
            lived,
            reason,
            delay,
        )
        slot.process = None

    def _retire(self, slot: _Slot) -> None:
        if slot.last is not None:
            slot.banked = slot.banked.plus(slot.last.banked())
            slot.last = None
        if slot.conn is not None:
            slot.conn.close()
            slot.conn = None

    def _stop_all(self) -> list[str]:
        """Stop every worker cleanly; kill those still running after the timeout."""
        for slot in self.slots:
            if slot.alive:
                # They may have had SIGINT from the terminal already; a second stop is harmless.
                os.kill(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_timeout
        while any(s.alive for s in self.slots) and time.monotonic() < deadline:
            self._poll(0.25)
        killed = []
        for slot in self.slots:
            if slot.alive:
                killed.append(f"worker {slot.label} (pid {slot.process.pid})")
                slot.process.kill()
            if slot.process is not None:
                slot.process.join()
                self._drain(slot)
                self._retire(slot)
        return killed

    # -- messages ------------------------------------------------------------------

    def _poll(self, timeout: float) -> None:
        conns = {slot.conn: slot for slot in self.slots if slot.conn is not None}
        sentinels = [s.process.sentinel for s in self.slots if s.alive]
        for ready in wait([*conns, *sentinels], timeout):
            slot = conns.get(ready)  # type: ignore[call-overload]
            if slot is not None:
                self._drain(slot)

    def _drain(self, slot: _Slot) -> None:
        conn = slot.conn
        try:
            while conn is not None and conn.poll():
                self._receive(slot, conn.recv())
        except (EOFError, OSError):
            pass

    def _receive(self, slot: _Slot, message: object) -> None:
        if isinstance(message, WorkerFigures):
            slot.last = message
            if not slot.started:
                slot.started = True
        elif isinstance(message, WorkerLog):
            stream = self.log_stream if self.log_stream is not None else sys.stderr
            stream.write(message.text)
            stream.flush()
        elif isinstance(message, WorkerReady):
            slot.ready = True
        elif isinstance(message, WorkerStarted):
            slot.started = True
            slot.last_error = None
        elif isinstance(message, WorkerFailed):
            slot.last_error = message.reason
            slot.last_error_final = message.final

    # -- the group's figures -------------------------------------------------------

    def totals(self) -> dict[str, WorkerFigures]:
        """Per consumer, the sum over its workers, past incarnations included."""
        out: dict[str, WorkerFigures] = {}
        for slot in self.slots:
            name = slot.job.identity.consumer
            figures = slot.figures()
            out[name] = out[name].plus(figures) if name in out else figures
        return out

    def render(self, now: float | None = None) -> str:
        from rmqk.app.summary_line import progress_text

        now = time.monotonic() if now is None else now
        parts = []
        for name, figures in self.totals().items():
            slots = [s for s in self.slots if s.job.identity.consumer == name]
            alive = sum(1 for s in slots if s.alive)
            then, done, held = self._last_rates.get(
                name, (now, figures.consumed_ok, figures.flow_control_events)
            )
            span = now - then
            rate = (figures.consumed_ok - done) / span if span > 0 else 0.0
            held_rate = (figures.flow_control_events - held) / span if span > 0 else 0.0
            self._last_rates[name] = (now, figures.consumed_ok, figures.flow_control_events)
            text = progress_text(
                name,
                queues=figures.queues,
                consumed=figures.consumed_ok,
                rate=rate,
                failed=figures.consumed_failed,
                cached=figures.cached,
                held_rate=held_rate,
                lag=figures.lag,
                namesrv=figures.namesrv,
                namesrv_error=figures.namesrv_error,
                unrouted_topics=figures.unrouted_topics,
            )
            parts.append(f"{text}, {alive}/{len(slots)} workers")
        return " | ".join(parts)

    def _print_tally(self) -> None:
        for name, figures in self.totals().items():
            slots = [s for s in self.slots if s.job.identity.consumer == name]
            restarts = sum(s.restarts for s in slots)
            bad = f", {figures.bad_bodies:,} bad bodies kept raw" if figures.bad_bodies else ""
            print(
                f"rmqk: {name}: {figures.consumed_ok:,} consumed, {figures.consumed_failed:,} "
                f"failed{bad}, by {len(slots)} worker processes ({restarts} "
                f"restart{'' if restarts == 1 else 's'})",
                file=sys.stderr,
            )


def process_counts(
    config: Any, names: Sequence[str] | None, override: int | None
) -> list[tuple[str, int]]:
    """(consumer, processes) for each consumer to run; ``override`` is ``--processes``."""
    from rmqk.model.errors import ClientError

    if override is not None and override < 1:
        raise ClientError(f"--processes must be an integer >= 1, got {override}")
    specs = [s for s in config.consumers if not names or s.name in names]
    missing = sorted(set(names or ()) - {s.name for s in specs})
    if missing:
        known = ", ".join(s.name for s in config.consumers)
        raise ClientError(
            f"no consumer named {', '.join(missing)} in {config.path}; consumers: {known}"
        )
    return [(s.name, override if override is not None else s.processes) for s in specs]


def run_supervised(
    config: Any,
    counts: Sequence[tuple[str, int]],
    args: Any,
    handler: logging.StreamHandler[Any] | None,
    on_terminal: bool,
) -> int:
    """``rmqk run`` with worker processes: checked once here, then run by a :class:`Supervisor`."""
    from rmqk.app.preflight import preflight
    from rmqk.app.summary_line import SummaryLine
    from rmqk.model.errors import ConfigError, ConfigProblem

    specs = [config.consumer(name) for name, _ in counts]
    # Every problem once, here, rather than once per worker and restart.
    preflight(config, specs)
    problems = [
        ConfigProblem(
            config.path,
            spec.table,
            "processes",
            f"--processes {count}: a BROADCASTING consumer runs as 1 process "
            "(each member takes every message)",
        )
        for spec, (_, count) in zip(specs, counts, strict=True)
        if count > 1 and spec.message_model.name == "BROADCASTING"
    ]
    if problems:
        raise ConfigError(problems)
    jobs = [
        WorkerJob(
            config_path=os.path.abspath(config.path),
            identity=identity,
            log_level=getattr(args, "log_level", None) or "WARNING",
            log_format=getattr(args, "log_format", None) or "text",
            cwd=os.getcwd(),
        )
        for identity in worker_identities(counts)
    ]
    summary = None
    stream: IO[str] = handler.stream if handler is not None else sys.stderr
    if not on_terminal:
        from rmqk.app.cli import announce

        # No summary line to show it runs: the log says so, at any level (the tally
        # printed at the end is the stop line).
        announce(
            log,
            "running %d consumer(s) from %s as %d worker processes",
            len(counts),
            config.path,
            len(jobs),
        )
    else:
        log.info("running %d worker process(es) from %s", len(jobs), config.path)
        print(
            f"rmqk: running {len(counts)} consumer(s) from {config.path} as {len(jobs)} worker "
            "processes; Ctrl-C stops",
            file=sys.stderr,
        )
        summary = SummaryLine([], sys.stderr)
        stream = summary.stream()
    try:
        return Supervisor(jobs, log_stream=stream, summary=summary).run()
    finally:
        if handler is not None:
            handler.setStream(sys.stderr)
