"""What ``rmqk run`` builds before it connects, built alone: one validation path.

``rmqk check`` and ``rmqk run`` run the same checks (:func:`check`), so a file
that ``check`` accepts is one ``run`` can start. For every consumer it builds what
the consumer would be made of, short of connecting: the sink (its factory
checks its options and imports its functions), the allocation strategy, the
offset store (not loaded), and checks the transport's and the consume service's
options. Every plugin's options table is checked first against the options its
:class:`rmqk.spi.factory.PluginFactory` declares, the same way for every kind, and
the plugin is built only when they are right. Every problem is reported at once,
each naming the file, the table and the key.

``rmqk check`` calls :func:`check_file`: the plugins only check their tables
(``rmqk_check_config``), so an in-process check configures nothing, and it also
looks into the plugins of consumer tables that have problems of their own, so a
file's every problem is said in one run. ``rmqk run`` calls :func:`preflight`,
which then hands the file to ``rmqk_configure``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

from rmqk.app.config import (
    Config,
    ConsumerSpec,
    announce_config,
    check_config_tables,
    load_config_unsound,
)
from rmqk.model.errors import ClientError, ConfigError, ConfigProblem, RmqkError
from rmqk.options import Where, rehome
from rmqk.pluginmanager import FactoryRegistry, registries
from rmqk.spi.contracts import AllocationStrategyContext, OffsetStoreContext, SinkContext
from rmqk.spi.option_text import render_key
from rmqk.spi.transport import Transport

__all__ = ["check", "check_file", "preflight", "preflight_problems", "sink_context", "sink_step"]

# A store built only to check its options is never loaded, so no file is read
# under this id; the real one (ip@pid) is known once the client instance exists.
_CHECK_CLIENT_ID = "rmqk-check"


class _Unconnected:
    """The client instance a store built by the check is given: it must not be used."""

    @property
    def transport(self) -> Transport:
        raise ClientError("rmqk check builds the offset store without connecting")

    async def find_broker_addr_for_offsets(self, broker_name: str, topic: str) -> str:
        raise ClientError("rmqk check builds the offset store without connecting")


def preflight(config: Config, specs: Iterable[ConsumerSpec] | None = None) -> None:
    """``rmqk run``'s validation: raise one :class:`ConfigError` listing every problem
    :func:`check` finds, else hand the file to the plugins' ``rmqk_configure``."""
    check(config, specs)
    announce_config(config)


def check(config: Config, specs: Iterable[ConsumerSpec] | None = None) -> None:
    """Raise one :class:`ConfigError` listing every problem ``rmqk run`` would meet.

    Plugins only check their tables here (``rmqk_check_config``): nothing is
    configured, so an in-process check leaves no state behind.
    """
    problems = preflight_problems(config, specs)
    if problems:
        raise ConfigError(problems)


def check_file(path: str) -> Config:
    """The config at ``path`` once nothing is wrong with it, else one :class:`ConfigError`
    listing every problem of the file: each consumer table's own keys and its plugins'
    options, in every table, even those with problems of their own (``rmqk check``).

    Like :func:`check`, it configures nothing (plugins only check their tables).
    """
    config, problems, unsound = load_config_unsound(path)
    problems += preflight_problems(config)
    for table in unsound:
        problems += _consumer_problems(config.path, table.spec, skip=table.rejected)
    if problems:
        tables = _consumer_tables(config.document)
        # Grouped by consumer table, in file order; problems of no consumer table first.
        raise ConfigError(sorted(problems, key=lambda p: _position(p.table, tables)))
    return config


def _consumer_tables(document: Mapping[str, Any]) -> list[str]:
    consumers = document.get("consumers")
    if not isinstance(consumers, Mapping):
        return []
    return [f"consumers.{render_key(name)}" for name in consumers]


def _position(table: str, consumer_tables: list[str]) -> int:
    """The index of the consumer table ``table`` is (or is inside), else -1."""
    for i, consumer in enumerate(consumer_tables):
        if table == consumer or table.startswith(f"{consumer}."):
            return i
    return -1


def preflight_problems(
    config: Config, specs: Iterable[ConsumerSpec] | None = None
) -> list[ConfigProblem]:
    """Every problem of the plugins' tables and of each consumer's composition."""
    problems = check_config_tables(config)
    for spec in config.consumers if specs is None else specs:
        problems.extend(_consumer_problems(config.path, spec))
    return problems


# The keys a plugin's options check depends on: with a problem of its own, one of them
# leaves the plugin unknown (or its options unread), so the check would only repeat it.
_SINK_KEYS = frozenset({"sink", "sink_options"})
_ALLOCATION_KEYS = frozenset({"allocate_message_queue_strategy", "allocate_options"})
_OFFSET_STORE_KEYS = frozenset({"offset_store", "offset_store_options", "message_model"})
_TRANSPORT_KEYS = frozenset({"transport", "transport_options"})
_CONSUME_SERVICE_KEYS = frozenset({"consume_service", "consume_service_options"})


def _consumer_problems(
    path: str, spec: ConsumerSpec, skip: frozenset[str] = frozenset()
) -> list[ConfigProblem]:
    """The problems of the plugins ``spec`` is composed of, except those resting on a key
    in ``skip`` (keys of a table with problems already reported).

    Every kind is checked the same way: the plugin's options table against the options
    its :class:`rmqk.spi.factory.PluginFactory` declares (the registry's
    ``option_problems``); the plugins that need no connection are then built, so that
    what only their factory can say (two options that exclude each other, a function
    that does not import) is said too.
    """
    where = Where(path, spec.table)
    problems: list[ConfigProblem] = []
    regs = registries()
    options = spec.options

    if skip & _SINK_KEYS:
        pass
    elif not spec.sink:
        names = ", ".join(regs.sinks.names()) or "none installed"
        problems.append(
            where.problem(
                "sink",
                "required key is missing: rmqk run hands each batch to a sink, e.g. "
                f'sink = "jsonl" with sink_options = {{ path = "out.jsonl" }} '
                f"(registered sinks: {names})",
            )
        )
    elif declared := _option_problems(where, regs.sinks, spec.sink, spec.sink_options):
        problems += declared
    else:
        try:
            with sink_step(path, spec, "factory"):
                regs.sinks.create(spec.sink, sink_context(spec), spec.sink_options)
        except ConfigError as exc:
            problems += exc.problems
    if skip & _ALLOCATION_KEYS:
        pass
    elif declared := _option_problems(
        where,
        regs.allocation_strategies,
        options.allocate_message_queue_strategy,
        options.allocate_options,
    ):
        problems += declared
    else:
        problems += _built(
            where,
            "allocate_options",
            lambda: regs.allocation_strategies.create(
                options.allocate_message_queue_strategy,
                AllocationStrategyContext(spec.group),
                options.allocate_options,
            ),
        )
    if skip & _OFFSET_STORE_KEYS:
        pass
    elif declared := _option_problems(
        where, regs.offset_stores, options.effective_offset_store, options.offset_store_options
    ):
        problems += declared
    else:
        problems += _built(
            where,
            "offset_store_options",
            lambda: regs.offset_stores.create(
                options.effective_offset_store,
                OffsetStoreContext(
                    group=spec.group,
                    client_id=_CHECK_CLIENT_ID,
                    message_model=options.message_model,
                    options=options.offset_store_options,
                    client=_Unconnected(),
                ),
                options.offset_store_options,
            ),
        )
    if not skip & _TRANSPORT_KEYS:
        # A transport is built only once the consumer connects, and a consume service
        # only once it starts: their declarations are all there is to check before.
        problems += _option_problems(
            where, regs.transports, options.transport, options.transport_options
        )
    if not skip & _CONSUME_SERVICE_KEYS:
        problems += _option_problems(
            where,
            regs.consume_services,
            options.consume_service,
            options.consume_service_options,
        )
    return problems


def sink_context(spec: ConsumerSpec) -> SinkContext:
    """What the sink of ``spec`` is built for."""
    return SinkContext(consumer=spec.name, group=spec.group)


def _option_problems(
    where: Where, registry: FactoryRegistry[Any, Any], name: str, raw: Mapping[str, Any]
) -> list[ConfigProblem]:
    """The problems of ``raw``, the options table of plugin ``name``, in the table of its
    kind (``[consumers.orders.sink_options]``); nothing for an unknown name, which is
    reported with the registered names."""
    if name not in registry:
        return []
    return registry.option_problems(name, raw, where.nested(registry.table))


def _built(where: Where, key: str, build: Callable[[], object]) -> list[ConfigProblem]:
    """The problems of ``build()``: a plugin's ConfigError rehomed, any other failure at ``key``."""
    try:
        build()
    except ConfigError as exc:
        return rehome(exc, where.path, where.table).problems
    except Exception as exc:
        # A factory that refuses without a ConfigError (a missing extra, an import
        # that fails, a third-party plugin's KeyError) still stops `rmqk run`; say
        # it under the key that chose it, with the file and the table.
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, RmqkError):
            text = f"{type(exc).__name__}: {text}"
        return [where.problem(key, text)]
    return []


@contextlib.contextmanager
def sink_step(path: str, spec: ConsumerSpec, step: Literal["factory", "start"]) -> Iterator[None]:
    """Raise what fails inside as one :class:`ConfigError` naming the file, table and sink.

    ``rmqk check`` builds each sink with its factory and ``rmqk run`` builds it
    again and starts it; a sink (third-party ones included) may fail in either
    with any exception. Its own ConfigError gets the file and table; anything
    else is said under the ``sink`` key with the exception's type, instead of a
    bare ``KeyError: 'path'`` or a traceback that names no consumer.
    """
    try:
        yield
    except ConfigError as exc:
        raise rehome(exc, path, spec.table) from exc
    except Exception as exc:
        where = Where(path, spec.table)
        raise ConfigError([where.problem("sink", _sink_failure(spec.sink, step, exc))]) from exc


def _sink_failure(sink: str | None, step: str, exc: Exception) -> str:
    if isinstance(exc, RmqkError) and step == "factory":
        # A refusal rmqk or the plugin worded (an unknown sink, a missing extra).
        return str(exc) or type(exc).__name__
    if step == "factory":
        what = f'the factory of sink "{sink}" raised'
    else:
        what = f'sink "{sink}" failed to start:'
    if isinstance(exc, RmqkError):
        return f"{what} {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        # "No such file or directory: /proc/rmqk", not "[Errno 2] ...: '/proc/rmqk'".
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc)
    return f"{what} {type(exc).__name__}: {text or '(no message)'}"
