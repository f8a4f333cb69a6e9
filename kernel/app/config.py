"""TOML config files that compose one or more consumers.

A file holds ``[consumers.<name>]`` tables; each names its group, name servers,
subscriptions, the plugins it is composed of (allocation strategy, offset store,
transport, consume service, sink) with their option tables, and any option of
:mod:`rmqk.options`. Other top-level tables belong to plugins, which check them
in ``rmqk_check_config`` (:func:`check_config_tables`) and read and apply them in
the historic ``rmqk_configure`` hook (:func:`announce_config`).

:func:`load_config` reports every mistake in a file at once, in one
:class:`~rmqk.model.errors.ConfigError`, each naming the file, the table and the key and
saying what is allowed.
"""

from __future__ import annotations

import difflib
import enum
import json
import os
import re
import time
import tomllib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from rmqk.model import (
    ConsumeFromWhere,
    ExpressionType,
    MessageModel,
    SubscriptionData,
)
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.model.namespace import wrap
from rmqk.options import (
    OPTIONS,
    OPTIONS_BY_NAME,
    ConsumerOptions,
    OptionSpec,
    OptionType,
    PluginChoice,
    Where,
    check_group,
    check_plugin_names,
    describe_value,
    freeze,
    plugin_choices,
    render_key,
    render_value,
    thaw,
    unknown_key_message,
    validate_options,
)
from rmqk.options.subscription import parse_subscriptions
from rmqk.pluginmanager import hook_plugins_message, unknown_hook_plugins
from rmqk.spi.options import SECRET_TEXT

__all__ = [
    "COMPOSITION_KEYS",
    "REQUIRED_KEYS",
    "Config",
    "ConsumerSpec",
    "Unsound",
    "announce_config",
    "check_config_tables",
    "describe_config",
    "load_config",
    "load_config_unsound",
]

# Keys of a consumer table that are not consumer options: what the consumer is
# and where its messages go. Listed for the config reference.
COMPOSITION_KEYS: tuple[OptionSpec, ...] = (
    OptionSpec(
        name="group",
        value_type=OptionType.STR,
        doc="The consumer group. Letters, digits, '%', '|', '-' and '_', at most 255 "
        "characters, not DEFAULT_CONSUMER. Required.",
        default_text="(required)",
        java_name="consumerGroup",
    ),
    OptionSpec(
        name="subscription",
        value_type=OptionType.TABLE,
        doc='Topic to tag expression ("*", "TagA || TagB"), or to a table '
        '{ expression = "...", type = "TAG" | "SQL92" }. Required.',
        default_text="(required)",
        java_name="subscription",
    ),
    OptionSpec(
        name="sink",
        value_type=OptionType.PLUGIN,
        doc="The registered sink the consumer hands its batches to.",
        default_text="(none)",
        plugin_kind="sink",
        nullable=True,
    ),
    OptionSpec(
        name="sink_options",
        value_type=OptionType.TABLE,
        doc="Options passed to the sink's factory.",
        default_text="{}",
    ),
    OptionSpec(
        name="processes",
        value_type=OptionType.INT,
        doc="Worker processes the consumer runs as, each a client instance of the group, so "
        "the group's queues spread over them (a Python process uses one core). More than 1 "
        "runs them under a supervisor (docs/operations.md); `rmqk run --processes N` "
        "overrides it. Clustering only.",
        default=1,
        minimum=1,
        maximum=1024,
    ),
)
_COMPOSITION_NAMES = frozenset(s.name for s in COMPOSITION_KEYS)
_REQUIRED_TEXT = {
    "group": 'the consumer group, e.g. group = "order-analytics"',
    "namesrv_addr": 'the name servers, e.g. namesrv_addr = "127.0.0.1:9876"',
    "subscription": 'topics and tag expressions, e.g. subscription = { Orders = "TagA || TagB" }',
}
REQUIRED_KEYS: tuple[str, ...] = tuple(_REQUIRED_TEXT)
CONSUMER_KEYS: tuple[str, ...] = tuple(s.name for s in COMPOSITION_KEYS) + tuple(
    s.name for s in OPTIONS
)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


@attrs.frozen
class ConsumerSpec:
    """One consumer composed in a config file, every option resolved."""

    name: str
    group: str
    subscriptions: tuple[SubscriptionData, ...]
    options: ConsumerOptions
    sink: str | None = None
    sink_options: Mapping[str, Any] = attrs.field(factory=_empty, hash=False)
    # The keys the file set; every other option has its default.
    from_file: frozenset[str] = frozenset()
    processes: int = 1

    @property
    def table(self) -> str:
        return f"consumers.{render_key(self.name)}"

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        return self.options.namesrv_addr

    @property
    def message_model(self) -> MessageModel:
        return self.options.message_model

    @property
    def consume_from_where(self) -> ConsumeFromWhere:
        return self.options.consume_from_where

    @property
    def consume_timestamp(self) -> str:
        return self.options.consume_timestamp

    @property
    def allocate_message_queue_strategy(self) -> str:
        return self.options.allocate_message_queue_strategy

    @property
    def allocate_options(self) -> Mapping[str, Any]:
        return self.options.allocate_options

    @property
    def offset_store(self) -> str:
        """The chosen offset store, or the message model's default."""
        return self.options.effective_offset_store

    @property
    def offset_store_options(self) -> Mapping[str, Any]:
        return self.options.offset_store_options

    @property
    def transport(self) -> str:
        return self.options.transport

    @property
    def transport_options(self) -> Mapping[str, Any]:
        return self.options.transport_options

    @property
    def consume_service(self) -> str:
        return self.options.consume_service

    @property
    def consume_service_options(self) -> Mapping[str, Any]:
        return self.options.consume_service_options


@attrs.frozen
class Config:
    """A loaded config file: its consumers and the whole document for plugins."""

    path: str
    consumers: tuple[ConsumerSpec, ...]
    # The parsed TOML, read-only, as ``rmqk_configure`` hands it to plugins.
    document: Mapping[str, Any] = attrs.field(factory=_empty, hash=False)

    def consumer(self, name: str) -> ConsumerSpec:
        for spec in self.consumers:
            if spec.name == name:
                return spec
        known = ", ".join(c.name for c in self.consumers)
        raise KeyError(f"{self.path} has no consumer {name!r}; it has: {known}")

    def announce(self) -> None:
        """Hand the file to the plugins (``rmqk_configure``), as ``rmqk run`` does before it
        starts a consumer: the acl plugin takes its ``[acl]`` table, say."""
        announce_config(self)


def load_config(path: str | os.PathLike[str], *, check_plugins: bool = True) -> Config:
    """Read, validate and resolve a config file.

    Raises :class:`ConfigError` with every problem found. With ``check_plugins``
    (the default) each plugin name, chosen or default, must be registered by an
    installed plugin; without it only the shape of the file is checked, which is
    what a tool that does not run the consumers needs.
    """
    where = os.fspath(path)
    document = _read_toml(where)
    problems: list[ConfigProblem] = []
    consumers = _compose(where, document, problems, check_plugins=check_plugins)
    if problems:
        raise ConfigError(problems)
    frozen: Mapping[str, Any] = freeze(document)
    return Config(path=where, consumers=tuple(consumers), document=frozen)


def check_config_tables(config: Config) -> list[ConfigProblem]:
    """Every problem the plugins' ``rmqk_check_config`` find in their tables.

    Each plugin is called on its own, so one plugin's problems do not hide
    another's; paths in angle brackets are replaced with the config's path.
    """
    from rmqk.hookcalls import plugin_calls
    from rmqk.pluginmanager import get_plugin_manager

    problems: list[ConfigProblem] = []
    for _plugin, call in plugin_calls(get_plugin_manager(), "rmqk_check_config"):
        try:
            call(config=config.document)
        except ConfigError as exc:
            problems.extend(_rehome(config, exc.problems))
    return problems


def _rehome(config: Config, problems: Iterable[ConfigProblem]) -> list[ConfigProblem]:
    return [
        ConfigProblem(config.path if p.path.startswith("<") else p.path, p.table, p.key, p.message)
        for p in problems
    ]


@attrs.frozen
class Unsound:
    """A consumer table with problems: its spec (rejected values left at their defaults)
    and the keys of the table the problems are about."""

    spec: ConsumerSpec
    rejected: frozenset[str]


def load_config_unsound(
    path: str | os.PathLike[str],
) -> tuple[Config, list[ConfigProblem], list[Unsound]]:
    """:func:`load_config` without raising: the config of the sound consumers, every problem
    of the file, and each consumer table with problems, so ``rmqk check`` can look further
    into those tables (their plugins' options) and report everything at once.

    A file that cannot be read as TOML still raises :class:`ConfigError`.
    """
    where = os.fspath(path)
    document = _read_toml(where)
    problems: list[ConfigProblem] = []
    unsound: list[Unsound] = []
    consumers = _compose(where, document, problems, check_plugins=True, unsound=unsound)
    config = Config(path=where, consumers=tuple(consumers), document=freeze(document))
    return config, problems, unsound


def announce_config(config: Config) -> None:
    """Hand the document to every plugin's ``rmqk_configure``, now and when registered later.

    A plugin that rejects its table raises :class:`ConfigError`. It sees only the
    document, so it names the file with a placeholder such as ``"<config>"``; any
    path in angle brackets is replaced with the config's path here.
    """
    from rmqk.pluginmanager import get_plugin_manager

    try:
        get_plugin_manager().hook.rmqk_configure.call_historic(kwargs={"config": config.document})
    except ConfigError as exc:
        raise ConfigError(_rehome(config, exc.problems)) from None


def _read_toml(path: str) -> dict[str, Any]:
    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(path, "", None, message)])

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise fail(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text (byte {exc.start}): TOML files must be UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)".
        raise fail(f"invalid TOML: {exc}") from None


def _table_name(name: str) -> str:
    return f"consumers.{render_key(name)}"


def _compose(
    path: str,
    document: Mapping[str, Any],
    problems: list[ConfigProblem],
    *,
    check_plugins: bool,
    unsound: list[Unsound] | None = None,
) -> list[ConsumerSpec]:
    top = Where(path, "")
    for key, value in document.items():
        if key == "consumers":
            continue
        is_table = isinstance(value, Mapping) or (
            isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value)
        )
        if not is_table:
            hint = (
                "; consumer settings belong in a [consumers.<name>] table"
                if key in CONSUMER_KEYS
                else ""
            )
            problems.append(
                top.problem(
                    key,
                    "top-level keys must be tables (consumers, or a plugin's own table), "
                    f"got {describe_value(value)}{hint}",
                )
            )
    consumers = document.get("consumers")
    if consumers is None:
        tables = [k for k, v in document.items() if isinstance(v, Mapping)]
        # The other way round from an unknown key's hint: the file's table is the typo.
        close = difflib.get_close_matches("consumers", tables, n=1, cutoff=0.6)
        hint = f" (the file has [{close[0]}]: did you mean [consumers]?)" if close else ""
        problems.append(
            top.problem(
                "consumers",
                f"no consumers: add at least one [consumers.<name>] table{hint}",
            )
        )
        return []
    if not isinstance(consumers, Mapping):
        problems.append(
            top.problem(
                "consumers",
                f"must be a table of [consumers.<name>] tables, got {describe_value(consumers)}",
            )
        )
        return []
    if not consumers:
        problems.append(
            top.problem("consumers", "defines no consumer: add a [consumers.<name>] table")
        )
        return []
    sub_version = int(time.time() * 1000)
    specs: list[ConsumerSpec] = []
    groups: dict[str, str] = {}
    for name, table in consumers.items():
        where = Where(path, _table_name(name))
        if not isinstance(table, Mapping):
            problems.append(
                Where(path, "consumers").problem(
                    render_key(name),
                    f"must be a table ([{_table_name(name)}]), got {describe_value(table)}",
                )
            )
            continue
        found: list[ConfigProblem] = []
        group, spec, sound = _consumer(name, table, where, found, sub_version, check_plugins)
        if group is not None:
            effective = _effective_group(group, table.get("namespace"))
            if effective in groups:
                found.append(
                    where.problem(
                        "group",
                        f"group {group!r} is already used by [{groups[effective]}]; the members "
                        "of a group must subscribe alike and share its queues, so compose one "
                        "consumer per group (raise consume_thread_min for more parallelism)",
                    )
                )
            else:
                groups[effective] = where.table
        problems.extend(_in_file_order(found, table))
        if sound and not found:
            specs.append(spec)
        elif unsound is not None:
            unsound.append(Unsound(spec, frozenset(_rejected_key(p) for p in found)))
    return specs


def _rejected_key(problem: ConfigProblem) -> str:
    # "allocate_options.virtual_node_count" and "subscription[0]" are keys of the table too.
    return re.split(r"[.\[]", problem.key or "", maxsplit=1)[0]


def _effective_group(group: str, namespace: object) -> str:
    # Java wraps the group as "<namespace>%<group>", so namespaces separate groups.
    return wrap(namespace, group) if isinstance(namespace, str) else group


def _in_file_order(problems: list[ConfigProblem], table: Mapping[str, Any]) -> list[ConfigProblem]:
    """Problems ordered as their keys appear in the table.

    Missing required keys come first, defaults the file does not mention last.
    """
    order = {key: i for i, key in enumerate(table)}

    def position(problem: ConfigProblem) -> int:
        head = (problem.key or "").split(".", 1)[0]
        if head in order:
            return order[head]
        return -1 if head in _REQUIRED_TEXT else len(order)

    return sorted(problems, key=position)


def _consumer(
    name: str,
    table: Mapping[str, Any],
    where: Where,
    problems: list[ConfigProblem],
    sub_version: int,
    check_plugins: bool,
) -> tuple[str | None, ConsumerSpec, bool]:
    """The consumer's valid group (for the duplicate check), its spec, and whether the spec
    is sound: with a problem, rejected values are left at their defaults."""
    for key, what in _REQUIRED_TEXT.items():
        if key not in table:
            problems.append(where.problem(key, f"required key is missing: {what}"))

    option_values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _COMPOSITION_NAMES:
            continue
        if key in OPTIONS_BY_NAME:
            option_values[key] = value
        else:
            problems.append(where.problem(key, unknown_key_message(key, CONSUMER_KEYS)))
    options, option_problems = validate_options(option_values, where)
    problems.extend(option_problems)

    group: str | None = None
    if "group" in table:
        problem = check_group(table["group"])
        if problem:
            problems.append(where.problem("group", problem))
        else:
            group = table["group"]

    subscriptions: tuple[SubscriptionData, ...] = ()
    if "subscription" in table:
        subscriptions = parse_subscriptions(table["subscription"], where, problems, sub_version)

    sink: str | None = None
    sink_options: Mapping[str, Any] = _EMPTY
    if "sink" in table:
        value = table["sink"]
        if isinstance(value, str) and value.strip():
            sink = value
        else:
            problems.append(
                where.problem(
                    "sink", f"must be the name of a registered sink, got {describe_value(value)}"
                )
            )
    if "sink_options" in table:
        value = table["sink_options"]
        if not isinstance(value, Mapping):
            problems.append(
                where.problem("sink_options", f"must be a table, got {describe_value(value)}")
            )
        elif "sink" not in table:
            problems.append(
                where.problem(
                    "sink_options",
                    'sink options are given but no sink is chosen; add sink = "<name>"',
                )
            )
        else:
            sink_options = freeze(value)

    processes = _processes(table, options, where, problems)

    if check_plugins:
        choices = plugin_choices(options)
        if sink is not None:
            choices.append(PluginChoice("sink", sink, "sink"))
        # A key already reported (or an options table with a bad value) is not checked again.
        rejected = {p.key for p in problems}
        choices = [c for c in choices if c.key not in rejected]
        problems.extend(check_plugin_names(choices, where, explicit=frozenset(table)))
        if options.hook_plugins and "hook_plugins" not in rejected:
            unknown, known = unknown_hook_plugins(options.hook_plugins)
            if unknown:
                problems.append(
                    where.problem("hook_plugins", hook_plugins_message(unknown, known))
                )

    spec = ConsumerSpec(
        name=name,
        group=group if group is not None else "",
        subscriptions=subscriptions,
        options=options,
        sink=sink,
        sink_options=sink_options,
        from_file=frozenset(table),
        processes=processes,
    )
    # A table with problems still gives its spec, for rmqk check to look at its plugins'
    # options too; only a problem-free one is run.
    return group, spec, group is not None and bool(subscriptions) and not problems


_PROCESSES = next(s for s in COMPOSITION_KEYS if s.name == "processes")


def _processes(
    table: Mapping[str, Any], options: ConsumerOptions, where: Where, problems: list[ConfigProblem]
) -> int:
    if "processes" not in table:
        return 1
    try:
        processes: int = _PROCESSES.convert(table["processes"])
    except ValueError as exc:
        problems.append(where.problem("processes", str(exc)))
        return 1
    if processes > 1 and options.message_model is MessageModel.BROADCASTING:
        # Every broadcasting member takes every message: N workers would deliver each N times.
        problems.append(where.problem("processes", 'must be 1 with message_model = "BROADCASTING"'))
    return processes


# -- describing a resolved config ------------------------------------------------


def _subscription_value(sub: SubscriptionData) -> Any:
    if sub.expression_type is ExpressionType.TAG:
        return sub.sub_string
    return {"expression": sub.sub_string, "type": sub.expression_type.name}


def _rows(spec: ConsumerSpec) -> list[tuple[str, Any, bool]]:
    """(key, resolved value, set in the file) for every key of a consumer."""
    rows: list[tuple[str, Any, bool]] = [
        ("group", spec.group, True),
        ("namesrv_addr", spec.options.namesrv_addr, True),
        ("subscription", {s.topic: _subscription_value(s) for s in spec.subscriptions}, True),
        ("sink", spec.sink, "sink" in spec.from_file),
        ("sink_options", spec.sink_options, "sink_options" in spec.from_file),
        ("processes", spec.processes, "processes" in spec.from_file),
    ]
    for option in OPTIONS:
        if option.name == "namesrv_addr":
            continue
        value = getattr(spec.options, option.name)
        if option.name == "offset_store":
            value = spec.offset_store
        rows.append((option.name, value, option.name in spec.from_file))
    return rows


def toml_value(value: object) -> str:
    """``value`` as TOML that reads back the same, enums by their quoted name."""
    if isinstance(value, enum.Enum):
        return toml_value(value.name)
    if isinstance(value, str):
        # JSON's string escapes are all TOML escapes; DEL is the one control
        # character JSON leaves raw and TOML does not allow.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = ", ".join(
            f"{render_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None
        )
        return "{ " + inner + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return render_value(value)


def describe_config(config: Config, as_json: bool = False) -> str:
    """The resolved composition: every option of every consumer, and where it came from.

    The text form is TOML that ``rmqk check`` accepts back and that composes the
    same consumers: every value is written, options left at their default too.
    """
    if as_json:
        return json.dumps(_as_json(config), indent=2, default=str)
    count = len(config.consumers)
    lines = [f"# {config.path}: OK, {count} consumer{'s' if count != 1 else ''}"]
    for spec in config.consumers:
        lines.append("")
        lines.append(f"[{spec.table}]")
        body: list[tuple[str, str]] = []
        for key, value, from_file in _rows(spec):
            source = "file" if from_file else "default"
            if value is None:
                default = OPTIONS_BY_NAME[key].default_repr if key in OPTIONS_BY_NAME else "(none)"
                body.append((f"# {key} not set", f"{source}: {default}"))
                continue
            if key in OPTIONS_BY_NAME and OPTIONS_BY_NAME[key].secret:
                # A secret is never printed: the line says it is set, and where from.
                body.append((f"# {key} = {SECRET_TEXT}", source))
                continue
            if key == "offset_store" and not from_file:
                source = f"default for {spec.message_model.name}"
            body.append((f"{key} = {toml_value(value)}", source))
        width = min(max(len(text) for text, _ in body), 72)
        lines.extend(f"{text:<{width}}  # {source}" for text, source in body)
    return "\n".join(lines)


def _shown(key: str, value: Any) -> Any:
    """``value`` as output may show it: a secret option's only as set or not."""
    spec = OPTIONS_BY_NAME.get(key)
    if spec is not None and spec.secret and value is not None:
        return SECRET_TEXT
    return value


def _as_json(config: Config) -> dict[str, Any]:
    consumers = []
    for spec in config.consumers:
        consumers.append(
            {
                "name": spec.name,
                "table": spec.table,
                "group": spec.group,
                "subscriptions": [
                    {
                        "topic": s.topic,
                        "expression": s.sub_string,
                        "type": s.expression_type.name,
                        "tags": sorted(s.tags_set),
                    }
                    for s in spec.subscriptions
                ],
                "options": {
                    key: {
                        "value": _shown(key, thaw(value)),
                        "source": "file" if from_file else "default",
                    }
                    for key, value, from_file in _rows(spec)
                    if key not in ("group", "subscription")
                },
            }
        )
    return {"path": config.path, "consumers": consumers}
