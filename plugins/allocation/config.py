"""CONFIG: a fixed list of queues, whatever the group looks like.

Java's AllocateMessageQueueByConfig returns its configured list unchanged and
runs none of the common input checks. Nothing stops two consumers from being
given the same queue, or a queue from being given to nobody: the configs of all
members decide. Like Java, the list is returned for every subscribed topic, so
list only queues of the topic the consumer subscribes.

TOML shape (an array of tables, one per queue)::

    [consumers.orders]
    allocate_message_queue_strategy = "CONFIG"

    [[consumers.orders.allocate_options.queues]]
    topic = "Orders"
    broker_name = "broker-a"
    queue_id = 0

    [[consumers.orders.allocate_options.queues]]
    topic = "Orders"
    broker_name = "broker-a"
    queue_id = 1

Python callers may also pass :class:`rmqk.model.MessageQueue` objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.options import (
    ByConfigOptions,
    option_error,
    parse_strategy_options,
    require_int,
)
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategyContext

__all__ = ["NAME", "AllocateMessageQueueByConfig", "create_by_config"]

NAME = "CONFIG"

_QUEUE_KEYS = ("topic", "broker_name", "queue_id")


def _queue_tuple(queues: Iterable[MessageQueue]) -> tuple[MessageQueue, ...]:
    return tuple(queues)


@attrs.frozen
class AllocateMessageQueueByConfig(JavaStrategy):
    """Java's AllocateMessageQueueByConfig: ``allocate`` ignores its inputs."""

    checks_inputs: ClassVar[bool] = False

    queues: tuple[MessageQueue, ...] = attrs.field(converter=_queue_tuple)

    @property
    def name(self) -> str:
        return NAME

    def divide(self, share: Share) -> list[MessageQueue]:
        return list(self.queues)


def create_by_config(**options: Any) -> AllocateMessageQueueByConfig:
    """``CONFIG`` from Python: option ``queues``, a list of ``{topic, broker_name, queue_id}``."""
    return build_by_config(None, parse_strategy_options(NAME, ByConfigOptions, options))


def build_by_config(
    context: AllocationStrategyContext | None, options: ByConfigOptions
) -> AllocateMessageQueueByConfig:
    """The registered factory of ``CONFIG``."""
    raw = options.queues
    if not isinstance(raw, list | tuple):
        raise option_error(
            NAME, "queues", f"must be a list of tables (topic, broker_name, queue_id), got {raw!r}"
        )
    if not raw:
        raise option_error(NAME, "queues", "must list at least one queue")
    queues: list[MessageQueue] = []
    seen: set[MessageQueue] = set()
    for i, item in enumerate(raw):
        mq = _queue(f"queues[{i}]", item)
        if mq in seen:
            raise option_error(NAME, f"queues[{i}]", f"lists {mq} a second time")
        seen.add(mq)
        queues.append(mq)
    return AllocateMessageQueueByConfig(queues)


def _queue(key: str, item: object) -> MessageQueue:
    if isinstance(item, MessageQueue):
        return item
    if not isinstance(item, Mapping):
        raise option_error(
            NAME, key, f"must be a table with keys topic, broker_name, queue_id, got {item!r}"
        )
    unknown = sorted(set(item) - set(_QUEUE_KEYS))
    if unknown:
        raise option_error(
            NAME, f"{key}.{unknown[0]}", "unknown key; allowed: topic, broker_name, queue_id"
        )
    missing = [k for k in _QUEUE_KEYS if k not in item]
    if missing:
        raise option_error(NAME, f"{key}.{missing[0]}", "missing")
    for text_key in ("topic", "broker_name"):
        value = item[text_key]
        if not isinstance(value, str) or not value:
            raise option_error(
                NAME, f"{key}.{text_key}", f"must be a non-empty string, got {value!r}"
            )
    queue_id = require_int(NAME, f"{key}.queue_id", item["queue_id"], minimum=0)
    return MessageQueue(item["topic"], item["broker_name"], queue_id)
