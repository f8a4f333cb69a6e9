"""Blocking facades: ``PushConsumer``, ``LitePullConsumer`` and ``Producer`` over a
background event loop.

All sync consumers and producers of a process share one loop thread, so two of
them with the same client id share one client instance, as in Java.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull import AsyncLitePullConsumer, RebalanceListener
from rmqk.engine.producer import AsyncProducer, QueryResult, QueueSelector, check_target
from rmqk.engine.transaction import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionSendResult,
    run_local_transaction,
)
from rmqk.model import MessageQueue, PullResult, SendResult, SendStatus
from rmqk.model.message import Message, MessageExt

__all__ = ["LitePullConsumer", "Producer", "PushConsumer", "TransactionProducer", "run_in_loop"]

log = logging.getLogger("rmqk.engine.sync")

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
        if self._inner.state.value == "RUNNING":
            # On the loop, and waited for: a broker's refusal must reach the caller.
            run_in_loop(_subscribe(self._inner.subscribe, topic, expression, expression_type))
        else:
            self._inner.subscribe(topic, expression, expression_type)

    def unsubscribe(self, topic: str) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.unsubscribe, topic)

    def register_filter_message_hook(self, hook: Any) -> Any:
        """This consumer's own filter hook (see ConsumerMember's)."""
        return self._inner.register_filter_message_hook(hook)

    def register_consume_message_hook(self, hook: Any) -> Any:
        """This consumer's own consume hook (see AsyncPushConsumer's)."""
        return self._inner.register_consume_message_hook(hook)

    def register_listener(
        self, listener: Callable[..., Any], *, name: str | None = None
    ) -> Callable[..., Any]:
        return self._inner.register_listener(listener, name=name)

    def register_rebalance_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        return self._inner.register_rebalance_listener(listener)

    def start(self) -> None:
        """Start consuming; the process then keeps running until :meth:`shutdown`.

        As in Java, where a started consumer's threads keep the JVM alive, a
        script whose main thread ends while a push consumer runs does not exit:
        it waits, and Ctrl-C (or SIGTERM) shuts the running consumers down
        cleanly, committing what was consumed.
        """
        run_in_loop(self._inner.start())
        _keep_alive.add(self)

    def shutdown(self) -> None:
        try:
            run_in_loop(self._inner.shutdown())
        finally:
            _live.discard(self)
            _keep_alive.discard(self)

    # The brokers' view of a queue, as the async consumer's.
    def min_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return run_in_loop(self._inner.search_offset(mq, timestamp_ms))

    def pause(self) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.pause)

    def suspend(self) -> None:
        self.pause()

    def resume(self) -> None:
        _LoopThread.loop().call_soon_threadsafe(self._inner.resume)

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


async def _call(fn: Callable[..., T], *args: Any) -> T:
    """Run a plain method on the loop thread, where the consumer's state lives."""
    return fn(*args)


async def _subscribe(subscribe: Callable[..., asyncio.Future[None] | None], *args: Any) -> None:
    """Subscribe on the loop thread and wait until the brokers accepted it (or refused)."""
    pending = subscribe(*args)
    if pending is not None:
        await pending


class LitePullConsumer:
    """The blocking lite pull consumer; see :class:`rmqk.engine.lite_pull.AsyncLitePullConsumer`.

    Every call runs on rmqk's loop thread and waits for it, so the consumer may
    be used from any one thread at a time. A rebalance listener runs on the loop
    thread and must not call back into blocking rmqk methods.
    """

    def __init__(self, group: str, **options: Any) -> None:
        self._inner = AsyncLitePullConsumer(group, **options)
        _live.add(self)

    @property
    def group(self) -> str:
        return self._inner.group

    @property
    def inner(self) -> AsyncLitePullConsumer:
        return self._inner

    def subscribe(
        self, topic: str, expression: str | None = "*", expression_type: str = "TAG"
    ) -> None:
        run_in_loop(_subscribe(self._inner.subscribe, topic, expression, expression_type))

    def unsubscribe(self, topic: str) -> None:
        run_in_loop(_call(self._inner.unsubscribe, topic))

    def register_filter_message_hook(self, hook: Any) -> Any:
        """This consumer's own filter hook (see ConsumerMember's)."""
        return self._inner.register_filter_message_hook(hook)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        run_in_loop(_call(self._inner.assign, list(queues)))

    def assignment(self) -> frozenset[MessageQueue]:
        return run_in_loop(_call(self._inner.assignment))

    def register_rebalance_listener(self, listener: RebalanceListener) -> RebalanceListener:
        return self._inner.register_rebalance_listener(listener)

    def start(self) -> None:
        run_in_loop(self._inner.start())

    def close(self) -> None:
        run_in_loop(self._inner.close())
        _live.discard(self)

    shutdown = close

    def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        return run_in_loop(self._inner.poll(timeout_ms))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        run_in_loop(_call(self._inner.pause, list(queues)))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        run_in_loop(_call(self._inner.resume, list(queues)))

    def paused(self) -> frozenset[MessageQueue]:
        return run_in_loop(_call(self._inner.paused))

    def seek(self, queue: MessageQueue, offset: int) -> None:
        run_in_loop(self._inner.seek(queue, offset))

    def seek_to_beginning(self, *queues: MessageQueue) -> None:
        run_in_loop(self._inner.seek_to_beginning(*queues))

    def seek_to_end(self, *queues: MessageQueue) -> None:
        run_in_loop(self._inner.seek_to_end(*queues))

    def position(self, queue: MessageQueue) -> int:
        return run_in_loop(self._inner.position(queue))

    def committed(self, queue: MessageQueue) -> int:
        return run_in_loop(self._inner.committed(queue))

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        run_in_loop(self._inner.commit(offsets))

    def commit_async(
        self, offsets: Mapping[MessageQueue, int] | None = None
    ) -> concurrent.futures.Future[None]:
        """Take the offsets now and send them in the background; the future tells the outcome."""
        task = run_in_loop(_call(self._inner.commit_async, offsets))
        return asyncio.run_coroutine_threadsafe(_await(task), _LoopThread.loop())

    def offsets_for_times(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        return run_in_loop(self._inner.offsets_for_times(timestamps))

    # The brokers' view of a queue, as the async consumer's.
    def min_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return run_in_loop(self._inner.search_offset(mq, timestamp_ms))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return run_in_loop(self._inner.fetch_message_queues(topic))

    def pull(
        self,
        queue: MessageQueue,
        expression: str | None,
        offset: int,
        max_nums: int,
        *,
        expression_type: str = "TAG",
        timeout_ms: int | None = None,
    ) -> PullResult:
        """See :meth:`rmqk.engine.lite_pull.AsyncLitePullConsumer.pull`."""
        return run_in_loop(
            self._inner.pull(
                queue,
                expression,
                offset,
                max_nums,
                expression_type=expression_type,
                timeout_ms=timeout_ms,
            )
        )

    def __enter__(self) -> LitePullConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _await(task: asyncio.Task[T]) -> T:
    return await task


class Producer:
    """The blocking producer; see :class:`rmqk.engine.producer.AsyncProducer`."""

    def __init__(self, group: str, **options: Any) -> None:
        self._inner = AsyncProducer(group, **options)
        _live.add(self)

    @property
    def inner(self) -> AsyncProducer:
        return self._inner

    def register_send_message_hook(self, hook: Any) -> Any:
        """This producer's own send hook (see AsyncProducer's)."""
        return self._inner.register_send_message_hook(hook)

    def start(self) -> None:
        run_in_loop(self._inner.start())

    def shutdown(self) -> None:
        run_in_loop(self._inner.shutdown())
        _live.discard(self)

    def queues_for(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (Java's fetchPublishMessageQueues)."""
        return run_in_loop(self._inner.queues_for(topic))

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

    def send_async(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """Java's asynchronous mode: returns at once; the future holds the result or error."""
        check_target(queue, selector, arg)  # refused here, not later in the future
        return asyncio.run_coroutine_threadsafe(
            self._inner.send_async(
                msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms
            ),
            _LoopThread.loop(),
        )

    def request(
        self,
        msg: Message,
        timeout: float = 3.0,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> MessageExt:
        """Send a request and block until its reply; see :meth:`AsyncProducer.request`."""
        return run_in_loop(
            self._inner.request(msg, timeout, queue=queue, selector=selector, arg=arg)
        )

    # MQAdmin, as AsyncProducer's
    def create_topic(
        self, key: str, new_topic: str, queue_num: int, topic_sys_flag: int = 0
    ) -> None:
        run_in_loop(self._inner.create_topic(key, new_topic, queue_num, topic_sys_flag))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return run_in_loop(self._inner.search_offset(mq, timestamp_ms))

    def max_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.max_offset(mq))

    def min_offset(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.min_offset(mq))

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return run_in_loop(self._inner.earliest_msg_store_time(mq))

    def view_message(self, offset_msg_id: str) -> MessageExt:
        return run_in_loop(self._inner.view_message(offset_msg_id))

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryResult:
        return run_in_loop(self._inner.query_message(topic, key, max_num, begin, end))

    def send_orderly(self, msg: Message, key: str, timeout_ms: int | None = None) -> SendResult:
        return run_in_loop(self._inner.send_orderly(msg, key, timeout_ms=timeout_ms))

    def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        run_in_loop(self._inner.send_oneway(msg, queue=queue, selector=selector, arg=arg))

    def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        return run_in_loop(self._inner.send_batch(msgs, queue=queue, timeout_ms=timeout_ms))

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """``send_batch`` in Java's asynchronous mode: returns at once with a future."""
        return asyncio.run_coroutine_threadsafe(
            self._inner.send_batch_async(msgs, queue=queue, timeout_ms=timeout_ms),
            _LoopThread.loop(),
        )

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class TransactionProducer(Producer):
    """The blocking transactional producer; see
    :class:`rmqk.engine.transaction.AsyncTransactionProducer`. The local transaction
    runs in the thread that calls :meth:`send_message_in_transaction`, as in Java."""

    def __init__(self, group: str, **options: Any) -> None:
        self._inner: AsyncTransactionProducer = AsyncTransactionProducer(group, **options)
        _live.add(self)

    @property
    def inner(self) -> AsyncTransactionProducer:
        return self._inner

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        inner = self._inner
        result = run_in_loop(inner.send_half_message(msg))
        state, error = LocalTransactionState.UNKNOW, None
        if result.status is SendStatus.SEND_OK:
            listener = inner.require_execute_listener()
            state, error = run_local_transaction(listener, msg, arg, run_in_loop)
        return run_in_loop(inner.end_transaction(msg, result, state, error))


_live: set[Any] = set()


class _KeepAlive:
    """Holds the process open while push consumers run, as their threads hold a JVM.

    The loop thread is a daemon, so by itself it would let the interpreter exit
    (and close every connection) as soon as the main thread's script ends. Instead
    the main thread, when it reaches its end, waits here for the running push
    consumers; a signal then stops them cleanly.
    """

    def __init__(self) -> None:
        self._running: set[PushConsumer] = set()
        self._changed = threading.Condition()
        self._hooked = False

    def add(self, consumer: PushConsumer) -> None:
        with self._changed:
            self._running.add(consumer)
            if not self._hooked:
                self._hooked = _at_main_thread_end(self.wait)
            self._changed.notify_all()

    def discard(self, consumer: PushConsumer) -> None:
        with self._changed:
            self._running.discard(consumer)
            self._changed.notify_all()

    def running(self) -> list[PushConsumer]:
        with self._changed:
            return list(self._running)

    def wait(self) -> None:
        """Block the ending main thread until no push consumer runs, or a signal."""
        if not self.running():
            return
        stop = threading.Event()

        def on_signal(signum: int, frame: object) -> None:
            stop.set()

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, OSError):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            log.info("the main thread ended while consumers run; waiting (Ctrl-C stops them)")
            while self.running() and not stop.is_set():
                # A short timeout keeps the main thread where signal handlers run.
                with self._changed:
                    self._changed.wait(0.2)
        finally:
            for consumer in self.running():
                with contextlib.suppress(Exception):
                    consumer.shutdown()
            for sig, handler in previous.items():
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, handler)


def _at_main_thread_end(fn: Callable[[], None]) -> bool:
    """Run ``fn`` in the main thread when its script ends, before threads are joined."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every CPython rmqk supports has it
        atexit.register(fn)
        return True
    try:
        register(fn)
    except RuntimeError:  # the interpreter is already shutting down
        return False
    return True


_keep_alive = _KeepAlive()


@atexit.register
def _shutdown_live() -> None:
    # Persist offsets and unregister consumers a script forgot to shut down.
    for obj in list(_live):
        with contextlib.suppress(Exception):
            obj.shutdown()
