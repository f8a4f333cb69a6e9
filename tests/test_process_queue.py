"""ProcessQueue: Java's commit-point and orderly drainer semantics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.engine.process_queue import ProcessQueue
from rmqk.model.message import MessageExt


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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "remove", "take", "commit", "rollback"]),
            st.lists(st.integers(min_value=0, max_value=40), max_size=8),
        ),
        max_size=25,
    )
)
def test_bulk_and_per_message_paths_keep_the_same_books(
    steps: list[tuple[str, list[int]]],
) -> None:
    """Any mix of batches (in order, overlapping, out of order) keeps a model's counts.

    The model is a plain dict of offsets held; put skips offsets already held
    (in either map), remove forgets the given ones.
    """

    def sized(offset: int) -> MessageExt:
        return MessageExt(topic="T", body=b"x" * (offset % 5 + 1), queue_offset=offset)

    pq = ProcessQueue()
    held: dict[int, int] = {}  # offset -> body size, both maps
    taken: set[int] = set()
    for action, offsets in steps:
        if action == "put":
            batch = [
                MessageExt(topic="T", body=b"x" * (o % 5 + 1), queue_offset=o) for o in offsets
            ]
            pq.put_messages(batch)
            for m in batch:
                held.setdefault(m.queue_offset, len(m.body))
        elif action == "remove":
            batch = [
                MessageExt(topic="T", body=b"x" * (o % 5 + 1), queue_offset=o) for o in offsets
            ]
            present = [o for o in offsets if o in held and o not in taken]
            point = pq.remove_messages(batch)
            for o in set(present):
                del held[o]
            rest = sorted(o for o in held if o not in taken)
            if point != -1:
                assert point == (rest[0] if rest else pq.queue_offset_max + 1)
        elif action == "take":
            for m in pq.take_messages(len(offsets) + 1):
                taken.add(m.queue_offset)
        elif action == "commit":
            pq.commit()
            for o in taken:
                held.pop(o, None)
            taken.clear()
        else:
            pq.rollback()
            taken.clear()
        assert pq.msg_count == len(held)
        assert pq.msg_size == sum(held.values())
        waiting = sorted(o for o in held if o not in taken)
        assert pq.cached_count == len(waiting)
        assert pq.first_offset() == (waiting[0] if waiting else None)
        assert pq.last_offset() == (waiting[-1] if waiting else None)
        assert [m.queue_offset for m in pq.head_messages(100)] == waiting
