"""What a worker process of ``processes = N`` is, and what it tells its supervisor.

A consumer with ``processes = N`` runs as N worker processes under
:mod:`rmqk.app.supervisor`. Inside one, :func:`current_worker` says which worker it
is, so a plugin can keep the workers apart: the ``jsonl`` sink writes a file per
worker (:func:`worker_path`), the prometheus endpoint listens on its port plus
the worker's slot. In a single process it returns None and nothing changes.

The messages a worker sends its supervisor are :mod:`rmqk.app.worker_messages`.
"""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = [
    "WorkerIdentity",
    "current_worker",
    "set_current_worker",
    "worker_path",
]


@attrs.frozen
class WorkerIdentity:
    """Worker ``index`` of ``count`` running consumer ``consumer``.

    ``slot`` numbers every worker of one supervisor (all consumers), from 0, for
    resources that must differ across all of them, such as a port.
    """

    consumer: str
    index: int
    count: int
    slot: int = 0

    @property
    def label(self) -> str:
        return f"{self.consumer}#{self.index}"


_current: WorkerIdentity | None = None


def current_worker() -> WorkerIdentity | None:
    """The worker this process is, or None outside a supervised worker."""
    return _current


def set_current_worker(identity: WorkerIdentity | None) -> None:
    global _current
    _current = identity


def worker_path(path: str) -> str:
    """``path`` with the worker's index before its suffix (``out.jsonl`` -> ``out.w1.jsonl``).

    Unchanged outside a worker, so a single process writes the file it is told.
    Restarts of a worker reuse its index, so one file has one writer at a time.
    """
    worker = current_worker()
    if worker is None:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.w{worker.index}{p.suffix}"))
