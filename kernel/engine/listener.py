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
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rmqk.engine.pool import ResizablePool
from rmqk.model import MessageQueue
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
    ) -> None:
        self.listener = listener
        self.group = group
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

    async def invoke_group(
        self,
        calls: Sequence[tuple[list[MessageExt], Any]],
        patience_s: float = 0.25,
        on_give_up: Callable[[int], None] | None = None,
        watch_single: bool = False,
    ) -> list[ListenerOutcome]:
        """Several listener calls in one go, without hooks: one thread hop for a sync listener.

        Each call still gets its own batch, context and outcome, as if made
        separately. Returns the outcomes of the calls that ran, in order: when a
        group is still running after ``patience_s`` (a slow or hung call), the
        calls not yet started are given up and left to the caller to requeue,
        so a hung call holds up only its own batch, as in Java's thread pool.
        ``on_give_up(n)`` is called at that moment, while the slow call still runs,
        with the number of calls that started: calls ``n`` and later never will.
        A group of one call is watched too when ``watch_single`` is set.
        """
        if self.is_async:
            return [await self._call_async(msgs, ctx) for msgs, ctx in calls]
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        run = contextvars.copy_context().run
        state = _GroupState()
        fut = loop.run_in_executor(self._executor, run, self._call_all_sync, calls, state)
        if len(calls) > 1 or watch_single:
            done, _ = await asyncio.wait({fut}, timeout=patience_s)
            if not done:
                with state.lock:
                    state.stop_at = state.started
                if on_give_up is not None:
                    on_give_up(state.stop_at)
        return await fut

    async def _call_async(self, msgs: list[MessageExt], context: Any) -> ListenerOutcome:
        start = time.perf_counter()
        try:
            status = await (
                self.listener(msgs, context) if self.wants_context else self.listener(msgs)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return ListenerOutcome(None, exc, (time.perf_counter() - start) * 1000)
        return ListenerOutcome(status, None, (time.perf_counter() - start) * 1000)

    def _call_all_sync(
        self, calls: Sequence[tuple[list[MessageExt], Any]], state: _GroupState
    ) -> list[ListenerOutcome]:
        listener, wants_context = self.listener, self.wants_context
        out: list[ListenerOutcome] = []
        for i, (msgs, context) in enumerate(calls):
            with state.lock:
                if state.stop_at is not None and i >= state.stop_at:
                    break
                state.started = i + 1
            start = time.perf_counter()
            try:
                status = listener(msgs, context) if wants_context else listener(msgs)
            except Exception as exc:
                out.append(ListenerOutcome(None, exc, (time.perf_counter() - start) * 1000))
                continue
            out.append(ListenerOutcome(status, None, (time.perf_counter() - start) * 1000))
        return out

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
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=True)


class _GroupState:
    """Which calls of a group have started; the loop may stop the rest (under the lock)."""

    __slots__ = ("lock", "started", "stop_at")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.stop_at: int | None = None


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
