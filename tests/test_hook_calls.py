"""Hooks go through pluggy: wrappers, monitoring, tracing and unknown hook names."""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from types import ModuleType
from typing import Any

import pluggy
import pytest

from rmqk import hookimpl, pluginmanager
from rmqk.hookcalls import all_idle, idle_when
from rmqk.model import MessageModel, MessageQueue, ServiceState
from rmqk.model.errors import PluginError
from rmqk.pluginmanager import (
    call_event_hook,
    get_plugin_manager,
    registries,
    reset_plugin_manager,
)
from rmqk.spi.contexts import ConsumeMessageContext, ConsumerView
from rmqk.spi.factory import PluginFactory

MQ = MessageQueue("T", "broker-a", 0)


def test_a_wrapper_surrounds_the_registrations_and_may_register_too(pm: Any) -> None:
    order: list[str] = []

    class Plain:
        @hookimpl
        def rmqk_register_sinks(self, register: Any) -> None:
            order.append("plain")
            register(PluginFactory("plain-sink", lambda context, options: {}))

    class Wrapper:
        @hookimpl(wrapper=True)
        def rmqk_register_sinks(self, register: Any) -> Generator[None, Any, Any]:
            order.append("before")
            register(PluginFactory("wrapped-sink", lambda context, options: {}))
            result = yield
            order.append("after")
            return result

    pm.register(Plain(), name="plain")
    pm.register(Wrapper(), name="wrapper")
    sinks = registries().sinks
    assert order[0] == "before" and order[-1] == "after" and "plain" in order
    assert sinks.entry("wrapped-sink").plugin == "wrapper"
    assert sinks.entry("plain-sink").plugin == "plain"


def test_a_wrapper_on_an_rpc_hook_runs_around_it(pm: Any) -> None:
    seen: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def rmqk_before_request(self, address: str, request: Any) -> Generator[None, Any, Any]:
            seen.append(f"before {address}")
            result = yield
            seen.append("after")
            return result

    pm.register(Wrapper(), name="rpc-wrapper")
    pm.hook.rmqk_before_request(address="1.2.3.4:10911", request=None)
    assert seen == ["before 1.2.3.4:10911", "after"]


@pytest.mark.parametrize("style", ["wrapper", "hookwrapper"])
def test_a_wrapper_on_an_awaited_hook_is_refused_naming_plugin_and_hook(
    pm: Any, style: str
) -> None:
    class Wrapper:
        @hookimpl(**{style: True})
        def rmqk_consume_message_before(self, context: Any) -> Generator[None, Any, Any]:
            yield

    plugin = Wrapper()
    with pytest.raises(PluginError) as info:
        pm.register(plugin, name="timing")
    assert "'timing'" in str(info.value)
    assert "rmqk_consume_message_before" in str(info.value)
    assert "tryfirst" in str(info.value)
    assert not pm.is_registered(plugin)


def test_an_async_registration_hook_is_refused(pm: Any) -> None:
    class Async:
        @hookimpl
        async def rmqk_register_sinks(self, register: Any) -> None:
            register(PluginFactory("never", lambda context, options: {}))

    with pytest.raises(PluginError, match=r"'async-reg'.*rmqk_register_sinks.*plain functions"):
        pm.register(Async(), name="async-reg")


def _entry_point_plugin(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
    """Make ``module`` look like an installed entry point of group rmqk."""
    monkeypatch.setitem(sys.modules, module.__name__, module)

    class Dist:
        metadata = {"name": "misspelt-dist"}
        version = "1.0"
        entry_points = [
            pluginmanager.importlib.metadata.EntryPoint(
                name="misspelt", value=module.__name__, group="rmqk"
            )
        ]

    real = pluginmanager.importlib.metadata.distributions

    def distributions() -> Iterator[Any]:
        yield from real()
        yield Dist()

    monkeypatch.setattr(pluginmanager.importlib.metadata, "distributions", distributions)


def test_a_misspelt_hook_name_fails_at_load_naming_plugin_and_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = ModuleType("rmqk_test_misspelt_plugin")

    @hookimpl
    def rmqk_register_sink(register: Any) -> None:
        register(PluginFactory("lost", lambda context, options: {}))

    module.rmqk_register_sink = rmqk_register_sink  # type: ignore[attr-defined]
    _entry_point_plugin(monkeypatch, module)
    reset_plugin_manager()
    try:
        with pytest.raises(PluginError) as info:
            get_plugin_manager()
    finally:
        reset_plugin_manager()
    text = str(info.value)
    assert "'misspelt'" in text
    assert "'rmqk_register_sink'" in text
    assert "did you mean 'rmqk_register_sinks'" in text


def test_an_optional_unknown_hook_is_allowed(pm: Any) -> None:
    class Optional:
        @hookimpl(optionalhook=True)
        def rmqk_some_future_hook(self) -> None: ...

    pm.register(Optional(), name="optional")
    pm.check_pending()


async def test_hookcall_monitoring_sees_event_and_registration_calls(pm: Any) -> None:
    calls: list[tuple[str, list[str], dict[str, object]]] = []

    def before(name: str, impls: Any, kwargs: Any) -> None:
        calls.append((name, [impl.plugin_name for impl in impls], dict(kwargs)))

    def after(outcome: Any, name: str, impls: Any, kwargs: Any) -> None:
        pass

    class Plugin:
        @hookimpl
        async def rmqk_consume_message_after(self, context: ConsumeMessageContext) -> None:
            context.props["seen"] = "yes"

    pm.register(Plugin(), name="monitored")
    undo = pm.add_hookcall_monitoring(before, after)
    try:
        ctx = ConsumeMessageContext("g", MQ, [])
        await call_event_hook("rmqk_consume_message_after", context=ctx)
        registries()
    finally:
        undo()
    assert ctx.props == {"seen": "yes"}
    assert ("rmqk_consume_message_after", ["monitored"], {"context": ctx}) in calls
    assert "rmqk_register_allocation_strategies" in [name for name, _, _ in calls]


async def test_enable_tracing_sees_calls(pm: Any) -> None:
    lines: list[str] = []
    pm.trace.root.setwriter(lines.append)
    undo = pm.enable_tracing()
    try:
        await call_event_hook(
            "rmqk_consume_message_before", context=ConsumeMessageContext("g", MQ, [])
        )
    finally:
        undo()
    assert any("rmqk_consume_message_before" in line for line in lines)


async def test_rmqk_trace_plugins_prints_each_call_with_plugins_and_args(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RMQK_TRACE_PLUGINS", "1")
    reset_plugin_manager()
    try:

        class Plugin:
            @hookimpl
            def rmqk_consume_message_before(self, context: ConsumeMessageContext) -> None: ...

        get_plugin_manager().register(Plugin(), name="traced-plugin")
        ctx = ConsumeMessageContext("traced-group", MQ, [])
        await call_event_hook("rmqk_consume_message_before", context=ctx)
    finally:
        reset_plugin_manager()
    err = capsys.readouterr().err
    assert "rmqk_consume_message_before" in err
    assert "traced-plugin" in err
    assert "context=ConsumeMessageContext(consumer_group='traced-group'" in err


def test_no_tracing_without_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RMQK_TRACE_PLUGINS", raising=False)
    reset_plugin_manager()
    try:
        registries()
    finally:
        reset_plugin_manager()
    assert "rmqk hook" not in capsys.readouterr().err


async def test_a_sync_impl_that_raises_does_not_stop_the_others(pm: Any) -> None:
    ran: list[str] = []

    class First:
        @hookimpl(tryfirst=True)
        def rmqk_queues_changed(
            self, consumer: Any, topic: str, all_queues: Any, assigned: Any
        ) -> None:
            ran.append("first")
            raise RuntimeError("first fails")

    class Last:
        @hookimpl(trylast=True)
        def rmqk_queues_changed(
            self, consumer: Any, topic: str, all_queues: Any, assigned: Any
        ) -> None:
            ran.append("last")

    pm.register(Last(), name="last")
    pm.register(First(), name="first")
    await call_event_hook(
        "rmqk_queues_changed", consumer=None, topic="T", all_queues=[], assigned=[]
    )
    assert ran == ["first", "last"]


def test_results_of_a_direct_awaited_hook_call_are_awaitable(pm: Any) -> None:
    """A caller using pm.hook directly (datasette style) awaits each result."""
    import asyncio

    class Plugin:
        @hookimpl
        def rmqk_consume_message_before(self, context: ConsumeMessageContext) -> None:
            context.props["ran"] = "1"

    pm.register(Plugin(), name="direct")
    ctx = ConsumeMessageContext("g", MQ, [])

    async def main() -> None:
        for result in pm.hook.rmqk_consume_message_before(context=ctx):
            await pluginmanager.await_me_maybe(result)

    asyncio.run(main())
    assert ctx.props == {"ran": "1"}


def test_registration_with_a_plain_pluggy_manager_still_works() -> None:
    plain = pluggy.PluginManager("rmqk")
    plain.add_hookspecs(pluginmanager.hookspecs)

    class Plugin:
        @hookimpl
        def rmqk_register_sinks(self, register: Any) -> None:
            register(PluginFactory("s", lambda context, options: {}))

    plain.register(Plugin(), name="p")
    assert pluginmanager.Registries(plain).sinks.names() == ["s"]


class _View:
    group = "g"
    client_id = "c"
    message_model = MessageModel.CLUSTERING
    state = ServiceState.RUNNING


def test_consumer_view_is_what_both_consumers_offer() -> None:
    from rmqk.engine.consumer import AsyncPushConsumer
    from rmqk.engine.lite_pull import AsyncLitePullConsumer

    assert isinstance(_View(), ConsumerView)
    for cls in (AsyncPushConsumer, AsyncLitePullConsumer):
        consumer = cls("view-group")
        consumer.client_id = "cid"  # set when the consumer starts
        assert isinstance(consumer, ConsumerView), cls


def test_all_idle_skips_only_implementations_marked_and_idle(pm: Any) -> None:
    caller = pm.hook.rmqk_after_response
    assert all_idle(caller)  # nothing implements it
    quiet = {"idle": True}

    class Marked:
        @hookimpl
        @idle_when(lambda: quiet["idle"])
        def rmqk_after_response(self, address: str, request: Any, response: Any) -> None:
            pass

    pm.register(Marked(), name="marked")
    assert all_idle(caller)
    quiet["idle"] = False
    assert not all_idle(caller)
    quiet["idle"] = True

    class Unmarked:
        @hookimpl
        def rmqk_after_response(self, address: str, request: Any, response: Any) -> None:
            pass

    pm.register(Unmarked(), name="unmarked")
    assert not all_idle(caller)
    pm.unregister(name="unmarked")
    assert all_idle(caller)
