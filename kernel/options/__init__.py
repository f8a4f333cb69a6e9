"""Options: the consumer's option table and the machinery plugins declare theirs with.

This module is the public face of both. The machinery lives in
:mod:`rmqk.spi.options` (with :mod:`rmqk.spi.option_text` for how values are shown),
the consumer's declarative table in :mod:`rmqk.options.consumer`, and Java's
name checks in :mod:`rmqk.model.names`.

A plugin declares the options its table takes as a frozen attrs class whose
fields are made by :func:`option`, and resolves a table with
:func:`load_options` (raising one :class:`~rmqk.model.errors.ConfigError` with every
problem) or :func:`parse_options` (returning the problems)::

    import attrs
    from rmqk.options import OptionType, Where, load_options, option

    @attrs.frozen
    class BatchOptions:
        path: str = option(OptionType.PATH, "File to write to.", required="the file")
        batch_rows: int = option(OptionType.INT, "Rows per write.", 1000, minimum=1)

    opts = load_options(BatchOptions, sink_options, Where("<sink_options>", "batch"))

The reference pages are generated from :func:`option_specs` of such a class.
"""

from __future__ import annotations

from rmqk.model.names import (
    DEFAULT_CONSUMER_GROUP,
    check_group,
    check_tag_expression,
    check_topic,
)
from rmqk.options.consumer import (
    OPTIONS,
    OPTIONS_BY_NAME,
    AccessChannel,
    ConsumerOptions,
    default_consume_timestamp,
    validate_options,
)
from rmqk.options.plugin_choices import (
    PLUGIN_OPTIONS,
    PluginChoice,
    check_plugin_names,
    plugin_choices,
)
from rmqk.spi.client_options import CLIENT_OPTIONS, ClientOptions
from rmqk.spi.option_text import (
    describe_value,
    render_key,
    render_value,
    suggest,
    unknown_key_message,
)
from rmqk.spi.options import (
    JAVA_INT_MAX,
    JAVA_LONG_MAX,
    TIMESTAMP_FORMAT,
    OptionInvalid,
    OptionSpec,
    OptionType,
    Where,
    check_timestamp,
    freeze,
    load_object,
    load_options,
    option,
    option_specs,
    parse_options,
    plugin_unknown_key_message,
    rehome,
    thaw,
)

__all__ = [
    "CLIENT_OPTIONS",
    "DEFAULT_CONSUMER_GROUP",
    "JAVA_INT_MAX",
    "JAVA_LONG_MAX",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "PLUGIN_OPTIONS",
    "TIMESTAMP_FORMAT",
    "AccessChannel",
    "ClientOptions",
    "ConsumerOptions",
    "OptionInvalid",
    "OptionSpec",
    "OptionType",
    "PluginChoice",
    "Where",
    "check_group",
    "check_plugin_names",
    "check_tag_expression",
    "check_timestamp",
    "check_topic",
    "default_consume_timestamp",
    "describe_value",
    "freeze",
    "load_object",
    "load_options",
    "option",
    "option_specs",
    "parse_options",
    "plugin_choices",
    "plugin_unknown_key_message",
    "rehome",
    "render_key",
    "render_value",
    "suggest",
    "thaw",
    "unknown_key_message",
    "validate_options",
]
