"""ProcessQueue: Java's commit-point and orderly drainer semantics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.engine.process_queue import ProcessQueue
from rmqk.message import MessageExt


def msgs(*offsets: int, size: int = 10) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x" * size, queue_offset=o) for o in offsets]


def test_remove_returns_lowest_in_flight_or_max_plus_one() -> None:
    pq = ProcessQueue()
    assert pq.remove_messages(msgs(1)) == -1  # empty on entry
    batch = msgs(10, 11, 12, 13)
    pq.put_messages(batch)
    assert pq.msg_count == 4 and pq.msg_size == 40
    assert pq.remove_messages([batch[1], batch[2]]) == 10  # 10 still in flight
    assert pq.remove_messages([batch[0]]) == 13
    assert pq.remove_messages([batch[3]]) == 14  # all done: highest put + 1
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_duplicates_are_not_counted_twice() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(1, 2))
    pq.put_messages(msgs(2, 3))
    assert pq.msg_count == 3
    assert pq.max_span() == 2


def test_orderly_take_commit_and_retry_keep_order() -> None:
    pq = ProcessQueue()
    assert pq.put_messages(msgs(0, 1, 2, 3, 4)) is True  # first batch dispatches a drainer
    assert pq.put_messages(msgs(5)) is False  # a drainer is already running
    taken = pq.take_messages(2)
    assert [m.queue_offset for m in taken] == [0, 1]
    assert pq.msg_count == 6  # taken messages still count until committed
    pq.make_messages_to_consume_again(taken)
    again = pq.take_messages(3)
    assert [m.queue_offset for m in again] == [0, 1, 2]  # the failed batch comes first
    assert pq.commit() == 3
    assert pq.msg_count == 3
    rest = pq.take_messages(10)
    assert [m.queue_offset for m in rest] == [3, 4, 5]
    assert pq.commit() == 6
    assert pq.take_messages(10) == [] and pq.consuming is False
    assert pq.put_messages(msgs(6)) is True  # the drainer flag dropped, so a new one starts
    assert pq.commit() == -1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=12), st.randoms())
def test_commit_point_never_passes_an_unacknowledged_message(sizes: list[int], rnd: object) -> None:
    import random

    r: random.Random = rnd  # type: ignore[assignment]
    pq = ProcessQueue()
    next_offset = 0
    in_flight: list[MessageExt] = []
    committed = -1
    for n in sizes:
        batch = msgs(*range(next_offset, next_offset + n))
        next_offset += n
        pq.put_messages(batch)
        in_flight.extend(batch)
        r.shuffle(in_flight)
        k = r.randint(0, len(in_flight))
        acked, in_flight = in_flight[:k], in_flight[k:]
        point = pq.remove_messages(acked)
        if point >= 0:
            committed = max(committed, point)
        lowest = min((m.queue_offset for m in in_flight), default=next_offset)
        assert committed <= lowest
    assert pq.remove_messages(in_flight) in (-1, next_offset)
