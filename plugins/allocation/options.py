"""The options each built-in strategy takes (a consumer's ``allocate_options``), declared.

Factories are called as ``factory(**options)`` with what a consumer's TOML
``allocate_options`` table holds. Each resolves them with
:func:`parse_strategy_options` against its class here, declared with
:func:`rmqk.options.option` so the config reference is generated from the same
place. Every mistake is a :class:`rmqk.model.errors.ConfigError` naming the strategy,
the option and what is allowed; the placeholder path ``<options>`` is replaced
by whoever knows the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from rmqk.model.errors import ConfigError
from rmqk.spi.options import (
    OptionInvalid,
    OptionSpec,
    OptionType,
    Where,
    load_options,
    option,
)
from rmqk.spi.options import load_object as _load_object

__all__ = [
    "DEFAULT_BROKER_ROOM_PATTERN",
    "DEFAULT_CONSUMER_ROOM_PATTERN",
    "DEFAULT_INNER",
    "DEFAULT_VIRTUAL_NODE_COUNT",
    "OPTIONS_TABLE",
    "STRATEGY_OPTIONS",
    "ByConfigOptions",
    "ConsistentHashOptions",
    "MachineRoomNearbyOptions",
    "MachineRoomOptions",
    "NoOptions",
    "load_object",
    "option_error",
    "parse_strategy_options",
    "require_int",
    "require_str",
]

OPTIONS_TABLE = "allocate_options"
_WHERE = "<options>"
T = TypeVar("T")

DEFAULT_VIRTUAL_NODE_COUNT = 10
DEFAULT_INNER = "AVG"
DEFAULT_BROKER_ROOM_PATTERN = r"^([^@]+)@"
DEFAULT_CONSUMER_ROOM_PATTERN = r"^[^@]*@([^@#]+)"


def _hash_function(function: object) -> object:
    if not callable(function):
        raise OptionInvalid(
            f"must name a function taking the key string and returning an int, got {function!r}"
        )
    return function


@attrs.frozen
class NoOptions:
    """AVG and AVG_BY_CIRCLE take no options."""


@attrs.frozen
class ConsistentHashOptions:
    virtual_node_count: int = option(
        OptionType.INT,
        "Virtual nodes per consumer on the hash ring.",
        DEFAULT_VIRTUAL_NODE_COUNT,
        minimum=0,
    )
    hash_function: Any = option(  # noqa: RUF009
        OptionType.OBJECT,
        'The hash of a key string, as "package.module:function" (or the function from '
        "Python); it must return an int.",
        None,
        default_text="Java's MD5-based hash",
        check=_hash_function,
    )


@attrs.frozen
class ByConfigOptions:
    queues: tuple[Any, ...] = option(
        OptionType.ANY,
        "The queues this consumer takes: a list of tables { topic, broker_name, queue_id }.",
        (),
        required="list the queues to consume as tables with keys topic, broker_name, queue_id",
    )


@attrs.frozen
class MachineRoomOptions:
    consumer_idcs: tuple[str, ...] = option(
        OptionType.STR_LIST,
        "The machine rooms whose queues this group consumes (brokers named <room>@<name>).",
        (),
        required="list the machine rooms whose queues this group consumes, e.g. "
        'consumer_idcs = ["room1"] for brokers named room1@<broker>',
    )


@attrs.frozen
class MachineRoomNearbyOptions:
    inner: Any = option(  # noqa: RUF009
        OptionType.ANY,
        "The strategy that shares each room's queues among that room's consumers.",
        DEFAULT_INNER,
    )
    inner_options: Mapping[str, Any] | None = option(
        OptionType.TABLE,
        "Options of the inner strategy.",
        None,
        default_text="{}",
    )
    broker_room_pattern: str = option(
        OptionType.REGEX,
        "Group 1 of this pattern on a broker name is the broker's room.",
        DEFAULT_BROKER_ROOM_PATTERN,
    )
    consumer_room_pattern: str = option(
        OptionType.REGEX,
        "Group 1 of this pattern on a client id is the consumer's room.",
        DEFAULT_CONSUMER_ROOM_PATTERN,
    )
    resolver: Any = option(  # noqa: RUF009
        OptionType.OBJECT,
        'Instead of the patterns: "package.module:attribute" naming an object (or a class '
        "or factory building one) with broker_deploy_in(mq) and consumer_deploy_in(client_id).",
        None,
        default_text="(none)",
    )
    # The keys the table gave: resolver excludes the patterns only when they are given.
    given_keys: frozenset[str] = attrs.field(factory=frozenset, eq=False)


# Strategy name -> its options, for the config reference.
STRATEGY_OPTIONS: dict[str, type] = {
    "AVG": NoOptions,
    "AVG_BY_CIRCLE": NoOptions,
    "CONSISTENT_HASH": ConsistentHashOptions,
    "CONFIG": ByConfigOptions,
    "MACHINE_ROOM": MachineRoomOptions,
    "MACHINE_ROOM_NEARBY": MachineRoomNearbyOptions,
}


def _where(strategy: str) -> Where:
    return Where(_WHERE, OPTIONS_TABLE, prefix=f"{strategy}: ")


def parse_strategy_options(strategy: str, cls: type[T], options: Mapping[str, Any]) -> T:
    """``options`` resolved into ``cls``, or a ConfigError listing every problem."""
    return load_options(cls, options, _where(strategy))


def option_error(strategy: str, key: str | None, message: str) -> ConfigError:
    """A ConfigError about one option of one strategy."""
    return ConfigError([_where(strategy).problem(key, message)])


def _convert(strategy: str, key: str, spec: OptionSpec, value: object) -> Any:
    try:
        return spec.convert(value)
    except OptionInvalid as exc:
        raise option_error(strategy, f"{key}{exc.at}", str(exc)) from exc


def require_int(strategy: str, key: str, value: object, *, minimum: int) -> int:
    """``value`` as an option nested in a table (``queues[0].queue_id``)."""
    spec = OptionSpec(key, OptionType.INT, "", minimum=minimum)
    result: int = _convert(strategy, key, spec, value)
    return result


def require_str(strategy: str, key: str, value: object, *, what: str = "a string") -> str:
    if not isinstance(value, str) or not value:
        raise option_error(strategy, key, f"must be {what} (non-empty), got {value!r}")
    return value


def load_object(strategy: str, key: str, spec: object) -> object:
    """What ``spec`` names (``"package.module:attribute"``); objects pass unchanged."""
    try:
        return _load_object(spec)
    except OptionInvalid as exc:
        raise option_error(strategy, key, str(exc)) from exc
