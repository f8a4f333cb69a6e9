"""Allocation invariants over whole groups (hypothesis).

Every member of a group computes its own share from the same sorted lists; these
properties check that the shares of all members together cover every queue
exactly once, which is what keeps a mixed Java/Python group from consuming a
queue twice or never.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.model import MessageQueue
from rmqk.plugins.allocation import BUILTIN_FACTORIES
from rmqk.plugins.allocation.machine_room import broker_machine_room
from rmqk.spi.contracts import AllocationStrategy

pytestmark = pytest.mark.timeout(120)

PROPS = settings(max_examples=150, deadline=None)

ROOMS = ["r1", "r2", "r3", "r4"]

names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="@#"), min_size=1, max_size=8
)


@st.composite
def queue_lists(draw: st.DrawFn, brokers: st.SearchStrategy[str]) -> list[MessageQueue]:
    items = draw(
        st.sets(
            st.builds(MessageQueue, names, brokers, st.integers(0, 31)),
            min_size=1,
            max_size=48,
        )
    )
    return sorted(items)


plain_queues = queue_lists(st.sampled_from(["broker-a", "broker-b", "broker-c"]))
room_queues = queue_lists(st.builds(lambda room, b: f"{room}@{b}", st.sampled_from(ROOMS), names))
client_ids = st.lists(
    st.builds(lambda ip, inst: f"{ip}@{inst}", names, names), min_size=1, max_size=24, unique=True
).map(sorted)
room_client_ids = st.lists(
    st.builds(
        lambda ip, room, n: f"{ip}@{room}#{n}",
        names,
        st.sampled_from(["r1", "r2", "r3", "r9"]),
        st.integers(0, 99),
    ),
    min_size=1,
    max_size=24,
    unique=True,
).map(sorted)


def group_shares(
    strategy: AllocationStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate("g", cid, mq_all, cid_all) for cid in cid_all}


def assert_each_queue_once(
    shares: dict[str, list[MessageQueue]], expected: Sequence[MessageQueue]
) -> None:
    counts = Counter(mq for share in shares.values() for mq in share)
    assert set(counts) == set(expected), "a queue was left out or invented"
    assert all(n == 1 for n in counts.values()), f"assigned twice: {counts.most_common(3)}"


@PROPS
@given(plain_queues, client_ids)
def test_avg_covers_each_queue_once_in_balanced_contiguous_blocks(
    mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    shares = group_shares(BUILTIN_FACTORIES["AVG"](), mq_all, cid_all)
    assert_each_queue_once(shares, mq_all)
    # The first m % c consumers get one queue more, and the blocks follow the sorted order.
    m, c = len(mq_all), len(cid_all)
    start = 0
    for i, cid in enumerate(cid_all):
        size = m // c + (1 if i < m % c else 0)
        assert shares[cid] == mq_all[start : start + size]
        start += size


@PROPS
@given(plain_queues, client_ids)
def test_avg_by_circle_covers_each_queue_once_round_robin(
    mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    shares = group_shares(BUILTIN_FACTORIES["AVG_BY_CIRCLE"](), mq_all, cid_all)
    assert_each_queue_once(shares, mq_all)
    for k, mq in enumerate(mq_all):
        assert mq in shares[cid_all[k % len(cid_all)]]
    sizes = [len(share) for share in shares.values()]
    assert max(sizes) - min(sizes) <= 1


@PROPS
@given(plain_queues, client_ids, st.integers(1, 12))
def test_consistent_hash_covers_each_queue_once(
    mq_all: list[MessageQueue], cid_all: list[str], virtual_nodes: int
) -> None:
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](virtual_node_count=virtual_nodes)
    assert_each_queue_once(group_shares(strategy, mq_all, cid_all), mq_all)


@PROPS
@given(plain_queues, client_ids, names, st.integers(1, 12))
def test_consistent_hash_moves_queues_only_to_a_joining_consumer(
    mq_all: list[MessageQueue], cid_all: list[str], newcomer_ip: str, virtual_nodes: int
) -> None:
    newcomer = f"{newcomer_ip}@joined"
    strategy = BUILTIN_FACTORIES["CONSISTENT_HASH"](virtual_node_count=virtual_nodes)
    before = group_shares(strategy, mq_all, cid_all)
    after = group_shares(strategy, mq_all, sorted({*cid_all, newcomer}))
    for cid in cid_all:
        assert set(after[cid]) <= set(before[cid])


@PROPS
@given(room_queues, room_client_ids, st.sampled_from(["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"]))
def test_machine_room_nearby_covers_each_queue_once_preferring_the_local_room(
    mq_all: list[MessageQueue], cid_all: list[str], inner: str
) -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM_NEARBY"](inner=inner)
    shares = group_shares(strategy, mq_all, cid_all)
    assert_each_queue_once(shares, mq_all)
    consumer_rooms = {cid.split("@")[1].split("#")[0] for cid in cid_all}
    for cid, share in shares.items():
        own_room = cid.split("@")[1].split("#")[0]
        for mq in share:
            queue_room = broker_machine_room(mq.broker_name)
            # A queue leaves its room only when nobody consumes in that room.
            assert queue_room == own_room or queue_room not in consumer_rooms


@PROPS
@given(room_queues, client_ids, st.sets(st.sampled_from(ROOMS), min_size=1))
def test_machine_room_covers_the_listed_rooms_once_and_nothing_else(
    mq_all: list[MessageQueue], cid_all: list[str], rooms: set[str]
) -> None:
    strategy = BUILTIN_FACTORIES["MACHINE_ROOM"](consumer_idcs=sorted(rooms))
    shares = group_shares(strategy, mq_all, cid_all)
    wanted = [mq for mq in mq_all if broker_machine_room(mq.broker_name) in rooms]
    assert_each_queue_once(shares, wanted)
    sizes = [len(share) for share in shares.values()]
    assert max(sizes) - min(sizes) <= 1
