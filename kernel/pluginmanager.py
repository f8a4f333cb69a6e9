"""The plugin manager, and the typed registries of the process built from it.

Plugins come from entry points of group ``rmqk``; rmqk's own defaults are
registered the same way, in its pyproject.toml. Environment variables:

* ``RMQK_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points, except those named in
  ``RMQK_LOAD_PLUGINS``.
* ``RMQK_LOAD_PLUGINS=a,b``: load only these entry points (by entry-point name
  or distribution name).
* ``RMQK_DISABLED_PLUGINS=a,b``: never load these (by entry-point name).
* ``RMQK_TRACE_PLUGINS=1``: print every hook call, with its plugins and
  arguments, to stderr (like datasette's ``DATASETTE_TRACE_PLUGINS``).

Hooks are called through ``pm.hook``; :mod:`rmqk.hookcalls` says how awaited
event hooks and registration hooks are adapted to that.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import attrs
import pluggy

from rmqk.hookcalls import (
    HookCallable,
    plugin_calls,
    refuse_unsupported_impls,
    trace_to_stderr,
)
from rmqk.model.errors import ConfigError, ConfigProblem, PluginError
from rmqk.registries import Entry, FactoryRegistry, Registries, Registry
from rmqk.spi import hookspecs

__all__ = [
    "ENTRY_POINT_GROUP",
    "Entry",
    "FactoryRegistry",
    "PluginManager",
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
_pm: PluginManager | None = None
_registries: Registries | None = None


@attrs.frozen
class PluginDistribution:
    """Where a loaded plugin came from, for ``rmqk plugins``."""

    plugin: str
    distribution: str
    version: str
    value: str


def plugin_distribution(name: str) -> PluginDistribution | None:
    """The distribution plugin ``name`` was loaded from (pluggy's record), if any."""
    pm = get_plugin_manager()
    plugin = pm.get_plugin(name)
    if plugin is None:
        return None
    for loaded, dist in pm.list_plugin_distinfo():
        if loaded is plugin:
            value = next(
                (
                    ep.value
                    for ep in dist.entry_points
                    if ep.group == ENTRY_POINT_GROUP and ep.name == name
                ),
                "",
            )
            return PluginDistribution(name, dist.project_name, dist.version, value)
    return None


def _env_names(var: str) -> list[str]:
    return [n.strip() for n in os.environ.get(var, "").split(",") if n.strip()]


def _truthy(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() not in ("", "0", "false", "no")


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with rmqk's hook specs and calling conventions.

    ``register`` refuses implementations rmqk cannot call (hook wrappers on awaited
    event hooks, ``async def`` registration hooks) with an error naming the plugin
    and hook, and adapts the others as :mod:`rmqk.hookcalls` describes.
    """

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        # plugin_calls' answers by hook name, until a plugin comes or goes.
        self.plugin_callers: dict[str, list[tuple[str, HookCallable]]] = {}

    def register(self, plugin: object, name: str | None = None) -> str | None:
        refuse_unsupported_impls(self, plugin, name or self.get_canonical_name(plugin))
        try:
            return super().register(plugin, name)
        finally:
            self.plugin_callers.clear()

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        try:
            return super().unregister(plugin, name)
        finally:
            self.plugin_callers.clear()

    def check_pending(self) -> None:
        """pluggy's check, with an error that names the plugin, the hook and a likely fix."""
        try:
            super().check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(self._unknown_hooks_message(exc.plugin)) from exc

    def _unknown_hooks_message(self, plugin: object) -> str:
        plugin_name = self.get_name(plugin) or repr(plugin)
        known = [n for n in dir(hookspecs) if n.startswith(f"{hookspecs.PROJECT_NAME}_")]
        problems = []
        for name, caller in sorted(vars(self.hook).items()):
            if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
                continue
            if any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls()):
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(f"{name!r}{hint}")
        return (
            f"plugin {plugin_name!r} implements unknown hook {', '.join(problems)}; "
            f"rmqk's hooks are: {', '.join(known)}"
        )


def _load_entry_points(pm: PluginManager) -> None:
    autoload = not _truthy("RMQK_DISABLE_PLUGIN_AUTOLOAD")
    only = set(_env_names("RMQK_LOAD_PLUGINS"))
    for name in _env_names("RMQK_DISABLED_PLUGINS"):
        pm.set_blocked(name)
    if only:
        # By entry-point name or distribution name; pluggy's loader selects by the first.
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.metadata["name"] if ep.dist is not None else None
            if ep.name in only or dist in only:
                _load(pm, ep.name)
    elif autoload:
        _load(pm, None)
    # A misspelt hook name (rmqk_register_sink) is an error, not an implementation never called.
    pm.check_pending()


def _load(pm: PluginManager, name: str | None) -> None:
    """pluggy's entry-point loader (all of rmqk's, or the one ``name``), with an error
    naming the entry point that failed to import."""
    try:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name)
    except (PluginError, pluggy.PluginValidationError):
        raise  # refused at registration: the message names the plugin
    except Exception as exc:
        # pluggy loads in this order and skips what is loaded or blocked: the first
        # entry point left is the one that failed.
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if name not in (None, ep.name) or pm.get_plugin(ep.name) is not None:
                continue
            if pm.is_blocked(ep.name):
                continue
            dist = ep.dist.metadata["name"] if ep.dist is not None else "?"
            raise PluginError(
                f"plugin {ep.name!r} from distribution {dist} failed to load ({ep.value}): {exc}"
            ) from exc
        raise


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    with _lock:
        if _pm is None:
            pm = PluginManager()
            if _truthy("RMQK_TRACE_PLUGINS"):
                trace_to_stderr(pm)
            _load_entry_points(pm)
            # The kernel's built-in commands: an essential plugin, registered after the block list.
            importlib.import_module("rmqk.app.commands").register_essential(pm)
            _pm = pm
        return _pm


def reset_plugin_manager() -> None:
    """Forget the plugin manager and registries (tests, and after the environment changed)."""
    global _pm, _registries
    with _lock:
        _pm = None
        _registries = None


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
    name: str,
    *,
    swallow: bool = True,
    pm: pluggy.PluginManager | None = None,
    only: frozenset[str] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """Call an awaited event hook through ``pm.hook`` and await each implementation.

    Implementations run one after the other in pluggy's order (the last
    registered first, with ``tryfirst``/``trylast`` honoured), each awaited
    before the next starts. With ``swallow`` (filter, consume and rebalance
    hooks), an exception from one implementation is logged and the others still
    run, as Java's hook lists do. ``only``: the names of the plugins whose
    implementations run (a client's ``hook_plugins``); None runs every plugin's.
    """
    pm = pm or get_plugin_manager()
    results: list[Any] = []
    calls = plugin_calls(pm, name)
    if only is not None:
        calls = [(plugin, call) for plugin, call in calls if plugin in only]
        if not calls:
            return results  # pm.hook would call the plugins the client left out
    if not calls:
        # Called all the same, so that monitoring and tracing see the call.
        getattr(pm.hook, name)(**kwargs)
        return results
    for plugin, call in calls:
        try:
            for result in call(**kwargs):
                results.append(await await_me_maybe(result))
        except Exception:
            if not swallow:
                raise
            log.exception("hook %s of plugin %s failed", name, plugin)
    return results


def hook_has_impls(
    name: str, pm: pluggy.PluginManager | None = None, only: frozenset[str] | None = None
) -> bool:
    """True when a plugin (one named in ``only``, if given) implements hook ``name``."""
    pm = pm or get_plugin_manager()
    impls = getattr(pm.hook, name).get_hookimpls()
    if only is None:
        return bool(impls)
    return any(impl.plugin_name in only for impl in impls)


def unknown_hook_plugins(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The names in ``names`` no registered plugin has, and the names there are."""
    known = sorted(n for n, p in get_plugin_manager().list_name_plugin() if p is not None)
    return [n for n in names if n not in known], known


def hook_plugins_message(unknown: Sequence[str], known: Sequence[str]) -> str:
    return (
        f"no plugin is named {', '.join(map(repr, unknown))}; the plugins of this process "
        f"are {', '.join(known)} (rmqk plugins lists them)"
    )


def check_hook_plugins(names: Sequence[str] | None, where: str) -> frozenset[str] | None:
    """A client's ``hook_plugins`` as the set its hook calls take, or None for all.

    A name no registered plugin has is refused at once, listing the names there are,
    so a typo never leaves a client without the hooks it meant to keep.
    """
    if names is None:
        return None
    unknown, known = unknown_hook_plugins(names)
    if unknown:
        message = hook_plugins_message(unknown, known)
        raise ConfigError([ConfigProblem("<options>", where, "hook_plugins", message)])
    return frozenset(names)
