"""Full garbage collections skip the heap a process had when its sinks started, while they run.

A group-commit sink keeps its window in flight (200,000 messages for the spark
sink's defaults). The messages are not tracked by the cyclic GC, but each one
counts as an allocation towards a young collection, so the young generation is
collected every few hundred messages, and the batches' few tracked objects,
which live until their flush lands, soon make a full collection due. Each full
collection walks every tracked object of the process: its modules, classes and
functions (some 60,000 objects in a consumer with pyarrow loaded) as well as
what is in flight. Frozen (:func:`gc.freeze`), that start-up heap is left out
of every collection; unfrozen when the last sink closes, it is collected as
before, so nothing that became garbage meanwhile is kept for good.

A process that manages freezing itself (it froze before the first sink
started) is left alone. Python 3.12's collector moves the immortal objects it
meets into the permanent generation (3.11 has none, 3.13 untracks them), so
there ``gc.get_freeze_count()`` is above zero from start-up on: the count alone
would read as a freeze by the process and the heap would never be frozen.
"""

from __future__ import annotations

import gc
import sys
import threading

__all__ = ["HeapFreeze", "heap_freeze"]


class HeapFreeze:
    """Counts the open sinks: the first freezes the heap, the last one out unfreezes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._froze = False

    @property
    def frozen_by_us(self) -> bool:
        return self._froze

    def hold(self) -> None:
        with self._lock:
            self._holders += 1
            if self._holders == 1 and gc.isenabled() and not _frozen_by_the_process():
                gc.freeze()
                self._froze = True

    def release(self) -> None:
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0 and self._froze:
                self._froze = False
                gc.unfreeze()


def _frozen_by_the_process() -> bool:
    """Whether the permanent generation holds the start-up heap, not just immortal objects."""
    if gc.get_freeze_count() == 0:
        return False
    # sys.modules is there from start-up, so any freeze took it, and mortal, so
    # 3.12's collector never moved it. The walk (about 1 ms for a consumer's heap)
    # is taken once, by the first sink to open.
    probe = sys.modules
    if not gc.is_tracked(probe):
        return True
    return not any(obj is probe for obj in gc.get_objects())


# One per process: the GC's permanent generation is.
heap_freeze = HeapFreeze()
