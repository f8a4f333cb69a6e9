"""The typed registries the plugin manager fills: one per kind of plugin.

Each kind's registration hook fills one :class:`Registry` (like tox's registry
facade). Every kind but commands holds :class:`rmqk.spi.factory.PluginFactory`
registrations, built as ``factory(context, options)`` once the kernel checked
the options table (:class:`FactoryRegistry`); a bare factory of a kind's form
before that contract still works for one release (:mod:`rmqk._deprecated`).
:mod:`rmqk.pluginmanager` builds the registries of the process (``registries()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import pluggy

from rmqk._deprecated import old_form_factory
from rmqk.hookcalls import Registration
from rmqk.model.errors import ConfigProblem, PluginError
from rmqk.spi.factory import PluginFactory
from rmqk.spi.options import Where

if TYPE_CHECKING:
    from rmqk.spi.commands import Command
    from rmqk.spi.consume import ConsumeHost, ConsumeService
    from rmqk.spi.contracts import (
        AllocationStrategy,
        AllocationStrategyContext,
        OffsetStore,
        OffsetStoreContext,
        Sink,
        SinkContext,
    )
    from rmqk.spi.transport import Transport, TransportConfig

__all__ = ["Entry", "FactoryRegistry", "Registries", "Registry"]

V = TypeVar("V")
C = TypeVar("C")
R = TypeVar("R")


@attrs.frozen
class Entry(Generic[V]):
    """One registered name; ``factory`` is the registered value (a Command for commands)."""

    name: str
    factory: V
    plugin: str


class Registry(Generic[V]):
    """Named values of one kind, filled by one registration hook."""

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
        self._entries: dict[str, Entry[V]] = {}

    def _fill(self, pm: pluggy.PluginManager) -> None:
        register = Registration.for_hook(pm, self.hook_name, self.add, self.kind)
        getattr(pm.hook, self.hook_name)(register=register)

    def add(self, name: str, factory: V, plugin: str) -> None:
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

    def __iter__(self) -> Iterator[Entry[V]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, name: str) -> Entry[V]:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none: are the rmqk plugins installed and enabled?)"
            raise PluginError(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def get(self, name: str) -> V:
        """The value registered under ``name``; an unknown name lists the known ones."""
        return self.entry(name).factory


def _is_command(value: object) -> bool:
    return callable(getattr(value, "run", None))


def _is_factory(value: object) -> bool:
    return isinstance(value, PluginFactory)


class FactoryRegistry(Registry[PluginFactory[C, R]], Generic[C, R]):
    """The plugins of one kind, each a :class:`rmqk.spi.factory.PluginFactory` built as
    ``factory(context, options)`` once the kernel checked its options table."""

    def __init__(self, kind: str, hook_name: str, table: str, label: str = "{name}") -> None:
        super().__init__(
            kind, hook_name, check=_is_factory, expected="an rmqk.spi.factory.PluginFactory"
        )
        # The client option holding a plugin's table, and how its problems name the
        # plugin ("jsonl: ...", "transport 'tcp': ...").
        self.table = table
        self.label = label

    def add(self, name: str, factory: Any, plugin: str) -> None:
        if isinstance(factory, PluginFactory):
            if factory.name != name:
                raise PluginError(
                    f"plugin {plugin!r} registered {self.kind} {factory.name!r} under the "
                    f"name {name!r}; register(PluginFactory(...)) takes the name from it"
                )
        elif callable(factory) and isinstance(name, str) and name:
            factory = old_form_factory(self.kind, self.table, name, factory, plugin)
        super().add(name, factory, plugin)

    def option_problems(
        self, name: str, options: object, where: Where | None = None
    ) -> list[ConfigProblem]:
        """The problems of ``options`` for the plugin ``name``: one check for every kind,
        each problem at ``where`` (the options table) and naming the plugin."""
        _, problems = self.get(name).parse_options(options, self.where(name, where))
        return problems

    def create(
        self, name: str, context: C, options: object = None, *, where: Where | None = None
    ) -> R:
        """The plugin ``name`` built for ``context`` from the options table ``options``.

        Raises :class:`rmqk.model.errors.ConfigError` listing every problem of the
        table before the factory is called; without ``where`` the problems name the
        placeholder file ``<options>``, which :func:`rmqk.spi.options.rehome` fills in.
        """
        return self.get(name).build(context, options, self.where(name, where))

    def where(self, name: str, where: Where | None = None) -> Where:
        """``where`` (by default the placeholder ``<options>``) with problems naming ``name``."""
        prefix = f"{self.label.format(name=name)}: "
        if where is None:
            return Where("<options>", self.table, prefix=prefix)
        return attrs.evolve(where, prefix=prefix)


class Registries:
    """One typed registry per kind of plugin, like tox's registry facade."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        hook = "rmqk_register_"
        self.allocation_strategies: FactoryRegistry[
            AllocationStrategyContext, AllocationStrategy
        ] = FactoryRegistry(
            "allocation strategy", f"{hook}allocation_strategies", "allocate_options"
        )
        self.offset_stores: FactoryRegistry[OffsetStoreContext, OffsetStore] = FactoryRegistry(
            "offset store", f"{hook}offset_stores", "offset_store_options"
        )
        self.transports: FactoryRegistry[TransportConfig, Transport] = FactoryRegistry(
            "transport", f"{hook}transports", "transport_options", "transport {name!r}"
        )
        self.consume_services: FactoryRegistry[ConsumeHost, ConsumeService] = FactoryRegistry(
            "consume service",
            f"{hook}consume_services",
            "consume_service_options",
            "consume service {name!r}",
        )
        self.sinks: FactoryRegistry[SinkContext, Sink] = FactoryRegistry(
            "sink", f"{hook}sinks", "sink_options"
        )
        self.commands: Registry[Command] = Registry(
            "command",
            "rmqk_register_commands",
            check=_is_command,
            expected="an rmqk.spi.commands.Command",
        )
        for reg in self.all():
            reg._fill(pm)

    def all(self) -> list[Registry[Any]]:
        """Every registry; what they hold differs by kind, hence ``Any`` in this list."""
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
