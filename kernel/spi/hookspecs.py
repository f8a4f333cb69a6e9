"""Every extension point of rmqk, one pluggy hook spec each.

Two kinds of hook:

* Registration hooks (``rmqk_register_*``) are called once, when the plugin
  manager builds its registries. Each receives a ``register`` callable; calling
  it adds one named implementation: ``register(PluginFactory(name, factory,
  options=...))`` for every kind of plugin (:mod:`rmqk.spi.factory`: the factory
  is called as ``factory(context, options)`` with its declared options checked
  by the kernel), ``register(name, command)`` for commands. They must be plain
  functions (not ``async def``). Registering a name twice is an error that names
  both plugins.
* Event hooks are called by the engine while clients run. The filter,
  consume, send, rebalance and client lifecycle hooks (:data:`AWAITED_HOOKS`)
  may be ``async def``: the
  kernel awaits each implementation before the next starts, and an exception
  raised by one is logged and swallowed, as Java does. The RPC hooks are sync;
  an exception raised by one propagates and fails that request.

Every hook is called through ``pm.hook``, so pluggy's ordering (``tryfirst``,
``trylast``), hook-call monitoring and tracing apply. Hook wrappers
(``wrapper=True``, or the old ``hookwrapper=True``) work on every hook except
the awaited ones, whose implementations run after the hook call returned;
registering a wrapper for one of those is a PluginError naming the plugin and
hook. An implementation of a hook not defined here is a PluginError when the
plugins are loaded.

The hook reference in docs/hooks.md is checked against this module by
tests/test_hook_docs.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import pluggy

from rmqk.model import MessageQueue
from rmqk.spi.contexts import (
    ClientContext,
    ConsumeMessageContext,
    ConsumerView,
    FilterMessageContext,
    SendMessageContext,
)
from rmqk.wire.protocol import RemotingCommand

PROJECT_NAME = "rmqk"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """A registration hook's ``register``: ``register(PluginFactory(...))`` for every
    plugin kind (:mod:`rmqk.spi.factory`), ``register(name, command)`` for commands;
    ``register(name, factory)``, a bare factory, is deprecated (kept for one release)."""

    def __call__(self, name: Any, value: Any = ..., /) -> None: ...


# Event hooks whose implementations the kernel awaits one at a time (rmqk.hookcalls).
AWAITED_HOOKS = frozenset(
    {
        "rmqk_filter_message",
        "rmqk_consume_message_before",
        "rmqk_consume_message_after",
        "rmqk_queues_changed",
        "rmqk_send_message_before",
        "rmqk_send_message_after",
        "rmqk_client_started",
        "rmqk_client_shutdown",
    }
)

# -- registration hooks ---------------------------------------------------------


@hookspec
def rmqk_register_allocation_strategies(register: Register) -> None:
    """Register allocation strategies: ``register(PluginFactory(name, factory, options=...))``.

    ``factory(context, options)`` (:mod:`rmqk.spi.factory`) returns an
    :class:`rmqk.spi.contracts.AllocationStrategy`; ``context`` is an
    :class:`rmqk.spi.contracts.AllocationStrategyContext`, ``options`` the consumer's
    ``allocate_options`` checked by the kernel. A config's
    ``allocate_message_queue_strategy`` selects one by name (``AVG`` is the
    default). Called once, when the registry is first used. Returns nothing. Sync only.
    """


@hookspec
def rmqk_register_offset_stores(register: Register) -> None:
    """Register offset stores: ``register(PluginFactory(name, factory, options=...))``.

    ``factory(context, options)`` (:mod:`rmqk.spi.factory`) returns an
    :class:`rmqk.spi.contracts.OffsetStore` for one consumer; ``context`` is an
    :class:`rmqk.spi.contracts.OffsetStoreContext`, ``options`` the consumer's
    ``offset_store_options`` checked by the kernel. The defaults are
    ``remote-broker`` (clustering) and ``local-file`` (broadcasting). Called once,
    when the registry is first used. Returns nothing. Sync only.
    """


@hookspec
def rmqk_register_transports(register: Register) -> None:
    """Register remoting transports: ``register(PluginFactory(name, factory, options=...))``.

    ``factory(context, options)`` (:mod:`rmqk.spi.factory`) returns an
    :class:`rmqk.spi.transport.Transport`; ``context`` is an
    :class:`rmqk.spi.transport.TransportConfig` (its ``hook`` calls the RPC hooks),
    ``options`` the client's ``transport_options`` checked by the kernel, which
    passes ``vip_channel_enabled`` itself when the client option is set. The
    default is ``tcp``. Called once, when the registry is first used. Returns
    nothing. Sync only.
    """


@hookspec
def rmqk_register_consume_services(register: Register) -> None:
    """Register consume services: ``register(PluginFactory(name, factory, options=...))``.

    ``factory(context, options)`` (:mod:`rmqk.spi.factory`) returns the
    :class:`rmqk.spi.consume.ConsumeService` that drains one push consumer's process
    queues; ``context`` is its :class:`rmqk.spi.consume.ConsumeHost`, ``options``
    the consumer's ``consume_service_options`` checked by the kernel. A config's
    ``consume_service`` selects one by name (``concurrent``, the default, and
    ``orderly``). Called once, when the registry is first used. Returns nothing.
    Sync only.
    """


@hookspec
def rmqk_register_sinks(register: Register) -> None:
    """Register sinks: ``register(PluginFactory(name, factory, options=...))``.

    ``factory(context, options)`` (:mod:`rmqk.spi.factory`) returns the
    :class:`rmqk.spi.contracts.Sink` a composed consumer hands its batches to;
    ``context`` is an :class:`rmqk.spi.contracts.SinkContext`, ``options`` the
    consumer's ``sink_options`` checked by the kernel. Called once, when the
    registry is first used. Returns nothing. Sync only.
    """


@hookspec
def rmqk_register_commands(register: Register) -> None:
    """Register ``rmqk`` CLI sub-commands.

    Called once when the CLI builds its parser. ``register(name, command)`` where
    ``command`` is an :class:`rmqk.spi.commands.Command` (help, examples, arguments and the
    function that runs it). Returns nothing. Sync only.
    """


# -- event hooks ----------------------------------------------------------------


@hookspec
def rmqk_filter_message(context: FilterMessageContext) -> None:
    """Filter the messages of one FOUND pull response (Java's FilterMessageHook).

    Called on the event loop after the client-side exact-tag re-filter and before
    the messages enter the process queue; implementations edit
    ``context.messages`` in place. Every implementation runs, in pluggy's
    order (the last registered first; ``tryfirst``/``trylast`` honoured).
    The return value is ignored. May be ``async def``. Exceptions are
    logged and swallowed.

    The exact-tag re-filter is a step of the pull path (``rmqk.engine.pull``),
    not an implementation of this hook: it always runs for TAG subscriptions
    naming tags and cannot be disabled. The hook is called only when some
    plugin implements it, so pulls pay nothing for it otherwise.
    """


@hookspec
def rmqk_consume_message_before(context: ConsumeMessageContext) -> None:
    """Called just before a listener or sink receives a batch (ConsumeMessageHook).

    ``context.messages`` is the batch about to be consumed. A lite pull consumer,
    which has no listener, calls it for each pull that found messages, followed at
    once by a successful ``after``, as Java 4.9.8's lite pull consumer does. The
    return value is ignored. May be ``async def``. Exceptions are logged and
    swallowed.
    """


@hookspec
def rmqk_consume_message_after(context: ConsumeMessageContext) -> None:
    """Called just after a listener or sink returned for a batch (ConsumeMessageHook).

    ``context.status``, ``success``, ``return_type``, ``duration_ms`` and
    ``exception`` are filled in. The return value is ignored. May be
    ``async def``. Exceptions are logged and swallowed.
    """


@hookspec
def rmqk_send_message_before(context: SendMessageContext) -> None:
    """Called before each attempt of a producer's send goes to a broker (SendMessageHook).

    ``context`` names the producer group, the queue and broker address chosen,
    the message's topic and properties and the communication mode. Called only
    when some plugin implements a send hook, so sends pay nothing otherwise. The
    return value is ignored. May be ``async def``. Exceptions are logged and
    swallowed.
    """


@hookspec
def rmqk_send_message_after(context: SendMessageContext) -> None:
    """Called after each send attempt got its answer or failed (SendMessageHook).

    ``context.send_result`` (None for a oneway send) or ``context.exception`` is
    filled in; the ``context`` is the one the ``before`` hook saw. The return
    value is ignored. May be ``async def``. Exceptions are logged and swallowed.
    """


@hookspec
def rmqk_client_started(context: ClientContext) -> None:
    """Called when a push consumer, lite pull consumer or producer has started.

    For a consumer, before its first rebalance, so nothing has been consumed yet.
    ``context`` is a :class:`rmqk.spi.contexts.ClientContext` (role, wire group, name
    servers, options): a plugin acting on a client option (the ``trace`` plugin
    on ``enable_msg_trace``) sets itself up here. The return value is ignored.
    May be ``async def``; the start waits for it. Exceptions are logged and
    swallowed: a failing plugin does not stop the client.
    """


@hookspec
def rmqk_client_shutdown(context: ClientContext) -> None:
    """Called when a client that ``rmqk_client_started`` announced has shut down.

    For a push consumer, after its consume service stopped, so no consume hook
    runs for it afterwards: a plugin flushes what it holds for that client here.
    ``context`` is equal to the one the start announced. The return value is
    ignored. May be ``async def``; the shutdown waits for it. Exceptions are
    logged and swallowed.
    """


@hookspec
def rmqk_before_request(address: str, request: RemotingCommand) -> None:
    """Called before every request the transport sends (RPCHook.doBeforeRequest).

    Also called for requests the broker sends to the client, before they are
    handled. Implementations may add or change ``request.ext_fields`` (the ``acl``
    plugin signs here). The return value is ignored. Sync only: it runs in the
    transport's write path. Exceptions propagate and fail the request.
    """


@hookspec
def rmqk_after_response(
    address: str, request: RemotingCommand, response: RemotingCommand | None
) -> None:
    """Called after the response to a request arrived (RPCHook.doAfterResponse).

    Called for synchronous calls and for broker-pushed requests, as Java does;
    ``response`` is None for a oneway call. The return value is ignored. Sync
    only. Exceptions propagate.
    """


@hookspec
def rmqk_queues_changed(
    consumer: ConsumerView,
    topic: str,
    all_queues: Collection[MessageQueue],
    assigned: Sequence[MessageQueue],
) -> None:
    """Called after a rebalance changed the queues a consumer holds for a topic.

    ``consumer`` is the push or lite pull consumer, seen through the read-only
    :class:`rmqk.spi.contexts.ConsumerView` (group, client id, message model, state);
    ``all_queues`` every readable queue of
    the topic; ``assigned`` what this consumer now holds (Java's
    MessageQueueListener.messageQueueChanged). The return value is ignored. May
    be ``async def``. Exceptions are logged and swallowed.
    """


@hookspec
def rmqk_check_config(config: Mapping[str, Any]) -> None:
    """Check a plugin's own tables of the config file, acting on nothing.

    Called by ``rmqk check``, and by ``rmqk run`` before ``rmqk_configure``, with
    the TOML document as a read-only mapping. An implementation raises
    :class:`rmqk.model.errors.ConfigError` for a bad table (naming the file
    ``"<config>"``: rmqk puts in the path) and keeps and applies nothing, so a
    check leaves no state behind in a process that goes on to run consumers
    (pytest separates ``pytest_addoption`` from ``pytest_configure`` alike). Every
    implementation runs; their problems are reported together. The return value
    is ignored. Sync only.
    """


@hookspec(historic=True)
def rmqk_configure(config: Mapping[str, Any]) -> None:
    """Give plugins the whole parsed config file, so they can read their own tables
    and act on them.

    Called by ``rmqk run`` (not by ``rmqk check``) once ``rmqk_check_config``
    found no problem. Historic: a plugin registered after the call still receives
    it. ``config`` is the TOML document as a read-only mapping. The return value
    is ignored. Sync only.
    """
