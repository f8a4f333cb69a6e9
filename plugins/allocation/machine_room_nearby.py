"""MACHINE_ROOM_NEARBY: consume from brokers in your own machine room, share the orphans.

Java's AllocateMachineRoomNearby wraps another strategy (the *inner* one) and a
machine room resolver that tells which room a queue's broker and a consumer
are in:

1. the queues of the current consumer's room are allocated by the inner strategy
   among the consumers of that room only;
2. the queues of every room that has no consumer at all are allocated by the
   inner strategy among all consumers;
3. queues of other rooms that have consumers are left to those consumers.

A queue or consumer whose room resolves to nothing is an error (ValueError with
Java's message), since allocating it anyway would disagree with Java members.
The reported ``name`` is ``MACHINE_ROOM_NEARBY-<inner name>`` as in Java; the
registered name is ``MACHINE_ROOM_NEARBY``.

Java leaves the resolver to user code. rmqk resolves rooms with two regular
expressions (``re.search``; the room is group 1, or the whole match when the
pattern has no group):

* ``broker_room_pattern``, default ``^([^@]+)@``: the part of the broker name
  before ``@``, the ``room@broker`` convention MACHINE_ROOM uses too.
* ``consumer_room_pattern``, default ``^[^@]*@([^@#]+)``: applied to the client
  id, which is ``ip@instanceName`` (``@unitName`` may follow), so the default
  room is the instance name up to any ``#``. Give each consumer an instance name
  ``<room>`` or ``<room>#<anything unique>`` (for several processes on one host).
  A client id cannot carry the room otherwise: every member has to work out the
  room of every other member from its id alone. With Java's default instance
  name (``pid#nanotime``) the rooms are process ids that match no broker room,
  so every queue falls to step 2 and the result is the inner strategy's,
  complete and without overlaps, just not nearby.

Or name your own resolver with ``resolver = "package.module:attribute"``: an
object (or a module) with ``broker_deploy_in(mq) -> str | None`` and
``consumer_deploy_in(client_id) -> str | None``, or a no-argument callable (such
as a class) returning one. In a mixed group the Java members' MachineRoomResolver
and this one must agree.

Options (``allocate_options``):

* ``inner``: name of the inner strategy, default ``AVG`` (any registered name).
* ``inner_options``: table passed to the inner strategy's factory.
* ``broker_room_pattern``, ``consumer_room_pattern``: see above.
* ``resolver``: see above; excludes the two patterns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError, ConfigProblem, PluginError
from rmqk.plugins.allocation.options import (
    DEFAULT_BROKER_ROOM_PATTERN,
    DEFAULT_CONSUMER_ROOM_PATTERN,
    DEFAULT_INNER,
    OPTIONS_TABLE,
    MachineRoomNearbyOptions,
    load_object,
    option_error,
    parse_strategy_options,
    require_str,
)
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategy, AllocationStrategyContext

__all__ = [
    "DEFAULT_BROKER_ROOM_PATTERN",
    "DEFAULT_CONSUMER_ROOM_PATTERN",
    "DEFAULT_INNER",
    "NAME",
    "AllocateMachineRoomNearby",
    "MachineRoomResolver",
    "PatternMachineRoomResolver",
    "create_machine_room_nearby",
]

NAME = "MACHINE_ROOM_NEARBY"


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Java's AllocateMachineRoomNearby.MachineRoomResolver."""

    def broker_deploy_in(self, mq: MessageQueue) -> str | None: ...

    def consumer_deploy_in(self, client_id: str) -> str | None: ...


def _search_room(pattern: re.Pattern[str], text: str) -> str | None:
    found = pattern.search(text)
    if found is None:
        return None
    return found.group(1) if pattern.groups else found.group(0)


@attrs.frozen
class PatternMachineRoomResolver:
    """Rooms taken from broker names and client ids by regular expressions."""

    broker_pattern: re.Pattern[str] = re.compile(DEFAULT_BROKER_ROOM_PATTERN)
    consumer_pattern: re.Pattern[str] = re.compile(DEFAULT_CONSUMER_ROOM_PATTERN)

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return _search_room(self.broker_pattern, mq.broker_name)

    def consumer_deploy_in(self, client_id: str) -> str | None:
        return _search_room(self.consumer_pattern, client_id)


def _java_string_order(text: str) -> bytes:
    # Java's TreeMap<String> compares UTF-16 code units; Python compares code points.
    return text.encode("utf-16-be", "surrogatepass")


@attrs.frozen
class AllocateMachineRoomNearby(JavaStrategy):
    """Java's AllocateMachineRoomNearby (see the module docstring)."""

    inner: AllocationStrategy
    resolver: MachineRoomResolver = attrs.field(factory=PatternMachineRoomResolver)

    @property
    def name(self) -> str:
        return f"{NAME}-{self.inner.name}"

    def divide(self, share: Share) -> list[MessageQueue]:
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in share.mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"Machine room is null for mq {mq} (resolver {self.resolver!r})")
            queues_by_room.setdefault(room, []).append(mq)
        consumers_by_room: dict[str, list[str]] = {}
        for cid in share.cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(
                    f"Machine room is null for consumer id {cid} (resolver {self.resolver!r})"
                )
            consumers_by_room.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        # current_cid is in cid_all (checked), so its room was resolved above.
        current_room = self.resolver.consumer_deploy_in(share.current_cid) or ""
        local_queues = queues_by_room.pop(current_room, None)
        if local_queues:
            result.extend(
                self.inner.allocate(
                    share.group,
                    share.current_cid,
                    local_queues,
                    consumers_by_room[current_room],
                )
            )
        for room in sorted(queues_by_room, key=_java_string_order):
            if room not in consumers_by_room:
                result.extend(
                    self.inner.allocate(
                        share.group, share.current_cid, queues_by_room[room], share.cid_all
                    )
                )
        return result


def create_machine_room_nearby(**options: Any) -> AllocateMachineRoomNearby:
    """``MACHINE_ROOM_NEARBY`` from Python (options in the module docstring)."""
    return build_machine_room_nearby(
        None, parse_strategy_options(NAME, MachineRoomNearbyOptions, options)
    )


def build_machine_room_nearby(
    context: AllocationStrategyContext | None, options: MachineRoomNearbyOptions
) -> AllocateMachineRoomNearby:
    """The registered factory of ``MACHINE_ROOM_NEARBY`` (options in the module docstring)."""
    inner = _inner_strategy(context, options.inner, options.inner_options)
    if "resolver" in options.given_keys:
        clashing = [
            k for k in ("broker_room_pattern", "consumer_room_pattern") if k in options.given_keys
        ]
        if clashing:
            raise option_error(
                NAME, clashing[0], "cannot be combined with resolver; the resolver decides rooms"
            )
        return AllocateMachineRoomNearby(inner, _resolver(options.resolver))
    resolver = PatternMachineRoomResolver(
        _pattern("broker_room_pattern", options.broker_room_pattern, DEFAULT_BROKER_ROOM_PATTERN),
        _pattern(
            "consumer_room_pattern", options.consumer_room_pattern, DEFAULT_CONSUMER_ROOM_PATTERN
        ),
    )
    return AllocateMachineRoomNearby(inner, resolver)


def _pattern(key: str, value: object, default: str) -> re.Pattern[str]:
    text = default if value is None else require_str(NAME, key, value, what="a regular expression")
    try:
        return re.compile(text)
    except re.error as exc:
        raise option_error(
            NAME, key, f"is not a valid regular expression ({exc}): {text!r}"
        ) from exc


def _resolver(spec: object) -> MachineRoomResolver:
    target = load_object(NAME, "resolver", spec)
    # A class has the two methods too, unbound; build the instance it describes.
    if isinstance(target, type) or (
        not isinstance(target, MachineRoomResolver) and callable(target)
    ):
        target = target()
    if not isinstance(target, MachineRoomResolver):
        raise option_error(
            NAME,
            "resolver",
            f"{spec!r} gives {target!r}, which has no broker_deploy_in(mq) and "
            "consumer_deploy_in(client_id) methods",
        )
    return target


def _inner_strategy(
    context: AllocationStrategyContext | None, inner: object, inner_options: object
) -> AllocationStrategy:
    if inner_options is None:
        inner_options = {}
    if not isinstance(inner_options, Mapping):
        raise option_error(NAME, "inner_options", f"must be a table, got {inner_options!r}")
    if not isinstance(inner, str):
        if not isinstance(inner, AllocationStrategy):
            raise option_error(
                NAME, "inner", f"must be the name of an allocation strategy, got {inner!r}"
            )
        if inner_options:
            raise option_error(
                NAME, "inner_options", "only applies when inner names a strategy to build"
            )
        return inner
    build = _inner_factory(require_str(NAME, "inner", inner, what="a strategy name"))
    try:
        strategy = build(context or AllocationStrategyContext(""), inner_options)
    except ConfigError as exc:
        # Re-home the inner factory's problems under inner_options so the user finds them.
        raise ConfigError(
            [
                ConfigProblem(
                    p.path,
                    OPTIONS_TABLE,
                    f"inner_options.{p.key}" if p.key else "inner_options",
                    f"{NAME} inner strategy {p.message}",
                )
                for p in exc.problems
            ]
        ) from exc
    if not isinstance(strategy, AllocationStrategy):
        raise option_error(NAME, "inner", f"{inner!r} built {strategy!r}, not a strategy")
    return strategy


def _inner_factory(
    name: str,
) -> Callable[[AllocationStrategyContext, Mapping[str, Any]], object]:
    """How to build the strategy ``name`` from its options table: a built-in one, or any
    strategy a plugin registered (its table checked by the kernel, as every kind's is)."""
    # Imported here: the catalog imports this module.
    from rmqk.plugins.allocation.catalog import BUILTIN_FACTORIES

    factory = BUILTIN_FACTORIES.get(name)
    if factory is not None:
        create = factory
        return lambda context, options: create(**options)
    from rmqk.spi.registry import registries

    strategies = registries().allocation_strategies
    if name not in strategies:
        try:
            strategies.get(name)
        except PluginError as exc:
            raise option_error(NAME, "inner", str(exc)) from exc
    return lambda context, options: strategies.create(name, context, options)
