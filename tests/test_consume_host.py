"""The consume-service contract: options reach the factory checked, the host adapts the consumer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from rmqk.engine.consume_host import PushConsumeHost, create_consume_service
from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.process_queue import ProcessQueue
from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions, OptionSpec, OptionType
from rmqk.pluginmanager import registries
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.consume.orderly import MAX_TIME_CONSUME_CONTINUOUSLY_MS, OrderlyConsumeService
from rmqk.spi.factory import PluginFactory

SPECS = (
    OptionSpec(name="size", value_type=OptionType.INT, doc="", default=4, minimum=1, maximum=9),
    OptionSpec(name="fast", value_type=OptionType.BOOL, doc="", default=False),
)
MQ = MessageQueue("T", "b", 0)


def parse_service_options(service: str, raw: dict[str, Any], specs: Any) -> Any:
    """A service's options as the kernel checks them, for every kind the same way."""
    where = registries().consume_services.where(service)
    options, problems = PluginFactory(service, lambda host, o: None, specs).parse_options(
        raw, where
    )
    if problems:
        raise ConfigError(problems)
    return options


def test_parsed_options_hold_every_declared_option_read_only() -> None:
    options = parse_service_options("svc", {"size": 9}, SPECS)
    assert dict(options) == {"size": 9, "fast": False}
    with pytest.raises(TypeError):
        options["size"] = 1  # type: ignore[index]


def test_every_bad_key_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_service_options("svc", {"sise": 1, "fast": "yes", "size": 10}, SPECS)
    problems = {p.key: p.message for p in info.value.problems}
    assert set(problems) == {"sise", "fast", "size"}
    assert all(p.table == "consume_service_options" for p in info.value.problems)
    assert "did you mean 'size'" in problems["sise"]
    assert "must be true or false" in problems["fast"]
    assert "Out of range [1, 9], got 10" in problems["size"]
    assert all(m.startswith("consume service 'svc': ") for m in problems.values())


def test_a_service_without_option_specs_takes_no_options() -> None:
    assert PluginFactory("x", lambda host, options: None).option_specs == ()
    concurrent = registries().consume_services.get("concurrent")
    assert concurrent.factory is ConcurrentConsumeService
    assert concurrent.option_specs == ()
    assert parse_service_options("concurrent", {}, ()) == {}
    with pytest.raises(ConfigError, match="unknown option; allowed: no options"):
        parse_service_options("concurrent", {"workers": 3}, ())


def _consumer(**options: Any) -> Any:
    return SimpleNamespace(options=ConsumerOptions(**options))


async def test_the_orderly_option_reaches_the_service() -> None:
    service = create_consume_service(
        _consumer(consume_service_options={"max_time_consume_continuously_ms": 5}), "orderly"
    )
    assert isinstance(service, OrderlyConsumeService)
    assert service.max_time_consume_continuously_ms == 5
    default = create_consume_service(_consumer(), "orderly")
    assert isinstance(default, OrderlyConsumeService)
    assert default.max_time_consume_continuously_ms == MAX_TIME_CONSUME_CONTINUOUSLY_MS


async def test_the_concurrent_service_rejects_options_when_the_consumer_starts() -> None:
    consumer = AsyncPushConsumer(
        "g-host", namesrv_addr="127.0.0.1:9", consume_service_options={"workers": 3}
    )
    consumer.subscribe("T")
    consumer.register_listener(lambda msgs: None)
    with pytest.raises(ConfigError, match=r"\[consume_service_options\] workers: .*no options"):
        await consumer.start()


class _Store:
    def __init__(self) -> None:
        self.updates: list[tuple[MessageQueue, int, bool]] = []

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.updates.append((mq, offset, increase_only))


def _held(pq: ProcessQueue, *offsets: int) -> list[MessageExt]:
    msgs = [MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=o) for o in offsets]
    pq.put_messages(msgs)
    return msgs


async def test_the_host_acknowledges_and_commits_only_live_queues() -> None:
    store = _Store()
    host = PushConsumeHost(
        SimpleNamespace(offset_store=store),  # type: ignore[arg-type]
        asyncio.get_running_loop(),
    )
    pq = ProcessQueue()
    msgs = _held(pq, 5, 6, 7)
    assert host.acknowledge(MQ, pq, msgs[1:]) == 5  # offset 5 is still in flight
    assert host.acknowledge(MQ, pq, msgs[:1]) == 8
    assert store.updates == [(MQ, 5, True), (MQ, 8, True)]
    host.update_offset(MQ, pq, -1)
    assert len(store.updates) == 2
    host.update_offset(MQ, pq, 9)
    assert store.updates[-1] == (MQ, 9, False)
    pq.dropped = True
    host.update_offset(MQ, pq, 10)
    dropped_msgs = _held(pq, 11)
    host.acknowledge(MQ, pq, dropped_msgs)
    assert store.updates[-1] == (MQ, 9, False)
