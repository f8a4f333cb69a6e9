"""Each hook, exercised through the real plugin manager.

End-to-end uses of the event hooks by the engine and the transport are tested beside
those components; here each hook is checked for the contract docs/hooks.md states.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk import hookimpl
from rmqk.app import cli
from rmqk.model import MessageQueue
from rmqk.model.errors import PluginError
from rmqk.model.message import MessageExt
from rmqk.pluginmanager import (
    call_event_hook,
    registries,
)
from rmqk.spi.contexts import ConsumeMessageContext, FilterMessageContext

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


def test_hook_rmqk_register_allocation_strategies(pm: Any) -> None:
    class Plugin:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register("EVERY_OTHER", Strategy)

    pm.register(Plugin(), name="every-other")
    reg = registries().allocation_strategies
    strategy = reg.create("EVERY_OTHER", step=2)
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    assert strategy.allocate("g", "c2", mqs, ["c1", "c2"]) == [mqs[1], mqs[3]]
    assert reg.entry("EVERY_OTHER").plugin == "every-other"
    with pytest.raises(PluginError, match=r"unknown allocation strategy 'NOPE'.*EVERY_OTHER"):
        reg.get("NOPE")


def test_duplicate_names_name_both_plugins(pm: Any) -> None:
    class A:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register("SAME", Strategy)

    class B:
        @hookimpl
        def rmqk_register_allocation_strategies(self, register: Any) -> None:
            register("SAME", Strategy)

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
    with pytest.raises(PluginError, match=r"sink 'broken'.*not a callable factory"):
        registries()


def _check_registration(pm: Any, hook: str, attribute: str, kind: str) -> None:
    made: list[tuple[Any, ...]] = []

    def factory(*args: Any) -> str:
        made.append(args)
        return f"{kind}-instance"

    plugin = SimpleNamespace()
    setattr(plugin, hook, hookimpl(lambda register: register(f"custom-{attribute}", factory)))
    pm.register(plugin, name=f"custom-{attribute}")
    reg = getattr(registries(), attribute)
    assert reg.kind == kind
    assert f"custom-{attribute}" in reg.names()
    assert reg.create(f"custom-{attribute}", "arg") == f"{kind}-instance"
    assert made == [("arg",)]
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
