"""Calling user listeners: sync ones on a bounded thread pool, async ones under a semaphore.

A listener takes ``(messages)`` or ``(messages, context)``. Concurrent listeners
return None or ``CONSUME_SUCCESS`` for success, ``RECONSUME_LATER`` (or raise) to
retry; orderly listeners return None or ``SUCCESS``, or
``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or raise) to retry the same batch first.
Unlike Java, None means success: a Python function that returns nothing has
handled its batch. An async listener may also return an :class:`asyncio.Future`
whose result is the status (or whose exception is the failure): concurrent
consumption then acknowledges the batch when it resolves without holding a worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import functools
import inspect
import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rmqk.engine.lane import CallLane
from rmqk.engine.pool import ResizablePool
from rmqk.model import ConsumeOrderlyStatus, ConsumeStatus, MessageQueue
from rmqk.model.errors import ClientError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import call_event_hook, hook_has_impls
from rmqk.spi.consume import (
    JAVA_INT_MAX,
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    ListenerOutcome,
)
from rmqk.spi.contexts import ConsumeMessageContext

__all__ = [
    "JAVA_INT_MAX",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "FailureLog",
    "ListenerInvoker",
    "ListenerOutcome",
    "listener_name",
]

log = logging.getLogger("rmqk.engine.listener")

# How often repeats of a listener failure already logged are summed up in one line.
REPEAT_REPORT_INTERVAL_S = 60.0


class FailureLog:
    """Listener exceptions for the log: each kind once with its traceback, repeats counted.

    A kind is the exception's type raised by one listener. A failing listener
    usually fails every batch the same way; one traceback says why, and a line
    every ``interval`` seconds (and one at shutdown) says how often since.
    """

    def __init__(self, group: str, listener: str, interval: float = REPEAT_REPORT_INTERVAL_S):
        self.group = group
        self.listener = listener
        self.interval = interval
        # exception type name -> [repeats not yet reported, when last reported]
        self._kinds: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def report(self, exc: BaseException, queue: MessageQueue | None = None) -> None:
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        now = time.monotonic()
        with self._lock:
            entry = self._kinds.get(kind)
            if entry is None:
                self._kinds[kind] = [0, now]
                first = True
            else:
                entry[0] += 1
                first = False
                due = now - entry[1] >= self.interval
                repeats = int(entry[0])
                if due:
                    entry[0], entry[1] = 0, now
        where = f" on {queue}" if queue is not None else ""
        if first:
            log.warning(
                "listener %s of group %s raised %s%s; its batch will be consumed again. "
                "Further %s from it are counted, not logged one by one",
                self.listener,
                self.group,
                type(exc).__name__,
                where,
                type(exc).__name__,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        elif due:
            self._log_repeats(kind, repeats)

    def flush(self) -> None:
        """Log the repeats not yet reported (at shutdown)."""
        with self._lock:
            pending = [(kind, int(e[0])) for kind, e in self._kinds.items() if e[0]]
            for entry in self._kinds.values():
                entry[0] = 0
        for kind, repeats in pending:
            self._log_repeats(kind, repeats)

    def _log_repeats(self, kind: str, repeats: int) -> None:
        log.warning(
            "listener %s of group %s raised %s %d more times like the one logged with its "
            "traceback",
            self.listener,
            self.group,
            kind.rpartition(".")[2],
            repeats,
        )


def listener_name(listener: Callable[..., Any]) -> str:
    """``module:qualname``, the form a config's ``module:function`` names a function in."""
    name = getattr(listener, "__qualname__", None) or type(listener).__qualname__
    module = getattr(listener, "__module__", None)
    return f"{module}:{name}" if module else str(name)


class ListenerInvoker:
    """Runs one consumer's listener with the consume hooks around every call."""

    def __init__(
        self,
        listener: Callable[..., Any],
        group: str,
        max_workers: int,
        thread_name_prefix: str = "ConsumeMessageThread",
        name: str | None = None,
        interceptors: list[Any] | None = None,
        hook_plugins: frozenset[str] | None = None,
        consume_timeout_ms: float = 15 * 60_000,
    ) -> None:
        self.listener = listener
        self.group = group
        # An answer slower than this is TIME_OUT to the after interceptors (Java's rule).
        self.consume_timeout_ms = consume_timeout_ms
        # Deferred acknowledgements not yet answered: future -> (settled, token, start);
        # one done callback settles them all (see _deferred_done). Kept in dicts of floats
        # and the caller's own tokens: a sink holds thousands in flight, and a tuple or a
        # context copy each would be more objects for the cyclic GC to walk.
        self._pending: dict[asyncio.Future[Any], float] = {}
        self._tokens: dict[asyncio.Future[Any], Any] = {}
        self._settled: Callable[[Any, ListenerOutcome], None] | None = None
        self._callback_context: contextvars.Context | None = None
        self._abandoning = False
        self._hooked_tasks: set[asyncio.Task[None]] = set()
        self._deferred_done_cb = self._deferred_done
        self._max_async = max_workers
        self._async_calls = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        # The consumer's hook_plugins: whose consume hooks run around it (None: all).
        self.hook_plugins = hook_plugins
        # This consumer's own consume hooks (register_consume_message_hook): the list
        # the consumer holds, so one registered while it runs applies from then on.
        self.interceptors: list[Any] = interceptors if interceptors is not None else []
        # A callable object with an ``async def __call__`` is async too.
        call = type(listener).__call__ if not inspect.isfunction(listener) else None
        self.is_async = inspect.iscoroutinefunction(listener) or (
            call is not None and inspect.iscoroutinefunction(call)
        )
        self.wants_context = _accepts_two_args(listener)
        # Resizable: the concurrent service grows and shrinks it with the backlog.
        self._executor: ResizablePool | None = None
        self._semaphore = asyncio.Semaphore(max_workers)
        if not self.is_async:
            self._executor = ResizablePool(max_workers, thread_name_prefix=thread_name_prefix)
        self._hooks_checked_at = 0.0
        self._has_hooks = False
        self._lanes: list[CallLane] = []
        # Failures name the listener as its author knows it: ``name`` when the caller
        # has one (the function a config names), not a wrapper's qualname.
        self.failures = FailureLog(group, name or listener_name(listener))

    @property
    def pool_size(self) -> int | None:
        """The sync listener's thread pool size; None for an async listener (no pool)."""
        return self._executor.size if self._executor is not None else None

    def resize_pool(self, size: int) -> int | None:
        """Set the sync listener's pool size (at least 1); a no-op returning None if async."""
        return self._executor.resize(size) if self._executor is not None else None

    def report_failure(self, exc: BaseException, queue: MessageQueue | None = None) -> None:
        """Log an exception the listener raised (see :class:`FailureLog`)."""
        self.failures.report(exc, queue)

    def hooks_enabled(self) -> bool:
        return self._hooks_enabled()

    def _hooks_enabled(self) -> bool:
        if self.interceptors:
            return True
        # Building hook contexts costs per call; look at the plugin manager once a second.
        now = time.monotonic()
        if now - self._hooks_checked_at > 1.0:
            only = self.hook_plugins
            self._has_hooks = hook_has_impls(
                "rmqk_consume_message_before", only=only
            ) or hook_has_impls("rmqk_consume_message_after", only=only)
            self._hooks_checked_at = now
        return self._has_hooks

    async def invoke(
        self,
        queue: MessageQueue,
        msgs: Sequence[MessageExt],
        context: Any,
        hooks: bool = True,
        detach: bool = False,
        report: bool = True,
    ) -> tuple[ListenerOutcome, ConsumeMessageContext | None]:
        """One listener call, with the ``before`` hook when enabled.

        An async listener may return a future (an acknowledgement promised for
        later, a sink's group commit): awaited here, unless ``detach``, when the
        outcome's status is that future and the caller awaits it, holding no
        worker meanwhile. An exception the listener raised is logged through
        :meth:`report_failure` unless ``report`` is False (a caller that reports
        it itself). A listener that takes ``(messages, context)`` is not called
        with a None context: the outcome's exception says so instead.
        """
        hook_ctx: ConsumeMessageContext | None = None
        if hooks and self._hooks_enabled():
            hook_ctx = ConsumeMessageContext(self.group, queue, list(msgs))
            await call_event_hook(
                "rmqk_consume_message_before", context=hook_ctx, only=self.hook_plugins
            )
            await self._intercept("consume_message_before", hook_ctx)
        if context is None and self.wants_context:
            # A consume service that passes no context would hand the listener None
            # where it reads context.queue (rmqk run's sink listener does): every
            # batch would fail with an AttributeError far from its cause.
            refused = ClientError(
                f"listener {self.failures.listener} takes (messages, context), but the "
                f"consume service called it with no context; a service must pass one "
                f"(an object with at least .queue) to such a listener"
            )
            if report:
                self.report_failure(refused, queue)
            return ListenerOutcome(None, refused, 0.0), hook_ctx
        args: tuple[Any, ...] = (list(msgs), context) if self.wants_context else (list(msgs),)
        start = time.perf_counter()
        status: Any = None
        error: BaseException | None = None
        try:
            async with self._semaphore:
                if self.is_async:
                    status = await self.listener(*args)
                    if isinstance(status, asyncio.Future) and not detach:
                        # An acknowledgement promised for later (a sink's group commit):
                        # orderly consumption needs the final answer before the next.
                        status = await status
                else:
                    assert self._executor is not None
                    loop = asyncio.get_running_loop()
                    ctx = contextvars.copy_context()
                    status = await loop.run_in_executor(
                        self._executor, lambda: ctx.run(self.listener, *args)
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
            if report:
                self.report_failure(exc, queue)
        outcome = ListenerOutcome(status, error, (time.perf_counter() - start) * 1000)
        return outcome, hook_ctx

    async def deliver(
        self,
        queue: MessageQueue,
        msgs: list[MessageExt],
        context: Any,
        settled: Callable[[Any, ListenerOutcome], None] | None = None,
        token: Any = None,
    ) -> ListenerOutcome | None:
        """One batch to the listener with this client's consume interceptors around it.

        The one place a listener is called for a consume service (see
        :class:`rmqk.spi.consume.Deliver` for the contract) and the one place a
        deferred acknowledgement is handled. With no interceptor it costs what
        calling the listener inline did: no hook context, no extra task.
        """
        if self._hooks_enabled():
            return await self._deliver_hooked(queue, msgs, context, settled, token)
        if context is None and self.wants_context:
            return self._refuse(queue)
        start = time.perf_counter()
        try:
            if self.is_async:
                # At most max_workers async calls at once (the bound a sync listener's
                # pool sets), counted without a semaphore's await while under it.
                if self._async_calls >= self._max_async:
                    await self._async_slot()
                self._async_calls += 1
                try:
                    status = await (
                        self.listener(msgs, context) if self.wants_context else self.listener(msgs)
                    )
                finally:
                    self._async_calls -= 1
                    if self._slot_waiters:
                        self._wake_one()
            else:
                assert self._executor is not None
                run = contextvars.copy_context().run
                args = (msgs, context) if self.wants_context else (msgs,)
                status = await asyncio.get_running_loop().run_in_executor(
                    self._executor, run, self.listener, *args
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.report_failure(exc, queue)
            return ListenerOutcome(None, exc, (time.perf_counter() - start) * 1000)
        if isinstance(status, asyncio.Future):
            if settled is None:
                return await self._answer(status, start, queue)
            if self._callback_context is None:
                self._callback_context = contextvars.copy_context()
            if self._settled is None:
                self._settled = settled
            if status in self._pending or settled != self._settled:
                # One future for several batches (the listener's choice), or a second
                # service's callback: a callback each.
                status.add_done_callback(
                    functools.partial(self._shared_done, settled, token, start),
                    context=self._callback_context,
                )
                self._pending.setdefault(status, start)
                return None
            self._pending[status] = start
            self._tokens[status] = token
            status.add_done_callback(self._deferred_done_cb, context=self._callback_context)
            return None
        return ListenerOutcome(status, None, (time.perf_counter() - start) * 1000)

    async def _deliver_hooked(
        self,
        queue: MessageQueue,
        msgs: list[MessageExt],
        context: Any,
        settled: Callable[[Any, ListenerOutcome], None] | None,
        token: Any,
    ) -> ListenerOutcome | None:
        hook_ctx = ConsumeMessageContext(self.group, queue, list(msgs))
        await call_event_hook(
            "rmqk_consume_message_before", context=hook_ctx, only=self.hook_plugins
        )
        await self._intercept("consume_message_before", hook_ctx)
        outcome, _ = await self.invoke(queue, msgs, context, hooks=False, detach=True)
        if isinstance(outcome.status, asyncio.Future):
            future = outcome.status
            start = time.perf_counter() - outcome.duration_ms / 1000
            if settled is None:
                outcome = await self._answer(future, start, queue)
            else:
                # Answered later: the after interceptors then, beside the workers.
                self._pending[future] = start
                task = asyncio.get_running_loop().create_task(
                    self._conclude_later(future, start, queue, context, hook_ctx, settled, token)
                )
                self._hooked_tasks.add(task)
                task.add_done_callback(self._hooked_tasks.discard)
                return None
        await self._after_described(hook_ctx, outcome, context)
        return outcome

    async def _conclude_later(
        self,
        future: asyncio.Future[Any],
        start: float,
        queue: MessageQueue,
        context: Any,
        hook_ctx: ConsumeMessageContext,
        settled: Callable[[Any, ListenerOutcome], None],
        token: Any,
    ) -> None:
        try:
            await asyncio.wait((future,))
        finally:
            self._pending.pop(future, None)
        outcome = self._settle(future, start, queue)
        if not (future.cancelled() and self._abandoning):
            # Given up at shutdown: no answer came, so there is nothing to describe.
            await self._after_described(hook_ctx, outcome, context)
        settled(token, outcome)

    async def _answer(
        self, future: asyncio.Future[Any], start: float, queue: MessageQueue
    ) -> ListenerOutcome:
        """Wait for a deferred acknowledgement's answer (orderly: before the next batch)."""
        self._pending[future] = start
        try:
            # Awaited itself, so that a caller cancelled meanwhile (a service stopping)
            # cancels the acknowledgement too: a group-commit sink withdraws the batch.
            await future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        except Exception:
            pass  # the failure, read from the future by _settle
        finally:
            self._pending.pop(future, None)
        return self._settle(future, start, queue)

    def _deferred_done(self, future: asyncio.Future[Any]) -> None:
        start = self._pending.pop(future, None)
        token = self._tokens.pop(future, None)
        if start is None or self._settled is None:
            return
        self._settled(token, self._settle(future, start, None))

    def _shared_done(
        self,
        settled: Callable[[Any, ListenerOutcome], None],
        token: Any,
        start: float,
        future: asyncio.Future[Any],
    ) -> None:
        self._pending.pop(future, None)
        settled(token, self._settle(future, start, None))

    def _settle(
        self, future: asyncio.Future[Any], start: float, queue: MessageQueue | None
    ) -> ListenerOutcome:
        """A resolved deferred acknowledgement as the outcome the listener would have given."""
        duration = (time.perf_counter() - start) * 1000
        if future.cancelled():
            why = "the listener's deferred acknowledgement was cancelled"
            if self._abandoning:
                why += " (the consumer stopped before it was answered)"
                return ListenerOutcome(None, asyncio.CancelledError(why), duration)
            cancelled = asyncio.CancelledError(why)
            self.report_failure(cancelled, queue)
            return ListenerOutcome(None, cancelled, duration)
        exc = future.exception()
        if exc is not None:
            self.report_failure(exc, queue)
            return ListenerOutcome(None, exc, duration)
        return ListenerOutcome(future.result(), None, duration)

    async def _async_slot(self) -> None:
        while self._async_calls >= self._max_async:
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)
                raise

    def _wake_one(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def cancel_deferred(self) -> int:
        """Give up every deferred acknowledgement not yet answered (the consumer stops).

        Returns once each one's ``settled`` callback has run, so the service's
        count of what is in flight is right when its shutdown returns.
        """
        self._abandoning = True
        pending = list(self._pending)
        for future in pending:
            future.cancel()
        if self._hooked_tasks:
            await asyncio.gather(*self._hooked_tasks, return_exceptions=True)
        # The done callbacks cancel() scheduled run before this task resumes.
        await asyncio.sleep(0)
        return len(pending)

    async def _after_described(
        self, hook_ctx: ConsumeMessageContext, outcome: ListenerOutcome, context: Any
    ) -> None:
        describe_outcome(hook_ctx, outcome, context, self.consume_timeout_ms)
        await self.after(hook_ctx)

    def _refuse(self, queue: MessageQueue) -> ListenerOutcome:
        # A consume service that passes no context would hand the listener None
        # where it reads context.queue (rmqk run's sink listener does): every
        # batch would fail with an AttributeError far from its cause.
        refused = ClientError(
            f"listener {self.failures.listener} takes (messages, context), but the "
            f"consume service called it with no context; a service must pass one "
            f"(an object with at least .queue) to such a listener"
        )
        self.report_failure(refused, queue)
        return ListenerOutcome(None, refused, 0.0)

    async def deliver_group(
        self,
        calls: Sequence[tuple[MessageQueue, list[MessageExt], Any]],
        patience_s: float = 0.25,
        on_give_up: Callable[[int], None] | None = None,
        watch_single: bool = False,
    ) -> list[ListenerOutcome]:
        """Deprecated: each batch through :meth:`deliver` in turn (the patience arguments
        are no longer used). A consume service puts a plain listener's batches on
        :meth:`lane` instead, which costs no thread hop per batch."""
        warnings.warn(
            "ListenerInvoker.deliver_group is deprecated and will be removed in the next "
            "release: deliver each batch with host.deliver, or put a plain listener's "
            "batches on host.listener.lane(settle) (rmqk.spi.consume.CallLane)",
            DeprecationWarning,
            stacklevel=2,
        )
        out: list[ListenerOutcome] = []
        for queue, msgs, context in calls:
            outcome = await self.deliver(queue, msgs, context)
            assert outcome is not None  # no settled callback: always an outcome
            out.append(outcome)
        return out

    def lane(
        self,
        settle: Callable[[list[Any]], None],
        on_start: Callable[[Any], bool] | None = None,
    ) -> CallLane:
        """A lane for this sync listener's calls without hooks (:class:`rmqk.engine.lane.
        CallLane`): put calls, ``settle`` gets their outcomes in bulk on the loop."""
        if self._executor is None:
            raise ClientError(f"listener {self.failures.listener} is async: it has no pool")
        executor = self._executor
        lane = CallLane(self, lambda: executor.size, executor.submit, settle, on_start)
        self._lanes.append(lane)
        return lane

    async def after(self, hook_ctx: ConsumeMessageContext | None) -> None:
        if hook_ctx is not None:
            await call_event_hook(
                "rmqk_consume_message_after", context=hook_ctx, only=self.hook_plugins
            )
            await self._intercept("consume_message_after", hook_ctx)

    async def _intercept(self, method: str, hook_ctx: ConsumeMessageContext) -> None:
        """This consumer's own hooks, in registration order, after the plugins' (as
        Java runs a client's ConsumeMessageHook list); one that raises is logged and
        the others still run, as the plugins' consume hooks are."""
        for interceptor in list(self.interceptors):
            call = getattr(interceptor, method, None)
            if call is None:
                continue
            try:
                result = call(hook_ctx)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "consume hook %r of group %s failed in %s", interceptor, self.group, method
                )

    def shutdown(self, wait: bool = False) -> None:
        self.failures.flush()
        for lane in self._lanes:
            lane.close()
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=True)


S = TypeVar("S", bound=enum.Enum)


def _read_status(value: Any, kind: type[S], success: S, failure: S) -> S | None:
    """A listener's answer as a ``kind``, the rule the consume services follow: None and True
    are ``success``, False ``failure``, a member or its value itself; anything else None."""
    if value is None or value is True:
        return success
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return None
    return failure if value is False else None


def describe_outcome(
    hook_ctx: ConsumeMessageContext, outcome: ListenerOutcome, context: Any, timeout_ms: float
) -> None:
    """Fill in what the ``after`` interceptors see of one delivery.

    An orderly context's answer reads as an orderly status (an exception or an
    answer not understood: SUSPEND_CURRENT_QUEUE_A_MOMENT), any other as a
    concurrent one (RECONSUME_LATER). ``return_type`` is Java's
    ConsumeReturnType, except that None is success here (RETURNNULL is kept for
    answers not understood).
    """
    failed = outcome.exception is not None
    status: ConsumeStatus | ConsumeOrderlyStatus | None
    if isinstance(context, ConsumeOrderlyContext):
        OS = ConsumeOrderlyStatus
        status = (
            None
            if failed
            else _read_status(outcome.status, OS, OS.SUCCESS, OS.SUSPEND_CURRENT_QUEUE_A_MOMENT)
        )
        understood = status is not None
        status = status or OS.SUSPEND_CURRENT_QUEUE_A_MOMENT
        success = status in (OS.SUCCESS, OS.COMMIT)
    else:
        C = ConsumeStatus
        status = (
            None
            if failed
            else _read_status(outcome.status, C, C.CONSUME_SUCCESS, C.RECONSUME_LATER)
        )
        understood = status is not None
        status = status or C.RECONSUME_LATER
        success = status is C.CONSUME_SUCCESS
    if failed:
        return_type = "EXCEPTION"
    elif not understood:
        return_type = "RETURNNULL"
    elif outcome.duration_ms >= timeout_ms:
        return_type = "TIME_OUT"
    elif not success:
        return_type = "FAILED"
    else:
        return_type = "SUCCESS"
    hook_ctx.status = status.value
    hook_ctx.success = success
    hook_ctx.return_type = return_type
    hook_ctx.duration_ms = outcome.duration_ms
    hook_ctx.exception = outcome.exception
    hook_ctx.props["ConsumeContextType"] = return_type


def _accepts_two_args(fn: Callable[..., Any]) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        return True
    return len(positional) >= 2
