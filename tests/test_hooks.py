"""Each hook, exercised through the real plugin manager.

End-to-end uses of the event hooks by the engine and the transport are tested beside
those components; here each hook is checked for the contract docs/hooks.md states.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk import hookimpl
from rmqk.app import cli
from rmqk.model import MessageModel, MessageQueue
from rmqk.model.errors import ConfigError, PluginError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import (
    call_event_hook,
    registries,
)
from rmqk.spi.contexts import ConsumeMessageContext, FilterMessageContext
from rmqk.spi.contracts import AllocationStrategyContext, OffsetStoreContext, SinkContext
from rmqk.spi.factory import PluginFactory
from rmqk.spi.options import OptionSpec, OptionType
from rmqk.spi.transport import TransportConfig

MQ = MessageQueue("T", "broker-a", 0)


def _msg(offset: int, keys: str | None = None) -> MessageExt:
    props = {"KEYS": keys} if keys else {}
    return MessageExt(topic="T", body=b"x", queue_offset=offset, properties=props)


class Strategy:
    name = "EVERY_OTHER"

    def __init__(self, step: int = 2) -> None:
        self.step = step

    def allocate(self, group: str, current_cid: str, mq_all: Any, cid_all: Any) -> list[Any]:
        return list(mq_all)[cid_all.index(current_cid) :: self.step]


STEP = OptionSpec("step", OptionType.INT, "Every how many queues.", 2, minimum=1)


def test_hook_rmqk_register_allocation_strategies(pm: Any) -> None:
    class Plugin:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register(
                PluginFactory(
                    "EVERY_OTHER",
                    lambda context, options: Strategy(options["step"]),
                    options=[STEP],
                )
            )

    pm.register(Plugin(), name="every-other")
    reg = registries().allocation_strategies
    strategy = reg.create("EVERY_OTHER", AllocationStrategyContext("g"), {"step": 2})
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    assert strategy.allocate("g", "c2", mqs, ["c1", "c2"]) == [mqs[1], mqs[3]]
    assert reg.entry("EVERY_OTHER").plugin == "every-other"
    with pytest.raises(PluginError, match=r"unknown allocation strategy 'NOPE'.*EVERY_OTHER"):
        reg.get("NOPE")


def test_duplicate_names_name_both_plugins(pm: Any) -> None:
    class A:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register(PluginFactory("SAME", lambda context, options: Strategy()))

    class B:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register(PluginFactory("SAME", lambda context, options: Strategy()))

    pm.register(A(), name="plugin-a")
    pm.register(B(), name="plugin-b")
    with pytest.raises(PluginError) as info:
        registries()
    assert "'SAME'" in str(info.value)
    assert "plugin-a" in str(info.value) and "plugin-b" in str(info.value)


def test_register_rejects_a_non_callable_factory(pm: Any) -> None:
    class Bad:
        @hookimpl
        def rmqk_register_sinks(self, register: Any) -> None:
            register("broken", 42)

    pm.register(Bad(), name="bad")
    with pytest.raises(
        PluginError,
        match=r"sink .broken. with 42, which is not an rmqk.spi.factory.PluginFactory",
    ):
        registries()


def _check_registration(pm: Any, hook: str, attribute: str, kind: str) -> None:
    made: list[tuple[Any, ...]] = []

    def factory(context: Any, options: Any) -> str:
        made.append((context, dict(options)))
        return f"{kind}-instance"

    name = f"custom-{attribute}"
    plugin = SimpleNamespace()
    setattr(plugin, hook, hookimpl(lambda register: register(PluginFactory(name, factory, [STEP]))))
    pm.register(plugin, name=name)
    reg = getattr(registries(), attribute)
    assert reg.kind == kind
    assert name in reg.names()
    # One contract for every kind: factory(context, options), the options checked and resolved.
    assert reg.create(name, "context", {"step": 3}) == f"{kind}-instance"
    assert reg.create(name, "context") == f"{kind}-instance"
    assert made == [("context", {"step": 3}), ("context", {"step": 2})]
    with pytest.raises(ConfigError) as info:
        reg.create(name, "context", {"stpe": 3, "step": 0})
    assert [(p.key, p.message.split(":")[0]) for p in info.value.problems] == [
        ("stpe", reg.label.format(name=name)),
        ("step", reg.label.format(name=name)),
    ]
    assert "did you mean 'step'" in info.value.problems[0].message
    assert len(made) == 2  # refused before the factory is called
    with pytest.raises(
        PluginError, match=rf"unknown {kind} 'missing'; registered: .*custom-{attribute}"
    ):
        reg.get("missing")


def test_hook_rmqk_register_offset_stores(pm: Any) -> None:
    _check_registration(pm, "rmqk_register_offset_stores", "offset_stores", "offset store")


def test_hook_rmqk_register_transports(pm: Any) -> None:
    _check_registration(pm, "rmqk_register_transports", "transports", "transport")


def test_hook_rmqk_register_consume_services(pm: Any) -> None:
    _check_registration(pm, "rmqk_register_consume_services", "consume_services", "consume service")


def test_hook_rmqk_register_sinks(pm: Any) -> None:
    _check_registration(pm, "rmqk_register_sinks", "sinks", "sink")


def _old_factories(made: list[Any]) -> list[Any]:
    """A bare factory of each kind in its form before the one contract, and how it is called."""

    def strategy(**options: Any) -> str:
        made.append(options)
        return "strategy"

    def store(context: Any) -> str:
        made.append(context)
        return "store"

    def transport(config: Any, hook: Any) -> str:
        made.append((config, hook))
        return "transport"

    def service(host: Any, options: Any) -> str:
        made.append((host, dict(options)))
        return "service"

    service.option_specs = [STEP]  # type: ignore[attr-defined]

    def sink(options: Any) -> str:
        made.append(dict(options))
        return "sink"

    store_context = OffsetStoreContext("g", "c", MessageModel.CLUSTERING, options={"ttl": 1})
    config = TransportConfig(("127.0.0.1:1",), hook="the hook relay")
    return [
        ("rmqk_register_allocation_strategies", "allocation_strategies", "factory(**options)",
         strategy, AllocationStrategyContext("g"), {"step": 5}, {"step": 5}),
        ("rmqk_register_offset_stores", "offset_stores", "factory(context)",
         store, store_context, {"ttl": 1}, store_context),
        ("rmqk_register_transports", "transports", "factory(config, hook)",
         transport, config, {}, (config, "the hook relay")),
        ("rmqk_register_consume_services", "consume_services", "factory(host, options)",
         service, "host", {}, ("host", {"step": 2})),
        ("rmqk_register_sinks", "sinks", "factory(options)",
         sink, SinkContext(), {"path": "x"}, {"path": "x"}),
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(5))
def test_a_bare_factory_of_the_old_form_works_for_one_release_with_a_warning(
    pm: Any, index: int
) -> None:
    made: list[Any] = []
    hook, attribute, old_form, factory, context, options, call = _old_factories(made)[index]
    plugin = SimpleNamespace()
    setattr(plugin, hook, hookimpl(lambda register: register("old", factory)))
    pm.register(plugin, name="old-plugin")
    with pytest.warns(DeprecationWarning) as warned:
        reg = getattr(registries(), attribute)
    (message,) = [str(w.message) for w in warned]
    assert f"plugin 'old-plugin' registers {reg.kind} 'old' as a bare factory" in message
    assert old_form in message
    assert "PluginFactory('old', factory, options=" in message
    assert "factory(context, options)" in message
    assert reg.create("old", context, options) == factory.__name__
    assert made == [call]


def test_an_old_consume_service_still_has_its_options_checked(pm: Any) -> None:
    made: list[Any] = []
    _, _, _, factory, _, _, _ = _old_factories(made)[3]
    plugin = SimpleNamespace(
        rmqk_register_consume_services=hookimpl(lambda register: register("old", factory))
    )
    pm.register(plugin, name="old-plugin")
    with pytest.warns(DeprecationWarning):
        reg = registries().consume_services
    with pytest.raises(ConfigError, match=r"consume service 'old': unknown option"):
        reg.create("old", "host", {"stp": 1})
    assert made == []


def test_a_plugin_factory_registered_under_another_name_is_refused(pm: Any) -> None:
    factory = PluginFactory("mine", lambda context, options: None)
    plugin = SimpleNamespace(
        rmqk_register_sinks=hookimpl(lambda register: register("yours", factory))
    )
    pm.register(plugin, name="misnamed")
    with pytest.raises(PluginError, match=r"registered sink 'mine' under the name 'yours'"):
        registries()


def test_hook_rmqk_register_commands(pm: Any, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[str] = []

    def add_arguments(parser: Any) -> None:
        parser.add_argument("--who", default="world")

    def run(args: Any) -> int:
        seen.append(args.who)
        print(f"hello {args.who}")
        return 7

    class Plugin:
        @hookimpl
        def rmqk_register_commands(self, register: Any) -> None:
            register(
                "hello",
                cli.Command(
                    help="say hello",
                    run=run,
                    add_arguments=add_arguments,
                    examples=("rmqk hello --who you",),
                ),
            )

    pm.register(Plugin(), name="hello-plugin")
    assert cli.main(["hello", "--who", "rmqk"]) == 7
    assert seen == ["rmqk"]
    assert "hello rmqk" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["hello", "--help"])
    assert "rmqk hello --who you" in capsys.readouterr().out


def test_a_plugin_command_may_not_shadow_a_builtin(
    pm: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    class Plugin:
        @hookimpl
        def rmqk_register_commands(self, register: Any) -> None:
            register("check", cli.Command(help="evil", run=lambda args: 0))

    pm.register(Plugin(), name="evil")
    assert cli.main(["plugins"]) == 1
    assert "clashes with a built-in command" in capsys.readouterr().err


async def test_hook_rmqk_filter_message(pm: Any) -> None:
    calls: list[str] = []

    class SyncFilter:
        @hookimpl
        def rmqk_filter_message(self, context: FilterMessageContext) -> None:
            calls.append("sync")
            context.messages[:] = [m for m in context.messages if m.keys != "drop"]

    class AsyncFilter:
        @hookimpl
        async def rmqk_filter_message(self, context: FilterMessageContext) -> None:
            await asyncio.sleep(0)
            calls.append("async")
            context.messages.reverse()

    class Broken:
        @hookimpl
        def rmqk_filter_message(self, context: FilterMessageContext) -> None:
            calls.append("broken")
            raise RuntimeError("a failing filter must not stop the others")

    pm.register(SyncFilter(), name="sync")
    pm.register(Broken(), name="broken")
    pm.register(AsyncFilter(), name="async")
    ctx = FilterMessageContext("g", MQ, [_msg(0), _msg(1, "drop"), _msg(2)])
    await call_event_hook("rmqk_filter_message", context=ctx)
    # pluggy's order (last registered first); all ran despite the failure in the middle.
    assert calls == ["async", "broken", "sync"]
    assert [m.queue_offset for m in ctx.messages] == [2, 0]


async def test_filter_hook_is_skipped_for_star_only_when_every_filter_is_tags_only(
    pm: Any,
) -> None:
    from rmqk.engine.pull import filter_pulled
    from rmqk.model import build_subscription

    star = build_subscription("T", "*")
    named = build_subscription("T", "a || b")
    msgs = [_msg(0), _msg(1)]
    msgs[0]._props = {"TAGS": "a"}
    msgs[1]._props = {"TAGS": "c"}
    # No plugin implements the hook: the pull path's exact-tag step narrows on its own.
    narrowed = await filter_pulled("g", MQ, named, list(msgs), False)
    assert [m.queue_offset for m in narrowed] == [0]
    assert await filter_pulled("g", MQ, star, msgs, False) is msgs  # not even called

    seen: list[int] = []

    class Counting:
        @hookimpl
        def rmqk_filter_message(self, context: FilterMessageContext) -> None:
            seen.append(len(context.messages))

    pm.register(Counting(), name="counting")
    assert len(await filter_pulled("g", MQ, star, msgs, False)) == 2
    assert seen == [2]  # a filter without the attribute runs for '*' too


async def test_exact_tag_refilter_is_an_engine_step_before_filter_hooks(pm: Any) -> None:
    from rmqk.engine.pull import filter_pulled
    from rmqk.model import build_subscription

    named = build_subscription("T", "a || b")
    msgs = [_msg(0), _msg(1), _msg(2)]
    for m, tag in zip(msgs, ("a", "c", "b"), strict=True):
        m._props = {"TAGS": tag}
    seen: list[list[int]] = []

    class Recording:
        @hookimpl(tryfirst=True)
        def rmqk_filter_message(self, context: FilterMessageContext) -> None:
            seen.append([m.queue_offset for m in context.messages])

    pm.register(Recording(), name="recording")
    kept = await filter_pulled("g", MQ, named, list(msgs), False)
    # Even a tryfirst hook sees only exact tag matches: the re-filter is not a hook.
    assert seen == [[0, 2]]
    assert [m.queue_offset for m in kept] == [0, 2]


async def test_hook_rmqk_consume_message_before(pm: Any) -> None:
    seen: list[int] = []

    class Plugin:
        @hookimpl
        async def rmqk_consume_message_before(self, context: ConsumeMessageContext) -> None:
            seen.extend(m.queue_offset for m in context.messages)
            context.props["traced"] = "yes"

    pm.register(Plugin(), name="tracer")
    ctx = ConsumeMessageContext("g", MQ, [_msg(5), _msg(6)])
    await call_event_hook("rmqk_consume_message_before", context=ctx)
    assert seen == [5, 6]
    assert ctx.props == {"traced": "yes"}


async def test_hook_rmqk_consume_message_after(pm: Any) -> None:
    statuses: list[tuple[str | None, bool]] = []

    class Plugin:
        @hookimpl
        def rmqk_consume_message_after(self, context: ConsumeMessageContext) -> None:
            statuses.append((context.status, context.success))

    pm.register(Plugin(), name="metrics")
    ctx = ConsumeMessageContext("g", MQ, [_msg(1)], status="RECONSUME_LATER", success=False)
    await call_event_hook("rmqk_consume_message_after", context=ctx)
    assert statuses == [("RECONSUME_LATER", False)]


async def test_rpc_hooks_propagate_errors_when_not_swallowed(pm: Any) -> None:
    class Plugin:
        @hookimpl
        def rmqk_queues_changed(
            self, consumer: Any, topic: str, all_queues: Any, assigned: Any
        ) -> None:
            raise ValueError("boom")

    pm.register(Plugin(), name="strict")
    with pytest.raises(ValueError, match="boom"):
        await call_event_hook(
            "rmqk_queues_changed",
            swallow=False,
            consumer=None,
            topic="T",
            all_queues=[],
            assigned=[],
        )


async def test_hook_rmqk_queues_changed(pm: Any) -> None:
    got: list[tuple[str, int, list[MessageQueue]]] = []

    class Listener:
        @hookimpl
        async def rmqk_queues_changed(
            self, consumer: Any, topic: str, all_queues: Any, assigned: Any
        ) -> None:
            got.append((topic, len(all_queues), list(assigned)))

    pm.register(Listener(), name="listener")
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    await call_event_hook(
        "rmqk_queues_changed", consumer=object(), topic="T", all_queues=mqs, assigned=mqs[:2]
    )
    assert got == [("T", 4, mqs[:2])]


def test_hook_rmqk_configure(pm: Any) -> None:
    seen: list[Any] = []

    class Early:
        @hookimpl
        def rmqk_configure(self, config: Any) -> None:
            seen.append(("early", config["my_plugin"]["colour"]))

    class Late:
        @hookimpl
        def rmqk_configure(self, config: Any) -> None:
            seen.append(("late", config["my_plugin"]["colour"]))

    pm.register(Early(), name="early")
    pm.hook.rmqk_configure.call_historic(kwargs={"config": {"my_plugin": {"colour": "AK"}}})
    pm.register(Late(), name="late")  # historic: still receives the earlier call
    assert seen == [("early", "AK"), ("late", "AK")]


def test_hook_rmqk_check_config(pm: Any, tmp_path: Any) -> None:
    """Every plugin checks its table, problems are reported together, nothing is applied."""
    from rmqk.app.config import Config, check_config_tables
    from rmqk.model.errors import ConfigError, ConfigProblem

    checked: list[str] = []

    class Strict:
        @hookimpl
        def rmqk_check_config(self, config: Any) -> None:
            checked.append("strict")
            if config["my_plugin"]["colour"] != "red":
                raise ConfigError([ConfigProblem("<config>", "my_plugin", "colour", "not red")])

    class Other:
        @hookimpl
        def rmqk_check_config(self, config: Any) -> None:
            checked.append("other")
            raise ConfigError([ConfigProblem("<config>", "other", "size", "too big")])

    pm.register(Strict(), name="strict")
    pm.register(Other(), name="other")
    path = str(tmp_path / "c.toml")
    config = Config(path, (), {"my_plugin": {"colour": "AK"}})
    problems = check_config_tables(config)
    assert sorted(checked) == ["other", "strict"]
    assert sorted(str(p) for p in problems) == [
        f"{path}: [my_plugin] colour: not red",
        f"{path}: [other] size: too big",
    ]


def test_the_registration_snippet_of_docs_hooks_works_as_written(pm: Any) -> None:
    """docs/hooks.md "One contract for every kind of plugin": its sink, registered as shown,
    is built with its options checked and resolved, and a bad table is refused."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "hooks.md").read_text()
    (block,) = [
        b for b in re.findall(r"^```python\n(.*?)^```", page, re.M | re.S) if "StdoutOptions" in b
    ]

    class StdoutSink:  # the sink the page leaves to the reader
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

    namespace: dict[str, Any] = {"StdoutSink": StdoutSink}
    exec(compile(block, "docs/hooks.md", "exec"), namespace)
    pm.register(SimpleNamespace(rmqk_register_sinks=namespace["rmqk_register_sinks"]), name="doc")
    sinks = registries().sinks
    assert sinks.create("stdout", SinkContext(), {"prefix": "> "}).prefix == "> "
    assert sinks.create("stdout", SinkContext()).prefix == ""
    with pytest.raises(ConfigError) as info:
        sinks.create("stdout", SinkContext(), {"prefx": "> "})
    (problem,) = info.value.problems
    assert (problem.table, problem.key) == ("sink_options", "prefx")
    assert "stdout: " in problem.message and "did you mean 'prefix'" in problem.message
