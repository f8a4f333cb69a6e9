"""Plugin registrations in the forms before the one contract, kept for one release.

Before :class:`rmqk.spi.factory.PluginFactory` each kind of plugin registered a bare
factory of its own form (``register(name, factory)``). Such a registration still
works, with a DeprecationWarning that says what to register instead; the next
release refuses it. Like :mod:`rmqk._moved`, this is not part of the kernel a
plugin author reads.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import attrs

from rmqk.model.errors import ConfigProblem
from rmqk.spi.factory import PluginFactory
from rmqk.spi.options import OptionSpec, Where, freeze

__all__ = ["old_form_factory"]

# Each kind's old form, and how a factory of that form is called (factory, context, options).
OLD_FORMS: dict[str, tuple[str, Callable[[Callable[..., Any], Any, Any], Any]]] = {
    "allocation strategy": ("factory(**options)", lambda f, c, o: f(**dict(o))),
    "offset store": ("factory(context) reading context.options", lambda f, c, o: f(c)),
    "transport": ("factory(config, hook)", lambda f, c, o: f(c, c.hook)),
    "consume service": ("factory(host, options)", lambda f, c, o: f(c, o)),
    "sink": ("factory(options)", lambda f, c, o: f(o)),
}


@attrs.frozen
class _OldFormFactory(PluginFactory[Any, Any]):
    """A bare factory of its kind's old form. Its table is checked when the factory
    declares ``option_specs`` (an old consume service's always was, and was given the
    options completed with defaults); otherwise the factory checks it itself."""

    checked: bool = False
    completed: bool = False

    def parse_options(self, raw: object, where: Where) -> tuple[Any, list[ConfigProblem]]:
        if not self.checked:
            return freeze(raw or {}), []
        options, problems = PluginFactory.parse_options(self, raw, where)
        return (options if self.completed else freeze(raw or {})), problems


def old_form_factory(
    kind: str, table: str, name: str, factory: Callable[..., Any], plugin: str
) -> PluginFactory[Any, Any]:
    """``factory``, registered by ``plugin`` as ``register(name, factory)``, kept working
    with a DeprecationWarning naming the form that replaces it."""
    old_form, call = OLD_FORMS[kind]
    warnings.warn(
        f"plugin {plugin!r} registers {kind} {name!r} as a bare factory called "
        f"{old_form}; that form is deprecated and will be refused in the next release. "
        f"Register rmqk.spi.factory.PluginFactory({name!r}, factory, options=<an options "
        "class or OptionSpecs>) instead: its factory is called factory(context, options) "
        f"with the {table} table checked by the kernel (docs/hooks.md)",
        DeprecationWarning,
        stacklevel=4,
    )
    declared = getattr(factory, "option_specs", None)
    specs: tuple[OptionSpec, ...] = tuple(declared) if declared is not None else ()
    service = kind == "consume service"
    return _OldFormFactory(
        name,
        lambda context, options: call(factory, context, options),
        specs,
        checked=declared is not None or service,
        completed=service,
    )
