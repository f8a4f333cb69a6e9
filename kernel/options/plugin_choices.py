"""The plugins a consumer is composed of: the options that pick them, and checking their names.

Each plugin option of :class:`~rmqk.options.consumer.ConsumerOptions` names a
registered plugin of one kind; ``rmqk check`` and the config loader report a
name no installed plugin registered.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from rmqk.model.errors import ConfigProblem
from rmqk.options.consumer import OPTIONS_BY_NAME, ConsumerOptions
from rmqk.spi.option_text import suggest
from rmqk.spi.options import Where

__all__ = ["PLUGIN_OPTIONS", "PluginChoice", "check_plugin_names", "plugin_choices"]

# Pairs of (plugin option, its options table).
PLUGIN_OPTIONS: tuple[tuple[str, str], ...] = (
    ("allocate_message_queue_strategy", "allocate_options"),
    ("offset_store", "offset_store_options"),
    ("transport", "transport_options"),
    ("consume_service", "consume_service_options"),
)


@attrs.frozen
class PluginChoice:
    """One plugin a consumer is composed of: the key that picks it, its name and kind."""

    key: str
    name: str
    kind: str


def plugin_choices(options: ConsumerOptions) -> list[PluginChoice]:
    """The plugins ``options`` compose, with the offset store resolved by message model."""
    out: list[PluginChoice] = []
    for key, _table in PLUGIN_OPTIONS:
        spec = OPTIONS_BY_NAME[key]
        assert spec.plugin_kind is not None
        name = options.effective_offset_store if key == "offset_store" else getattr(options, key)
        out.append(PluginChoice(key, name, spec.plugin_kind))
    return out


def check_plugin_names(
    choices: Iterable[PluginChoice], where: Where, *, explicit: Collection[str] = ()
) -> list[ConfigProblem]:
    """Problems for plugin names that no installed plugin registered.

    Keys not in ``explicit`` are reported as defaults, since the file does not
    mention them.
    """
    from rmqk.pluginmanager import registries

    regs = registries()
    problems: list[ConfigProblem] = []
    for choice in choices:
        registry = regs.by_kind(choice.kind)
        if choice.name in registry:
            continue
        known = ", ".join(registry.names()) or "(none: are the rmqk plugins installed and enabled?)"
        origin = "" if choice.key in explicit else " (the default)"
        hint = suggest(choice.name, registry.names())
        problems.append(
            where.problem(
                choice.key,
                f"unknown {choice.kind} {choice.name!r}{origin}{hint}; registered: {known}",
            )
        )
    return problems
