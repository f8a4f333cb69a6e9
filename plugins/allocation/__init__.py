"""rmqk's allocation strategies: the six Java ones, results identical to Java's.

Registered by their Java names (``allocate_message_queue_strategy`` in a
consumer's config; options in its ``allocate_options`` table):

* ``AVG``: AllocateMessageQueueAveragely, the default; no options.
* ``AVG_BY_CIRCLE``: AllocateMessageQueueAveragelyByCircle; no options.
* ``CONSISTENT_HASH``: AllocateMessageQueueConsistentHash; ``virtual_node_count``,
  ``hash_function``.
* ``CONFIG``: AllocateMessageQueueByConfig; ``queues``.
* ``MACHINE_ROOM``: AllocateMessageQueueByMachineRoom; ``consumer_idcs``.
* ``MACHINE_ROOM_NEARBY``: AllocateMachineRoomNearby; ``inner``, ``inner_options``,
  ``broker_room_pattern`` and ``consumer_room_pattern`` or ``resolver``.

Every member of a group, whatever its language, computes its own share from the
same sorted queue and client-id lists, so the strategies follow Apache RocketMQ
4.9's number for number: a Java and a Python member never take the same queue
and never leave one out. Each module's docstring gives its algorithm and options.
"""

from __future__ import annotations

from rmqk.plugins.allocation.average import AllocateMessageQueueAveragely
from rmqk.plugins.allocation.catalog import BUILTIN_FACTORIES, BUILTIN_STRATEGIES
from rmqk.plugins.allocation.circle import AllocateMessageQueueAveragelyByCircle
from rmqk.plugins.allocation.config import AllocateMessageQueueByConfig
from rmqk.plugins.allocation.consistent_hash import AllocateMessageQueueConsistentHash, md5_hash
from rmqk.plugins.allocation.machine_room import AllocateMessageQueueByMachineRoom
from rmqk.plugins.allocation.machine_room_nearby import (
    AllocateMachineRoomNearby,
    MachineRoomResolver,
    PatternMachineRoomResolver,
)
from rmqk.spi.hookspecs import Register, hookimpl

__all__ = [
    "BUILTIN_FACTORIES",
    "BUILTIN_STRATEGIES",
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "MachineRoomResolver",
    "PatternMachineRoomResolver",
    "md5_hash",
    "rmqk_register_allocation_strategies",
]


@hookimpl
def rmqk_register_allocation_strategies(register: Register) -> None:
    for factory in BUILTIN_STRATEGIES.values():
        register(factory)
