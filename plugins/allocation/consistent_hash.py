"""CONSISTENT_HASH: queues mapped onto an MD5 ring of consumer virtual nodes.

Java's AllocateMessageQueueConsistentHash with its ConsistentHashRouter:

* each consumer id ``cid`` puts ``virtual_node_count`` nodes on the ring, keyed
  ``hash(f"{cid}-{k}")`` for k = 0, 1, ...; when two keys collide the node put
  later wins, as in Java's TreeMap;
* a queue goes to the node at the first ring key >= ``hash(str(mq))``, wrapping
  to the smallest key; ``str(mq)`` is Java's ``MessageQueue.toString()``;
* the default hash is the first 4 bytes of the MD5 of the UTF-8 key, read
  big-endian as an unsigned number. (Java hashes ``String.getBytes()``, the
  platform charset, which is UTF-8 on every JVM rmqk is tested against.)

With ``virtual_node_count = 0`` the ring is empty and, as in Java, no consumer
gets any queue.

Options (``allocate_options``):

* ``virtual_node_count``: integer >= 0, default 10 (Java's ``virtualNodeCnt``).
* ``hash_function``: optional ``"package.module:function"`` taking the key
  string and returning an integer (Java's ``customHashFunction``). Every member
  of the group, Java or Python, must use the same function. Results are read as
  Java ``long`` values (wrapped to signed 64 bits) because the ring is ordered
  by them.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from rmqk.model import MessageQueue
from rmqk.plugins.allocation.options import (
    DEFAULT_VIRTUAL_NODE_COUNT,
    ConsistentHashOptions,
    parse_strategy_options,
)
from rmqk.plugins.allocation.share import JavaStrategy, Share
from rmqk.spi.contracts import AllocationStrategyContext

__all__ = [
    "DEFAULT_VIRTUAL_NODE_COUNT",
    "NAME",
    "AllocateMessageQueueConsistentHash",
    "HashFunction",
    "HashRing",
    "create_consistent_hash",
    "md5_hash",
]

NAME = "CONSISTENT_HASH"

HashFunction = Callable[[str], int]

_LONG_MASK = (1 << 64) - 1
_LONG_SIGN = 1 << 63


def md5_hash(key: str) -> int:
    """Java's default ring hash: MD5 digest bytes 0..3, big-endian, unsigned."""
    # "replace" turns lone surrogates into '?', as Java's String.getBytes does.
    data = key.encode("utf-8", "replace")
    return int.from_bytes(hashlib.md5(data, usedforsecurity=False).digest()[:4], "big")


def _as_java_long(value: int) -> int:
    value &= _LONG_MASK
    return value - (1 << 64) if value & _LONG_SIGN else value


class HashRing:
    """Java's ConsistentHashRouter over consumer ids (the physical nodes)."""

    __slots__ = ("_hash", "_keys", "_owners")

    def __init__(
        self, nodes: Iterable[str], virtual_node_count: int, hash_function: HashFunction
    ) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtual node counts :{virtual_node_count}")
        self._hash = hash_function
        owner_of: dict[int, str] = {}
        # Java numbers a node's replicas after those it already has on the ring, so a
        # duplicated id adds replicas k, k+1, ... rather than overwriting its own.
        replicas: Counter[str] = Counter()
        for node in nodes:
            first = replicas[node]
            for k in range(first, first + virtual_node_count):
                key = _as_java_long(hash_function(f"{node}-{k}"))
                previous = owner_of.get(key)
                if previous is not None:
                    replicas[previous] -= 1
                owner_of[key] = node
                replicas[node] += 1
        self._keys = sorted(owner_of)
        self._owners = [owner_of[key] for key in self._keys]

    def __len__(self) -> int:
        return len(self._keys)

    def route(self, object_key: str) -> str | None:
        """The node owning ``object_key``, or None on an empty ring."""
        if not self._keys:
            return None
        position = bisect.bisect_left(self._keys, _as_java_long(self._hash(object_key)))
        return self._owners[position if position < len(self._keys) else 0]


@attrs.frozen
class AllocateMessageQueueConsistentHash(JavaStrategy):
    """Java's AllocateMessageQueueConsistentHash (see the module docstring)."""

    virtual_node_count: int = DEFAULT_VIRTUAL_NODE_COUNT
    hash_function: HashFunction = md5_hash

    def __attrs_post_init__(self) -> None:
        if self.virtual_node_count < 0:
            raise ValueError(f"illegal virtualNodeCnt :{self.virtual_node_count}")

    @property
    def name(self) -> str:
        return NAME

    def divide(self, share: Share) -> list[MessageQueue]:
        ring = HashRing(share.cid_all, self.virtual_node_count, self.hash_function)
        return [mq for mq in share.mq_all if ring.route(str(mq)) == share.current_cid]


def create_consistent_hash(**options: Any) -> AllocateMessageQueueConsistentHash:
    """``CONSISTENT_HASH`` from Python: options ``virtual_node_count``, ``hash_function``."""
    return build_consistent_hash(None, parse_strategy_options(NAME, ConsistentHashOptions, options))


def build_consistent_hash(
    context: AllocationStrategyContext | None, parsed: ConsistentHashOptions
) -> AllocateMessageQueueConsistentHash:
    """The registered factory of ``CONSISTENT_HASH``."""
    if parsed.hash_function is None:
        return AllocateMessageQueueConsistentHash(parsed.virtual_node_count)
    return AllocateMessageQueueConsistentHash(
        parsed.virtual_node_count, _checked_hash(parsed.hash_function)
    )


def _checked_hash(function: Callable[[str], object]) -> HashFunction:
    def hash_key(key: str) -> int:
        value = function(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"{NAME} hash_function {function!r} returned {value!r} for {key!r}; "
                "it must return an int"
            )
        return value

    return hash_key
