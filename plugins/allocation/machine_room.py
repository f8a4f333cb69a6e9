"""MACHINE_ROOM: only queues of brokers in the consumers' machine rooms, split in blocks.

Java's AllocateMessageQueueByMachineRoom. A broker's room is the part of its name
before ``@`` (``room1@broker-a``); a broker name that does not split into exactly
two parts on ``@`` belongs to no room. The queues of the rooms listed in
``consumer_idcs`` are kept, in order, and consumer i gets the block
``[i * (n // c), (i + 1) * (n // c))`` plus queue ``i + (n // c) * c`` when
``i < n % c``. Queues of other rooms are left to other groups or strategies.

Options (``allocate_options``):

* ``consumer_idcs``: the machine rooms (IDCs) whose queues this group consumes,
  a non-empty list of names (Java's ``consumeridcs``). Every member must list
  the same rooms.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.options import (
    MachineRoomOptions,
    option_error,
    parse_strategy_options,
)
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategyContext

__all__ = [
    "NAME",
    "AllocateMessageQueueByMachineRoom",
    "broker_machine_room",
    "create_by_machine_room",
]

NAME = "MACHINE_ROOM"


def broker_machine_room(broker_name: str) -> str | None:
    """The room in ``room@broker``, split as Java's ``String.split("@")`` does."""
    parts = broker_name.split("@")
    # Java's split drops trailing empty strings, so "room@broker@" still has two parts.
    while parts and not parts[-1]:
        parts.pop()
    return parts[0] if len(parts) == 2 else None


def _room_set(rooms: Iterable[str]) -> frozenset[str]:
    return frozenset(rooms)


@attrs.frozen
class AllocateMessageQueueByMachineRoom(JavaStrategy):
    """Java's AllocateMessageQueueByMachineRoom (see the module docstring)."""

    consumer_idcs: frozenset[str] = attrs.field(converter=_room_set)

    @property
    def name(self) -> str:
        return NAME

    def divide(self, share: Share) -> list[MessageQueue]:
        index = share.index
        in_rooms = [
            mq for mq in share.mq_all if broker_machine_room(mq.broker_name) in self.consumer_idcs
        ]
        consumers = len(share.cid_all)
        per_consumer, remainder = divmod(len(in_rooms), consumers)
        start = per_consumer * index
        result = in_rooms[start : start + per_consumer]
        if remainder > index:
            result.append(in_rooms[index + per_consumer * consumers])
        return result


def create_by_machine_room(**options: Any) -> AllocateMessageQueueByMachineRoom:
    """``MACHINE_ROOM`` from Python: option ``consumer_idcs`` (list of room names)."""
    return build_by_machine_room(None, parse_strategy_options(NAME, MachineRoomOptions, options))


def build_by_machine_room(
    context: AllocationStrategyContext | None, options: MachineRoomOptions
) -> AllocateMessageQueueByMachineRoom:
    """The registered factory of ``MACHINE_ROOM``."""
    rooms = list(options.consumer_idcs)
    if not rooms:
        raise option_error(NAME, "consumer_idcs", "must name at least one machine room")
    return AllocateMessageQueueByMachineRoom(rooms)
