"""How rmqk's hooks run through pluggy: awaited event hooks, attributed registrations, tracing.

Every hook is called through pluggy's public calling (``pm.hook`` and
``subset_hook_caller``), so pluggy's ordering, hook-call monitoring and tracing
see each call, and no implementation is rewritten. Two kinds of hook are called
one plugin at a time (:func:`plugin_calls`), in pluggy's order:

* Awaited event hooks (:data:`rmqk.spi.hookspecs.AWAITED_HOOKS`). Each plugin's call
  is awaited before the next plugin's starts, so an ``async def`` implementation
  finishes before the next one runs (a single ``pm.hook`` call would run every
  sync implementation before any coroutine), and one that raises is logged
  while the others still run, as Java's hook lists do. A hook wrapper would
  surround only its own plugin's call, so wrappers are refused for these hooks.
* Registration hooks (``rmqk_register_*``). Each plugin's call receives a
  ``register`` callable bound to that plugin, so a duplicate name can name
  both plugins.

A sync hook called on a hot path (``rmqk_before_request``, once per request sent)
may be skipped while it has nothing to do: an implementation marked with
:func:`idle_when` declares when it would do nothing, and :func:`all_idle` tells
the caller that every registered implementation is idle now. A pluggy call costs
a few microseconds; the check, a fraction of one.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any, TypeVar

import pluggy

from rmqk.model.errors import PluginError
from rmqk.spi import hookspecs

__all__ = [
    "IDLE_ATTRIBUTE",
    "HookCallable",
    "Registration",
    "all_idle",
    "idle_when",
    "plugin_calls",
    "refuse_unsupported_impls",
    "trace_to_stderr",
]

REGISTRATION_PREFIX = "rmqk_register_"
# The attribute idle_when sets on an implementation: its "nothing to do now" predicate.
IDLE_ATTRIBUTE = "rmqk_idle"

F = TypeVar("F", bound=Callable[..., Any])
# A hook caller restricted to one plugin (pluggy's HookCaller or its subset).
HookCallable = Callable[..., list[Any]]


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


# register()'s second argument when the first is a value that carries its name.
_NAMED: Any = object()


class Registration:
    """The ``register`` argument of a registration hook call.

    One hook call reaches every implementation (a hook wrapper surrounds them
    all); what each registers is recorded under its own plugin's name, found by
    the implementation's code on the call stack (and, for a method shared by two
    registered instances, by its ``self``). No implementation is rewritten.
    """

    __slots__ = ("_add", "_owners", "kind", "plugin")

    def __init__(
        self,
        add: Callable[[str, Any, str], None],
        kind: str,
        plugin: str = "(unknown plugin)",
        owners: Mapping[CodeType, Sequence[tuple[object, str]]] | None = None,
    ) -> None:
        self._add = add
        self.kind = kind
        self.plugin = plugin
        self._owners = owners or {}

    @classmethod
    def for_hook(
        cls, pm: pluggy.PluginManager, hook: str, add: Callable[[str, Any, str], None], kind: str
    ) -> Registration:
        """The ``register`` to call ``hook`` with: it knows each implementation's plugin."""
        owners: dict[CodeType, list[tuple[object, str]]] = {}
        for impl in getattr(pm.hook, hook).get_hookimpls():
            code = getattr(inspect.unwrap(impl.function), "__code__", None)
            if isinstance(code, CodeType):
                owners.setdefault(code, []).append((impl.plugin, impl.plugin_name))
        return cls(add, kind, owners=owners)

    def __call__(self, name: Any, value: Any = _NAMED) -> None:
        # register(PluginFactory(...)) names itself; register(name, value) is the
        # commands' form (and the deprecated one of bare factories).
        if value is _NAMED:
            value, name = name, getattr(name, "name", None)
        self._add(name, value, self._caller())

    def _caller(self) -> str:
        """The plugin whose implementation is on the stack, nearest first."""
        if not self._owners:
            return self.plugin
        frame = inspect.currentframe()
        try:
            while frame is not None:
                owners = self._owners.get(frame.f_code)
                if owners:
                    if len(owners) == 1:
                        return owners[0][1]
                    this = frame.f_locals.get("self")
                    for plugin, name in owners:
                        if plugin is this:
                            return name
                frame = frame.f_back
        finally:
            del frame  # no reference cycle through the frame
        return self.plugin

    def __repr__(self) -> str:
        return f"<register {self.kind}>"


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


def plugin_calls(pm: pluggy.PluginManager, hook: str) -> list[tuple[str, HookCallable]]:
    """A caller of each plugin's implementations of ``hook`` alone, in pluggy's call order
    (the last registered first, ``tryfirst``/``trylast`` honoured), with the plugin's name.

    Built with pluggy's ``subset_hook_caller``, so each call goes through pluggy's
    calling, monitoring and tracing. rmqk's PluginManager keeps the answer until a
    plugin is registered or unregistered.
    """
    cache: dict[str, list[tuple[str, HookCallable]]] | None = getattr(pm, "plugin_callers", None)
    if cache is not None:
        known = cache.get(hook)
        if known is not None:
            return known
    plugins: list[object] = []
    names: list[str] = []
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if not any(impl.plugin is p for p in plugins):
            plugins.append(impl.plugin)
            names.append(impl.plugin_name)
    everyone = [p for _, p in pm.list_name_plugin() if p is not None]
    calls: list[tuple[str, HookCallable]] = [
        (name, pm.subset_hook_caller(hook, [p for p in everyone if p is not plugin]))
        for name, plugin in zip(names, plugins, strict=True)
    ]
    if cache is not None:
        cache[hook] = calls
    return calls


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
