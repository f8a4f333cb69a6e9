"""Running part of a scenario in a fresh interpreter (multiprocessing, spawn).

The latency producer runs apart so its work does not delay the listener it
measures, and the memory scenario's consumer runs apart so its peak RSS is the
consumer's alone, not the producer's that filled the backlog.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
from collections.abc import Callable, Coroutine
from typing import Any

from rmqk.model.errors import RmqkError

__all__ = ["Child", "child_entry"]

ChildMain = Callable[..., Coroutine[Any, Any, dict[str, Any]]]


def child_entry(
    conn: multiprocessing.connection.Connection, fn: ChildMain, kwargs: Any, log_level: str
) -> None:
    """Runs in the child: ``fn(**kwargs)`` on a new event loop; its dict goes back."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rmqk").setLevel(log_level)
    try:
        result = asyncio.run(fn(**kwargs))
        conn.send(("ok", result))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


class Child:
    """One coroutine function run in a spawned process; ``await child.result()``."""

    def __init__(self, fn: ChildMain, **kwargs: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._parent, child_conn = ctx.Pipe(duplex=False)
        # The child logs as this process does (the bench's --log-level).
        level = logging.getLevelName(logging.getLogger("rmqk").getEffectiveLevel())
        self._proc = ctx.Process(
            target=child_entry,
            args=(child_conn, fn, kwargs, level),
            name=f"bench-{fn.__name__}",
        )
        self._child_conn = child_conn
        self.name = fn.__name__

    def start(self) -> Child:
        self._proc.start()
        self._child_conn.close()
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    async def result(self, timeout: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()

        def wait() -> tuple[str, Any]:
            if not self._parent.poll(timeout):
                raise TimeoutError
            try:
                value: tuple[str, Any] = self._parent.recv()
            except EOFError:
                return ("error", f"exited with code {self._proc.exitcode} before answering")
            return value

        try:
            status, value = await loop.run_in_executor(None, wait)
        except TimeoutError:
            self.kill()
            raise RmqkError(
                f"bench child {self.name} gave no result within {timeout:.0f} s"
            ) from None
        await loop.run_in_executor(None, self._proc.join, 30)
        if status != "ok":
            raise RmqkError(f"bench child {self.name} failed: {value}")
        result: dict[str, Any] = value
        return result

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)
