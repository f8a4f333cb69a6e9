"""A thread pool whose size can go down as well as up (the adaptive consume pool).

Python's ThreadPoolExecutor cannot shrink; Java's consume pool changes its core
size every minute with the backlog (``adjust_thread_pool_nums_threshold``). This
pool starts threads lazily up to its size, and a shrink retires surplus threads:
an idle one through a sentinel, a busy one when its task ends.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ResizablePool"]

T = TypeVar("T")


class _Work:
    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(
        self,
        future: concurrent.futures.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs


class ResizablePool(concurrent.futures.Executor):
    """An executor of ``size`` threads (at least 1) that :meth:`resize` changes at any time."""

    def __init__(self, size: int, thread_name_prefix: str = "ResizablePool") -> None:
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._target = max(1, size)
        self._live = 0  # threads started and not yet retired
        self._idle = 0  # threads waiting for work
        self._seq = 0
        self._shutdown = False
        self._threads: set[threading.Thread] = set()

    @property
    def size(self) -> int:
        """The number of threads the pool runs at most (its core size)."""
        return self._target

    @property
    def live_threads(self) -> int:
        return self._live

    def resize(self, size: int) -> int:
        """Set the size (clamped to at least 1); return it. Surplus threads retire."""
        size = max(1, size)
        with self._lock:
            self._target = size
            surplus = self._live - size
        # A sentinel retires an idle thread now; a busy one takes it after its task.
        for _ in range(max(0, surplus)):
            self._queue.put(None)
        return size

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put(_Work(future, fn, args, kwargs))
            # A new thread while the work waiting outnumbers the idle threads.
            if self._live < self._target and self._queue.qsize() > self._idle:
                self._start_thread()
        return future

    def _start_thread(self) -> None:
        # Under self._lock.
        self._seq += 1
        self._live += 1
        thread = threading.Thread(target=self._run, name=f"{self._prefix}_{self._seq}", daemon=True)
        self._threads.add(thread)
        thread.start()

    def _run(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                with self._lock:
                    self._idle += 1
                item = self._queue.get()
                with self._lock:
                    self._idle -= 1
                if item is None:
                    with self._lock:
                        if self._shutdown or self._live > self._target:
                            self._live -= 1
                            self._threads.discard(me)
                            return
                    continue  # a grow after the shrink: this thread stays
                if item.future.set_running_or_notify_cancel():
                    try:
                        result = item.fn(*item.args, **item.kwargs)
                    except BaseException as exc:
                        item.future.set_exception(exc)
                    else:
                        item.future.set_result(result)
                del item
                with self._lock:
                    if self._shutdown or self._live > self._target:
                        self._live -= 1
                        self._threads.discard(me)
                        return
        except BaseException:
            with self._lock:
                self._live -= 1
                self._threads.discard(me)
            raise

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item.future.cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()
