"""How rmqk's hooks run through pluggy: awaited event hooks, attributed registrations, tracing.

Every hook is called through ``pm.hook``, so pluggy's ordering, hook-call
monitoring and tracing see each call. Two kinds of hook need more than a plain
call, and :class:`rmqk.pluginmanager.PluginManager` adapts their implementations
once, when a plugin is registered:

* Awaited event hooks (:data:`rmqk.hookspecs.AWAITED_HOOKS`). Each implementation
  returns a :class:`PendingCall` instead of running, and the kernel awaits them
  one after the other, in pluggy's order. So an ``async def`` implementation
  finishes before the next one starts (a plain ``pm.hook`` call would run every
  sync implementation before any coroutine), and one that raises is logged
  while the others still run, as Java's hook lists do. Hook wrappers cannot
  surround calls that happen after the hook call returned, so they are refused
  for these hooks.
* Registration hooks (``rmqk_register_*``). Each implementation receives the
  ``register`` callable bound to its own plugin, so a duplicate name can name
  both plugins although all of them run in one ``pm.hook`` call.

A sync hook called on a hot path (``rmqk_before_request``, once per request sent)
may be skipped while it has nothing to do: an implementation marked with
:func:`idle_when` declares when it would do nothing, and :func:`all_idle` tells
the caller that every registered implementation is idle now. A pluggy call costs
a few microseconds; the check, a fraction of one.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar

import pluggy

from rmqk import hookspecs
from rmqk.errors import PluginError

__all__ = [
    "IDLE_ATTRIBUTE",
    "PendingCall",
    "Registration",
    "adapt_impl",
    "all_idle",
    "idle_when",
    "refuse_unsupported_impls",
    "trace_to_stderr",
]

REGISTRATION_PREFIX = "rmqk_register_"
# The attribute idle_when sets on an implementation: its "nothing to do now" predicate.
IDLE_ATTRIBUTE = "rmqk_idle"

F = TypeVar("F", bound=Callable[..., Any])


def idle_when(predicate: Callable[[], bool]) -> Callable[[F], F]:
    """Mark a sync hook implementation that does nothing while ``predicate()`` is true.

    The predicate runs at every call of the hook that checks :func:`all_idle`, so it
    must be cheap (a read of state the plugin keeps up to date) and must not raise.
    """

    def mark(function: F) -> F:
        setattr(function, IDLE_ATTRIBUTE, predicate)
        return function

    return mark


def all_idle(caller: pluggy.HookCaller) -> bool:
    """True when calling ``caller`` now would do nothing: no implementation is
    registered, or every one is marked by :func:`idle_when` and idle now.

    Checked at each call rather than cached, so a plugin registered later, or one
    that stops being idle, is called from then on.
    """
    for impl in caller.get_hookimpls():
        idle = getattr(impl.function, IDLE_ATTRIBUTE, None)
        if idle is None or not idle():
            return False
    return True


class Registration:
    """The ``register`` argument of a registration hook call.

    Each implementation receives a copy bound to its own plugin, so what it
    registers is recorded under that plugin's name.
    """

    __slots__ = ("_add", "kind", "plugin")

    def __init__(
        self, add: Callable[[str, Any, str], None], kind: str, plugin: str = "(unknown plugin)"
    ) -> None:
        self._add = add
        self.kind = kind
        self.plugin = plugin

    def __call__(self, name: str, value: Any) -> None:
        self._add(name, value, self.plugin)

    def for_plugin(self, plugin: str) -> Registration:
        return Registration(self._add, self.kind, plugin)

    def __repr__(self) -> str:
        return f"<register {self.kind} for plugin {self.plugin!r}>"


class PendingCall:
    """One implementation of an awaited event hook, called when awaited."""

    __slots__ = ("args", "function", "hook", "kwargs", "plugin")

    def __init__(
        self,
        hook: str,
        plugin: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.hook = hook
        self.plugin = plugin
        self.function = function
        self.args = args
        self.kwargs = kwargs

    def call(self) -> Any:
        """Run the implementation; its result, awaitable when it is ``async def``."""
        return self.function(*self.args, **self.kwargs)

    async def run(self) -> Any:
        result = self.call()
        if inspect.isawaitable(result):
            return await result
        return result

    def __await__(self) -> Generator[Any, None, Any]:
        return self.run().__await__()

    def __repr__(self) -> str:
        return f"<pending {self.hook} of plugin {self.plugin!r}>"


def _impls_of(pm: pluggy.PluginManager, plugin: object) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(hook, attribute, options) of each hook implementation ``plugin`` declares."""
    found: list[tuple[str, str, Mapping[str, Any]]] = []
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is not None:
            found.append((opts.get("specname") or attr, attr, opts))
    return found


def refuse_unsupported_impls(pm: pluggy.PluginManager, plugin: object, plugin_name: str) -> None:
    """Raise PluginError, before anything is registered, for an impl rmqk cannot call."""
    for hook, attr, opts in _impls_of(pm, plugin):
        if hook in hookspecs.AWAITED_HOOKS and (opts.get("wrapper") or opts.get("hookwrapper")):
            raise PluginError(
                f"plugin {plugin_name!r} declares a hook wrapper for {hook}; that hook's "
                "implementations are awaited one at a time after the hook call returns, so "
                "a wrapper could not surround them. Use a plain implementation with "
                "tryfirst=True or trylast=True instead"
            )
        if hook.startswith(REGISTRATION_PREFIX) and inspect.iscoroutinefunction(
            getattr(plugin, attr, None)
        ):
            raise PluginError(
                f"plugin {plugin_name!r} implements {hook} with an async def; "
                "registration hooks must be plain functions"
            )


def _defer(hook: str, impl: pluggy.HookImpl) -> Callable[..., PendingCall]:
    function = impl.function
    plugin = impl.plugin_name

    @functools.wraps(function)
    def pending(*args: Any, **kwargs: Any) -> PendingCall:
        return PendingCall(hook, plugin, function, args, kwargs)

    return pending


def _bind_register(impl: pluggy.HookImpl) -> Callable[..., Any]:
    function = impl.function
    plugin = impl.plugin_name

    def bind(value: Any) -> Any:
        return value.for_plugin(plugin) if isinstance(value, Registration) else value

    # A wrapper impl returns its generator from here unchanged, for pluggy to drive.
    @functools.wraps(function)
    def bound(*args: Any, **kwargs: Any) -> Any:
        return function(*map(bind, args), **{k: bind(v) for k, v in kwargs.items()})

    return bound


def adapt_impl(hook: str, impl: pluggy.HookImpl) -> None:
    """Give ``impl`` the calling convention its hook needs (see the module docstring)."""
    if hook in hookspecs.AWAITED_HOOKS:
        adapted = _defer(hook, impl)
    elif hook.startswith(REGISTRATION_PREFIX):
        adapted = _bind_register(impl)
    else:
        return
    # pluggy reads ``function`` at each call and took the argument names from the
    # original at registration; the adapted function takes the same arguments.
    setattr(impl, "function", adapted)  # noqa: B010  (typed Final in pluggy)


def trace_to_stderr(pm: pluggy.PluginManager) -> Callable[[], None]:
    """Print every hook call, its plugins in call order and its arguments (RMQK_TRACE_PLUGINS)."""

    def before(
        hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]
    ) -> None:
        plugins = ", ".join(impl.plugin_name for impl in reversed(hook_impls)) or "(none)"
        print(f"rmqk hook {hook_name} -> plugins: {plugins}", file=sys.stderr)
        for key, value in kwargs.items():
            print(f"    {key}={value!r}", file=sys.stderr)

    def after(
        outcome: pluggy.Result[object],
        hook_name: str,
        hook_impls: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, object],
    ) -> None:
        if outcome.exception is not None:
            print(f"rmqk hook {hook_name} raised {outcome.exception!r}", file=sys.stderr)

    return pm.add_hookcall_monitoring(before, after)
