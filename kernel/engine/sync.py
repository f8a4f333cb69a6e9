"""Blocking facades: ``PushConsumer`` and ``Producer`` over a background event loop.

All sync consumers and producers of a process share one loop thread, so two of
them with the same client id share one client instance, as in Java.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.producer import AsyncProducer, QueueSelector
from rmqk.message import Message
from rmqk.model import MessageQueue, SendResult

__all__ = ["Producer", "PushConsumer", "run_in_loop"]

T = TypeVar("T")


class _LoopThread:
    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or not cls._loop.is_running():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name="rmqk-loop", daemon=True)
                thread.start()
                ready.wait()
                cls._loop, cls._thread = loop, thread
            return cls._loop


def run_in_loop(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the shared loop thread and wait for its result."""
    loop = _LoopThread.loop()
    if threading.current_thread() is _LoopThread._thread:
        raise RuntimeError("a blocking rmqk call was made from inside rmqk's event loop")
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


class PushConsumer:
    """The blocking push consumer; see :class:`rmqk.engine.consumer.AsyncPushConsumer`."""

    def __init__(self, group: str, **options: Any) -> None:
        self._inner = AsyncPushConsumer(group, **options)
        _live.add(self)

    @property
    def group(self) -> str:
        return self._inner.group

    @property
    def inner(self) -> AsyncPushConsumer:
        return self._inner

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> None:
        loop = _LoopThread.loop()
        if self._inner.state.value == "RUNNING":
            loop.call_soon_threadsafe(self._inner.subscribe, topic, expression, expression_type)
        else:
            self._inner.subscribe(topic, expression, expression_type)

    def unsubscribe(self, topic: str) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.unsubscribe, topic)

    def register_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        return self._inner.register_listener(listener)

    def register_rebalance_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        return self._inner.register_rebalance_listener(listener)

    def start(self) -> None:
        run_in_loop(self._inner.start())

    def shutdown(self) -> None:
        run_in_loop(self._inner.shutdown())
        _live.discard(self)

    def pause(self) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.pause)

    def resume(self) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.resume)

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class Producer:
    """The blocking producer; see :class:`rmqk.engine.producer.AsyncProducer`."""

    def __init__(self, group: str, **options: Any) -> None:
        self._inner = AsyncProducer(group, **options)
        _live.add(self)

    @property
    def inner(self) -> AsyncProducer:
        return self._inner

    def start(self) -> None:
        run_in_loop(self._inner.start())

    def shutdown(self) -> None:
        run_in_loop(self._inner.shutdown())
        _live.discard(self)

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        return run_in_loop(
            self._inner.send(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)
        )

    def send_orderly(self, msg: Message, key: str) -> SendResult:
        return run_in_loop(self._inner.send_orderly(msg, key))

    def send_oneway(self, msg: Message) -> None:
        run_in_loop(self._inner.send_oneway(msg))

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        return run_in_loop(self._inner.send_batch(msgs))

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


_live: set[Any] = set()


@atexit.register
def _shutdown_live() -> None:
    # Persist offsets and unregister consumers a script forgot to shut down.
    for obj in list(_live):
        with contextlib.suppress(Exception):
            obj.shutdown()
