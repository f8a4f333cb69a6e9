"""One contract for every plugin kind: a :class:`PluginFactory` registration.

Every ``rmqk_register_*`` hook but the commands' takes the same value,
``register(PluginFactory("csv", CsvSink, options=CsvOptions))``: the name a config
selects, the options the plugin takes (an options class whose fields are made with
:func:`rmqk.spi.options.option`, or a sequence of :class:`rmqk.spi.options.OptionSpec`;
none: it takes none), and ``factory(context, options)``, called with the kind's context
(docs/hooks.md lists them) once the kernel checked the options table: every unknown
key, bad value and missing required key is reported at once, naming the table, the
key and the plugin. ``options`` is then an instance of the options class, or for a
sequence a read-only mapping of every declared option. A factory may still raise
:class:`rmqk.model.errors.ConfigError` for what declarations cannot say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.spi.option_text import describe_value
from rmqk.spi.options import (
    OptionSpec,
    Where,
    convert_values,
    declared_options,
    is_wildcard,
    parse_options,
)

__all__ = ["PluginFactory"]

C = TypeVar("C")
R = TypeVar("R")


def _declared(value: object) -> type | tuple[OptionSpec, ...]:
    if isinstance(value, type):
        if not attrs.has(value):
            raise TypeError(
                f"options={value.__name__} is not an attrs class whose fields are made with "
                "rmqk.spi.options.option"
            )
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        specs = tuple(value)
        bad = [s for s in specs if not isinstance(s, OptionSpec)]
        if bad:
            raise TypeError(f"options holds {bad[0]!r}, not an rmqk.spi.options.OptionSpec")
        return specs
    raise TypeError(
        "options must be an options class (fields made with rmqk.spi.options.option) or a "
        f"sequence of rmqk.spi.options.OptionSpec, got {value!r}"
    )


def _name(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"a PluginFactory's name must be a non-empty string, got {value!r}")


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise TypeError(f"a PluginFactory's factory must be callable, got {value!r}")


@attrs.frozen
class PluginFactory(Generic[C, R]):
    """One registered plugin of any kind: its name, its declared options and its factory."""

    name: str = attrs.field(validator=_name)
    # factory(context, options) -> the plugin (see the module docstring).
    factory: Callable[[C, Any], R] = attrs.field(validator=_callable)
    options: type | tuple[OptionSpec, ...] = attrs.field(default=(), converter=_declared)

    @property
    def option_specs(self) -> tuple[OptionSpec, ...]:
        """The options the plugin takes, as the reference and ``rmqk check`` list them."""
        if isinstance(self.options, type):
            return declared_options(self.options)
        return self.options

    def parse_options(self, raw: object, where: Where) -> tuple[Any, list[ConfigProblem]]:
        """``raw`` (a table; None is an empty one) checked against the declarations and
        resolved, with every problem found, each located by ``where``.

        The options are meaningful only when there is no problem.
        """
        if isinstance(self.options, type):
            return parse_options(self.options, raw, where)
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            problem = where.problem(None, f"options must be a table, got {describe_value(raw)}")
            return MappingProxyType({}), [problem]
        specs = {spec.name: spec for spec in self.options}
        values, problems = convert_values(specs, raw, where)
        resolved = {
            spec.name: MappingProxyType({}) if is_wildcard(spec) else spec.default
            for spec in self.options
        }
        resolved.update(values)
        return MappingProxyType(resolved), problems

    def build(self, context: C, raw: object, where: Where) -> R:
        """``factory(context, options)`` once ``raw`` has no problem, else one ConfigError."""
        options, problems = self.parse_options(raw, where)
        if problems:
            raise ConfigError(problems)
        return self.factory(context, options)
