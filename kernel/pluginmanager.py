"""The plugin manager and the typed registries built from it.

Plugins come from entry points of group ``rmqk``; rmqk's own defaults are
registered the same way, in its pyproject.toml. Environment variables:

* ``RMQK_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points, except those named in
  ``RMQK_LOAD_PLUGINS``.
* ``RMQK_LOAD_PLUGINS=a,b``: load only these entry points (by entry-point name
  or distribution name).
* ``RMQK_DISABLED_PLUGINS=a,b``: never load these (by entry-point name).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs
import pluggy

from rmqk import hookspecs
from rmqk.errors import PluginError

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registries",
    "Registry",
    "await_me_maybe",
    "call_event_hook",
    "get_plugin_manager",
    "registries",
    "reset_plugin_manager",
]

log = logging.getLogger("rmqk.pluginmanager")

ENTRY_POINT_GROUP = "rmqk"

T = TypeVar("T")

_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_registries: Registries | None = None


@attrs.frozen
class PluginDistribution:
    """Where a loaded plugin came from, for ``rmqk plugins``."""

    plugin: str
    distribution: str
    version: str
    value: str


_distributions: dict[str, PluginDistribution] = {}


def plugin_distribution(name: str) -> PluginDistribution | None:
    return _distributions.get(name)


def _env_names(var: str) -> list[str]:
    return [n.strip() for n in os.environ.get(var, "").split(",") if n.strip()]


def _truthy(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() not in ("", "0", "false", "no")


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    autoload = not _truthy("RMQK_DISABLE_PLUGIN_AUTOLOAD")
    only = set(_env_names("RMQK_LOAD_PLUGINS"))
    for name in _env_names("RMQK_DISABLED_PLUGINS"):
        pm.set_blocked(name)
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP:
                continue
            dist_name = dist.metadata["name"]
            wanted = ep.name in only or dist_name in only
            if only and not wanted:
                continue
            if not only and not autoload:
                continue
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin {ep.name!r} from distribution {dist_name} failed to load "
                    f"({ep.value}): {exc}"
                ) from exc
            pm.register(plugin, name=ep.name)
            _distributions[ep.name] = PluginDistribution(ep.name, dist_name, dist.version, ep.value)


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
            pm.add_hookspecs(hookspecs)
            _load_entry_points(pm)
            _pm = pm
        return _pm


def reset_plugin_manager() -> None:
    """Forget the plugin manager and registries (tests, and after the environment changed)."""
    global _pm, _registries
    with _lock:
        _pm = None
        _registries = None
        _distributions.clear()


@attrs.frozen
class Entry(Generic[T]):
    name: str
    factory: Callable[..., T]
    plugin: str


class Registry(Generic[T]):
    """Named implementations of one kind, filled by one registration hook."""

    def __init__(
        self,
        kind: str,
        hook_name: str,
        check: Callable[[object], bool] = callable,
        expected: str = "a callable factory",
    ) -> None:
        self.kind = kind
        self.hook_name = hook_name
        self._check = check
        self._expected = expected
        self._entries: dict[str, Entry[T]] = {}

    def _fill(self, pm: pluggy.PluginManager) -> None:
        caller = getattr(pm.hook, self.hook_name)
        # Call each implementation separately so a duplicate can name both plugins.
        for impl in reversed(caller.get_hookimpls()):
            plugin_name = impl.plugin_name

            def register(name: str, factory: Callable[..., T], _plugin: str = plugin_name) -> None:
                self.add(name, factory, _plugin)

            impl.function(register=register)

    def add(self, name: str, factory: Callable[..., T], plugin: str) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin!r} registered a {self.kind} with no name")
        if not self._check(factory):
            raise PluginError(
                f"plugin {plugin!r} registered {self.kind} {name!r} with {factory!r}, "
                f"which is not {self._expected}"
            )
        existing = self._entries.get(name)
        if existing is not None:
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by plugin {existing.plugin!r} "
                f"and by plugin {plugin!r}"
            )
        self._entries[name] = Entry(name, factory, plugin)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none: are the rmqk plugins installed and enabled?)"
            raise PluginError(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def get(self, name: str) -> Callable[..., T]:
        """The factory registered under ``name``; an unknown name lists the known ones."""
        return self.entry(name).factory

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name)(*args, **kwargs)


class Registries:
    """One typed registry per kind of plugin, like tox's registry facade."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.allocation_strategies: Registry[Any] = Registry(
            "allocation strategy", "rmqk_register_allocation_strategies"
        )
        self.offset_stores: Registry[Any] = Registry("offset store", "rmqk_register_offset_stores")
        self.transports: Registry[Any] = Registry("transport", "rmqk_register_transports")
        self.consume_services: Registry[Any] = Registry(
            "consume service", "rmqk_register_consume_services"
        )
        self.sinks: Registry[Any] = Registry("sink", "rmqk_register_sinks")
        # Commands are registered as rmqk.cli.Command values, not factories.
        self.commands: Registry[Any] = Registry(
            "command",
            "rmqk_register_commands",
            check=lambda value: callable(getattr(value, "run", None)),
            expected="an rmqk.cli.Command",
        )
        for reg in self.all():
            reg._fill(pm)

    def all(self) -> list[Registry[Any]]:
        return [
            self.allocation_strategies,
            self.offset_stores,
            self.transports,
            self.consume_services,
            self.sinks,
            self.commands,
        ]

    def by_kind(self, kind: str) -> Registry[Any]:
        for reg in self.all():
            if reg.kind == kind:
                return reg
        known = ", ".join(r.kind for r in self.all())
        raise PluginError(f"unknown plugin kind {kind!r}; kinds: {known}")


def registries() -> Registries:
    """The registries of the process-wide plugin manager, built on first use."""
    global _registries
    with _lock:
        if _registries is None:
            _registries = Registries(get_plugin_manager())
        return _registries


async def await_me_maybe(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable (hook implementations may be ``async def``)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def call_event_hook(
    name: str, *, swallow: bool = True, pm: pluggy.PluginManager | None = None, **kwargs: Any
) -> list[Any]:
    """Call an event hook, awaiting async implementations.

    Implementations run in pluggy's order (the last registered first, with
    ``tryfirst``/``trylast`` honoured). With ``swallow`` (filter, consume and
    rebalance hooks), an exception from one implementation is logged and the
    others still run, as Java's hook lists do.
    """
    pm = pm or get_plugin_manager()
    caller = getattr(pm.hook, name)
    results: list[Any] = []
    for impl in reversed(caller.get_hookimpls()):
        args = {k: kwargs[k] for k in impl.argnames if k in kwargs}
        try:
            results.append(await await_me_maybe(impl.function(**args)))
        except Exception:
            if not swallow:
                raise
            log.exception("hook %s of plugin %s failed", name, impl.plugin_name)
    return results


def hook_has_impls(name: str, pm: pluggy.PluginManager | None = None) -> bool:
    pm = pm or get_plugin_manager()
    return bool(getattr(pm.hook, name).get_hookimpls())
