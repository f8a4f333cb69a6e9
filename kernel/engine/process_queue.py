"""ProcessQueue: the messages pulled from one queue and not yet acknowledged.

Every method runs on the event loop thread (listener threads hand their results
back to the loop), so unlike Java's version it needs no read/write lock; the
orderly ``consuming`` flag is flipped in the same loop step that sees the map
empty, which gives the one-drainer-per-queue guarantee Java gets from its lock.

Offsets arrive in increasing order from a queue's single circulating pull, so a
dict (insertion-ordered) plus a deque of offsets gives Java's TreeMap operations
(first key, last key, remove, take from the head) in amortised O(1).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not

from rmqk.model.message import MessageExt
from rmqk.spi.consume import REBALANCE_LOCK_INTERVAL_MS
from rmqk.spi.extensions import extensions_disabled
from rmqk.spi.transport import ProcessQueueInfo

__all__ = [
    "PULL_MAX_IDLE_MS",
    "REBALANCE_LOCK_INTERVAL_MS",
    "REBALANCE_LOCK_MAX_LIVE_MS",
    "ProcessQueue",
]

# rocketmq.client.pull.pullMaxIdleTime: a queue not pulled for this long is re-created.
PULL_MAX_IDLE_MS = 120_000
# rocketmq.client.rebalance.lockMaxLiveTime: a broker lock older than this is treated as lost.
REBALANCE_LOCK_MAX_LIVE_MS = 30_000


_OFFSET = attrgetter("queue_offset")
_BODY = attrgetter("body")
_NOT_NONE = partial(is_not, None)


def _now_ms() -> int:
    return int(time.time() * 1000)


_PutAscending = Callable[
    [dict[int, MessageExt], deque[int], list[MessageExt], int], tuple[int, int] | None
]
_RemoveAcked = Callable[
    [dict[int, MessageExt], dict[int, int], Iterable[MessageExt]], tuple[int, int]
]
_FirstKey = Callable[[deque[int], dict[int, MessageExt]], int | None]


def _load_speedups() -> tuple[_PutAscending, _RemoveAcked, _FirstKey] | None:
    """The compiled put and remove loops (_pq_speedups.c), unless absent or disabled.

    Optional as the record decoder's: ``RMQK_NO_EXTENSIONS=1`` or a build without
    a compiler leaves the pure-Python loops below.
    """
    if extensions_disabled():
        return None
    try:
        from rmqk.engine import _pq_speedups
    except ImportError:
        return None
    return _pq_speedups.put_ascending, _pq_speedups.remove_acked, _pq_speedups.first_key


_SPEEDUPS = _load_speedups()


class ProcessQueue:
    __slots__ = (
        "_consuming_map",
        "_msgs",
        "_order",
        "consume_lock",
        "consume_started",
        "consuming",
        "created",
        "dropped",
        "flow_control_times",
        "last_consume_timestamp",
        "last_lock_timestamp",
        "last_pull_timestamp",
        "locked",
        "msg_acc_cnt",
        "msg_count",
        "msg_size",
        "queue_offset_max",
        "span_control_times",
        "try_unlock_times",
    )

    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._order: deque[int] = deque()
        # Orderly: taken but not committed (Java's consumingMsgOrderlyTreeMap).
        self._consuming_map: dict[int, MessageExt] = {}
        self.msg_count = 0  # both maps, as Java counts
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.consuming = False
        self.locked = False
        now = _now_ms()
        self.last_lock_timestamp = now
        self.last_pull_timestamp = now
        self.last_consume_timestamp = now
        self.msg_acc_cnt = 0
        self.try_unlock_times = 0
        self.flow_control_times = 0
        self.span_control_times = 0
        self.created = now
        # Concurrent mode: when each in-flight message's listener call began, for
        # cleanExpiredMsg (Java stamps a CONSUME_START_TIME property instead, which
        # would force every message's properties to be parsed).
        self.consume_started: dict[int, int] = {}
        # Orderly: held around each listener call; rebalance takes it before it
        # unlocks the queue on the broker (Java's lockConsume).
        self.consume_lock: asyncio.Lock | None = None

    # -- pulled messages in ------------------------------------------------------

    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Add a pulled batch; returns dispatchToConsume (the orderly drainer edge)."""
        if msgs and _SPEEDUPS is not None and type(msgs) is list:
            held = max(
                self._order[-1] if self._order else -1,
                self.queue_offset_max if self._msgs or self._consuming_map else -1,
                max(self._consuming_map, default=-1),
            )
            put = _SPEEDUPS[0](self._msgs, self._order, msgs, held)
            if put is not None:
                self.queue_offset_max, size = put
                self.msg_count += len(msgs)
                self.msg_size += size
                if not self.consuming:
                    self.consuming = True
                    return True
                return False
        elif msgs:
            offs = list(map(_OFFSET, msgs))
            # The usual batch: increasing offsets past everything held. The maps and
            # sums then run in C, without a membership test per message.
            held = max(
                self._order[-1] if self._order else -1,
                self.queue_offset_max if self._msgs or self._consuming_map else -1,
                max(self._consuming_map, default=-1),
            )
            if offs[0] > held and (
                len(offs) == 1 or (sorted(offs) == offs and len(set(offs)) == len(offs))
            ):
                self._msgs.update(zip(offs, msgs, strict=True))
                self._order.extend(offs)
                self.queue_offset_max = offs[-1]
                self.msg_count += len(offs)
                self.msg_size += sum(map(len, map(_BODY, msgs)))
                if not self.consuming:
                    self.consuming = True
                    return True
                return False
        valid = 0
        size = 0
        needs_sort = False
        last_in_order = self._order[-1] if self._order else -1
        for msg in msgs:
            off = msg.queue_offset
            if off in self._msgs or off in self._consuming_map:
                continue
            self._msgs[off] = msg
            if off < last_in_order:
                needs_sort = True
            self._order.append(off)
            last_in_order = off
            valid += 1
            size += len(msg.body)
            self.queue_offset_max = off
        if needs_sort:
            # A set: an offset removed and put again is in the deque twice.
            self._order = deque(sorted({o for o in self._order if o in self._msgs}))
        self.msg_count += valid
        self.msg_size += size
        dispatch = False
        if self._msgs and not self.consuming:
            self.consuming = True
            dispatch = True
        return dispatch

    def set_acc_from_max_offset(self, max_offset: int, last_offset: int) -> None:
        """Broker backlog behind the newest pulled message (Java's msgAccCnt)."""
        acc = max_offset - last_offset
        if acc > 0:
            self.msg_acc_cnt = acc

    def is_dropped(self) -> bool:
        """``dropped``, as a call: re-checked after awaits, where mypy would narrow the field."""
        return self.dropped

    # -- views ------------------------------------------------------------------

    def _first_key(self) -> int | None:
        order = self._order
        msgs = self._msgs
        if _SPEEDUPS is not None:
            return _SPEEDUPS[2](order, msgs)
        while order and order[0] not in msgs:
            order.popleft()
        return order[0] if order else None

    def _last_key(self) -> int | None:
        order = self._order
        msgs = self._msgs
        while order and order[-1] not in msgs:
            order.pop()
        return order[-1] if order else None

    def max_span(self) -> int:
        # Checked before every pull: the usual case (the newest offset still held)
        # without the _first_key and _last_key calls.
        order = self._order
        msgs = self._msgs
        first = _SPEEDUPS[2](order, msgs) if _SPEEDUPS is not None else self._first_key()
        if first is None:
            return 0
        last: int | None = order[-1]
        if last not in msgs:
            last = self._last_key()
        assert last is not None
        return last - first

    @property
    def cached_count(self) -> int:
        return len(self._msgs)

    def first_offset(self) -> int | None:
        return self._first_key()

    def last_offset(self) -> int | None:
        return self._last_key()

    def is_pull_expired(self, now_ms: int | None = None) -> bool:
        return (now_ms or _now_ms()) - self.last_pull_timestamp > PULL_MAX_IDLE_MS

    def is_lock_expired(self, now_ms: int | None = None) -> bool:
        return (now_ms or _now_ms()) - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_MS

    def head_messages(self, limit: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        for off in self._order:
            msg = self._msgs.get(off)
            if msg is not None:
                out.append(msg)
                if len(out) >= limit:
                    break
        return out

    # -- concurrent acknowledgement ----------------------------------------------

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Remove acknowledged messages; returns the new commit point.

        -1 when the map was already empty, the lowest offset still in flight
        otherwise, or the highest offset ever put plus one once all are gone.
        """
        self.last_consume_timestamp = _now_ms()
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        if _SPEEDUPS is not None:
            removed, size = _SPEEDUPS[1](self._msgs, self.consume_started, msgs)
        else:
            offs = list(map(_OFFSET, msgs))
            # C-level loops: a pop per offset from each map.
            deque(map(self.consume_started.pop, offs, repeat(None)), maxlen=0)
            # Misses dropped by identity in C (list.count(None) would call
            # MessageExt.__eq__ once per message).
            popped = list(filter(_NOT_NONE, map(self._msgs.pop, offs, repeat(None))))
            removed = len(popped)
            size = sum(map(len, map(_BODY, popped)))
        self.msg_count -= removed
        self.msg_size -= size
        if self.msg_count <= 0:
            self.msg_count = 0
            self.msg_size = 0
        first = self._first_key()
        if first is not None:
            result = first
        return result

    # -- orderly ------------------------------------------------------------------

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` messages from the head into the consuming map.

        Clears ``consuming`` when there is nothing to take: that is the only place
        the drainer flag drops, so a batch put afterwards dispatches a new drainer.
        """
        self.last_consume_timestamp = _now_ms()
        taken: list[MessageExt] = []
        order = self._order
        msgs = self._msgs
        while order and len(taken) < batch_size:
            off = order.popleft()
            msg = msgs.pop(off, None)
            if msg is None:
                continue
            self._consuming_map[off] = msg
            taken.append(msg)
        if not taken:
            self.consuming = False
        return taken

    def commit(self) -> int:
        """Commit the consuming map; returns the next offset to consume, or -1."""
        if not self._consuming_map:
            return -1
        last = max(self._consuming_map)
        self.msg_count -= len(self._consuming_map)
        self.msg_size -= sum(len(m.body) for m in self._consuming_map.values())
        if self.msg_count <= 0:
            self.msg_count = 0
            self.msg_size = 0
        self._consuming_map.clear()
        return last + 1

    def make_messages_to_consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """Put a failed orderly batch back at the head, in offset order."""
        for msg in sorted(msgs, key=lambda m: m.queue_offset, reverse=True):
            self._consuming_map.pop(msg.queue_offset, None)
            self._msgs[msg.queue_offset] = msg
            self._order.appendleft(msg.queue_offset)
        # A message put while these were out may sort before them (Java's TreeMap
        # would place it); rare, so restore the order by sorting when it happens.
        order = list(self._order)
        if order != sorted(order):
            self._order = deque(sorted({o for o in order if o in self._msgs}))

    def rollback(self) -> None:
        self.make_messages_to_consume_again(list(self._consuming_map.values()))

    def clear(self) -> None:
        self.consume_started.clear()
        self._msgs.clear()
        self._order.clear()
        self._consuming_map.clear()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    def info(self, commit_offset: int) -> ProcessQueueInfo:
        """fillProcessQueueInfo: this queue in a GET_CONSUMER_RUNNING_INFO answer."""
        temp = sorted(self._consuming_map)
        return ProcessQueueInfo(
            commit_offset=commit_offset,
            cached_msg_min_offset=self._first_key() or 0,
            cached_msg_max_offset=self._last_key() or 0,
            cached_msg_count=len(self._msgs),
            cached_msg_size_in_mib=self.msg_size // (1024 * 1024),
            transaction_msg_min_offset=temp[0] if temp else 0,
            transaction_msg_max_offset=temp[-1] if temp else 0,
            transaction_msg_count=len(temp),
            locked=self.locked,
            try_unlock_times=self.try_unlock_times,
            last_lock_timestamp=self.last_lock_timestamp,
            droped=self.dropped,
            last_pull_timestamp=self.last_pull_timestamp,
            last_consume_timestamp=self.last_consume_timestamp,
        )
