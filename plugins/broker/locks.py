"""Queue locks for orderly consumption (RebalanceLockManager).

A lock belongs to one client id of one group and lapses ``expiry`` seconds
after the holder last locked it (60 s on Apache, overridable for tests). Locking
again renews it; another client gets it only once it has lapsed. Unlocking by
anyone but the holder is ignored. Locks survive the holder's disconnection, as
on Apache: they simply lapse.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import attrs

from rmqk.model import MessageQueue

__all__ = ["RebalanceLockManager"]

log = logging.getLogger("rmqk.broker.locks")


@attrs.define
class _LockEntry:
    client_id: str
    last_update: float


class RebalanceLockManager:
    def __init__(self, expiry: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry = expiry
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def _expired(self, entry: _LockEntry, now: float) -> bool:
        return now - entry.last_update > self.expiry

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueue], client_id: str
    ) -> set[MessageQueue]:
        """Lock what can be locked; returns the queues this client now holds."""
        now = self._clock()
        table = self._table.setdefault(group, {})
        locked: set[MessageQueue] = set()
        for mq in mqs:
            entry = table.get(mq)
            if entry is None:
                table[mq] = _LockEntry(client_id, now)
                locked.add(mq)
            elif entry.client_id == client_id or self._expired(entry, now):
                if entry.client_id != client_id:
                    log.info(
                        "lock of %s in group %s lapsed (held by %s); now %s",
                        mq,
                        group,
                        entry.client_id,
                        client_id,
                    )
                entry.client_id = client_id
                entry.last_update = now
                locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        table = self._table.get(group)
        if table is None:
            return
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding a live lock on ``mq``, if any."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self._clock()):
            return None
        return entry.client_id
