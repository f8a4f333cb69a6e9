"""The lite pull consumer end to end, over real TCP against the embedded broker.

Each test checks which messages poll returned, by queue and offset: nothing
lost, nothing twice unless a test says why, and nothing stale after a seek or a
rebalance.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from engine_support import committed_offsets, create_topic, max_offsets, produce, wait_for

import rmqk
from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.sync import LitePullConsumer
from rmqk.model import MessageQueue
from rmqk.model.errors import ClientError, ConfigError
from rmqk.model.message import Message, MessageExt

pytestmark = pytest.mark.timeout(60)


def lite(broker: Any, group: str, **options: Any) -> AsyncLitePullConsumer:
    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return AsyncLitePullConsumer(group, namesrv_addr=broker.namesrv_addr, **options)


def queue_of(msg: MessageExt) -> MessageQueue:
    return MessageQueue(msg.topic, msg.broker_name, msg.queue_id)


async def poll_until(
    consumer: AsyncLitePullConsumer, count: int, timeout: float = 20
) -> list[MessageExt]:
    """Poll until ``count`` messages came, checking each batch holds one queue in order."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages polled"
        batch = await consumer.poll(500)
        if batch:
            assert len({queue_of(m) for m in batch}) == 1, "a batch mixes queues"
            offsets = [m.queue_offset for m in batch]
            assert offsets == sorted(offsets)
        got.extend(batch)
    return got


def by_queue(msgs: list[MessageExt]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for m in msgs:
        out[m.queue_id].append(m.queue_offset)
    return out


async def test_subscribe_reads_everything_once_and_close_commits(broker: Any) -> None:
    await create_topic(broker, "LiteAll", 4)
    total = 1_000
    await produce(broker.namesrv_addr, "LiteAll", (f"m-{i}".encode() for i in range(total)))
    changes: list[tuple[str, frozenset[MessageQueue], list[MessageQueue]]] = []
    c = lite(broker, "g-lite-all")
    c.subscribe("LiteAll", "*")
    c.register_rebalance_listener(lambda topic, all_q, mine: changes.append((topic, all_q, mine)))
    async with c:
        got = await poll_until(c, total)
        assert await c.poll(300) == []
        await wait_for(
            lambda: bool(changes) and set(changes[-1][2]) == c.assignment(),
            10,
            "the rebalance listener told of the assignment",
        )
        assert changes[-1][0] == "LiteAll" and len(changes[-1][1]) == 4
        assert len(c.assignment()) == 4
        # offsets of each queue come in order, with no gap and no repeat
        for offsets in by_queue(got).values():
            assert offsets == list(range(len(offsets)))
    assert Counter(m.body for m in got) == Counter(f"m-{i}".encode() for i in range(total))
    committed = await committed_offsets(
        broker.namesrv_addr, broker.broker_addr, "g-lite-all", "LiteAll", 4
    )
    assert committed == await max_offsets(broker.namesrv_addr, broker.broker_addr, "LiteAll", 4)


async def test_batches_are_at_most_pull_batch_size(broker: Any) -> None:
    await create_topic(broker, "LiteBatch", 1)
    await produce(broker.namesrv_addr, "LiteBatch", (b"x" for _ in range(95)))
    c = lite(broker, "g-lite-batch", auto_commit=False)
    c.subscribe("LiteBatch")
    async with c:
        sizes = []
        total = 0
        while total < 95:
            batch = await c.poll(2000)
            assert batch, "poll timed out with messages left"
            sizes.append(len(batch))
            total += len(batch)
    assert max(sizes) == 10 and total == 95


async def test_offsets_for_times_then_seek_reads_exactly_the_later_batch(broker: Any) -> None:
    await create_topic(broker, "LiteTime", 1)
    async with AsyncProducer("g-lite-time-producer", namesrv_addr=broker.namesrv_addr) as p:
        await p.send_batch([Message("LiteTime", f"early-{i}".encode()) for i in range(30)])
        await asyncio.sleep(1.5)
        # The broker answers the message stored nearest to the time: the late batch,
        # sent right after it, not the early one, 1.5 s before.
        moment = int(time.time() * 1000)
        await p.send_batch([Message("LiteTime", f"late-{i}".encode()) for i in range(30)])

    c = lite(broker, "g-lite-time", auto_commit=False)
    async with c:
        [mq] = await c.fetch_message_queues("LiteTime")
        c.assign([mq])
        # let the fetcher buffer early messages: the seek must discard them
        first = await c.poll(5000)
        assert first and first[0].body == b"early-0"
        assert await c.offsets_for_times({mq: moment}) == {mq: 30}
        await c.seek(mq, 30)
        assert await c.position(mq) == 30
        got = await poll_until(c, 30)
        assert [m.body for m in got] == [f"late-{i}".encode() for i in range(30)]
        assert [m.queue_offset for m in got] == list(range(30, 60))
        assert await c.poll(300) == []
        assert await c.position(mq) == 60
        with pytest.raises(ClientError, match="Seek offset illegal"):
            await c.seek(mq, 61)
        with pytest.raises(ClientError, match="Seek offset illegal"):
            await c.seek(mq, -1)
        with pytest.raises(ClientError, match="not in assigned list"):
            await c.seek(MessageQueue("LiteTime", mq.broker_name, 7), 0)
        # an explicit commit: exactly the offsets given, confirmed by the broker
        await c.commit({mq: 45})
        assert await c.committed(mq) == 45
        on_broker = await committed_offsets(
            broker.namesrv_addr, broker.broker_addr, "g-lite-time", "LiteTime", 1
        )
        assert on_broker == {0: 45}
        with pytest.raises(ClientError, match="does not hold it"):
            await c.commit({MessageQueue("LiteTime", mq.broker_name, 7): 1})


async def test_seek_to_end_and_beginning(broker: Any) -> None:
    await create_topic(broker, "LiteEnds", 2)
    await produce(
        broker.namesrv_addr, "LiteEnds", (f"old-{i}".encode() for i in range(40)), batch=10
    )
    c = lite(broker, "g-lite-ends", auto_commit=False)
    async with c:
        queues = await c.fetch_message_queues("LiteEnds")
        c.assign(queues)
        assert await c.poll(5000)
        await c.seek_to_end()
        assert await c.poll(500) == []
        await produce(
            broker.namesrv_addr, "LiteEnds", (f"new-{i}".encode() for i in range(20)), batch=10
        )
        got = await poll_until(c, 20)
        assert sorted(m.body for m in got) == sorted(f"new-{i}".encode() for i in range(20))
        assert await c.poll(300) == []
        await c.seek_to_beginning(queues[0])
        highs = await max_offsets(broker.namesrv_addr, broker.broker_addr, "LiteEnds", 2)
        again = await poll_until(c, highs[queues[0].queue_id])
        assert by_queue(again) == {queues[0].queue_id: list(range(highs[queues[0].queue_id]))}


async def test_commit_then_restart_resumes_exactly_at_committed_offsets(broker: Any) -> None:
    await create_topic(broker, "LiteResume", 2)
    total = 300
    await produce(
        broker.namesrv_addr, "LiteResume", (f"r-{i}".encode() for i in range(total)), batch=25
    )
    first = lite(broker, "g-lite-resume", auto_commit=False)
    first.subscribe("LiteResume")
    async with first:
        await wait_for(lambda: len(first.assignment()) == 2, 10, "both queues")
        done = await poll_until(first, 100)
        await first.commit()
        positions = {mq: await first.position(mq) for mq in first.assignment()}
        # commit waited for the broker: it has the offsets now, not at some later persist
        on_broker = await committed_offsets(
            broker.namesrv_addr, broker.broker_addr, "g-lite-resume", "LiteResume", 2
        )
        assert on_broker == {mq.queue_id: pos for mq, pos in positions.items()}
        for mq, pos in positions.items():
            assert await first.committed(mq) == pos
        # polled after the commit and never committed: the next run gets them again
        await poll_until(first, 30)
    assert sum(positions.values()) == len(done)

    second = lite(broker, "g-lite-resume", auto_commit=False)
    second.subscribe("LiteResume")
    async with second:
        await wait_for(lambda: len(second.assignment()) == 2, 10, "both queues")
        for mq, pos in positions.items():
            assert await second.committed(mq) == pos
        rest = await poll_until(second, total - len(done))
        assert await second.poll(300) == []
    resumed = by_queue(rest)
    for mq, pos in positions.items():
        assert resumed[mq.queue_id][0] == pos, f"{mq} did not resume at its committed offset"
    bodies = Counter(m.body for m in done + rest)
    assert bodies == Counter(f"r-{i}".encode() for i in range(total))


async def test_broadcasting_commits_to_the_local_file_and_resumes(
    broker: Any, tmp_path: Path
) -> None:
    await create_topic(broker, "LiteBcast", 2)
    await produce(
        broker.namesrv_addr, "LiteBcast", (f"b-{i}".encode() for i in range(80)), batch=10
    )
    options: dict[str, Any] = {
        "message_model": "BROADCASTING",
        "instance_name": "lite-bcast",
        "offset_store_options": {"dir": str(tmp_path / "offsets"), "persist_mode": "no-fsync"},
        "auto_commit": False,
    }
    first = lite(broker, "g-lite-bcast", **options)
    first.subscribe("LiteBcast")
    async with first:
        done = await poll_until(first, 30)
        await first.commit()
        await poll_until(first, 10)  # never committed
    files = list((tmp_path / "offsets").rglob("offsets.json"))
    assert len(files) == 1

    second = lite(broker, "g-lite-bcast", **options)
    second.subscribe("LiteBcast")
    async with second:
        rest = await poll_until(second, 80 - len(done))
        assert await second.poll(300) == []
    assert Counter(m.body for m in done + rest) == Counter(f"b-{i}".encode() for i in range(80))


async def test_auto_commit_reaches_the_broker_without_close(broker: Any) -> None:
    await create_topic(broker, "LiteAuto", 2)
    await produce(broker.namesrv_addr, "LiteAuto", (b"a" for _ in range(60)), batch=10)
    highs = await max_offsets(broker.namesrv_addr, broker.broker_addr, "LiteAuto", 2)
    c = lite(broker, "g-lite-auto", auto_commit_interval_ms=1000)
    c.subscribe("LiteAuto")
    async with c:
        await poll_until(c, 60)
        # nothing polled since the last batch was handed out: it is not committed yet
        await asyncio.sleep(1.1)
        assert await c.poll(100) == []  # this poll commits what earlier polls returned

        async def on_broker() -> dict[int, int | None]:
            return await committed_offsets(
                broker.namesrv_addr, broker.broker_addr, "g-lite-auto", "LiteAuto", 2
            )

        # well before the client instance's own first persist (10 s after start)
        deadline = time.monotonic() + 4
        while await on_broker() != highs:
            assert time.monotonic() < deadline, f"broker has {await on_broker()}, want {highs}"
            await asyncio.sleep(0.1)


async def test_a_released_queue_commits_only_what_earlier_polls_returned(broker: Any) -> None:
    await create_topic(broker, "LiteRelease", 2)
    await produce(broker.namesrv_addr, "LiteRelease", (b"r" for _ in range(60)), batch=30)
    c = lite(broker, "g-lite-release", pull_batch_size=10)
    async with c:
        q0, q1 = await c.fetch_message_queues("LiteRelease")
        c.assign([q0])
        done = await c.poll(5000)
        in_hand = await c.poll(5000)  # this poll says the application finished ``done``
        assert done and in_hand
        c.assign([q1])  # q0 leaves while ``in_hand`` may still be in use

        async def q0_on_broker() -> int | None:
            offsets = await committed_offsets(
                broker.namesrv_addr, broker.broker_addr, "g-lite-release", "LiteRelease", 2
            )
            return offsets[q0.queue_id]

        deadline = time.monotonic() + 4
        while await q0_on_broker() is None:
            assert time.monotonic() < deadline, "the released queue's offset never arrived"
            await asyncio.sleep(0.1)
        assert await q0_on_broker() == done[-1].queue_offset + 1
        assert c.assignment() == {q1}


async def test_tag_subscription_polls_only_matching_tags(broker: Any) -> None:
    await create_topic(broker, "LiteTags", 1)
    await produce(broker.namesrv_addr, "LiteTags", (b"a" for _ in range(20)), tags="TagA")
    await produce(broker.namesrv_addr, "LiteTags", (b"b" for _ in range(20)), tags="TagB")
    await produce(broker.namesrv_addr, "LiteTags", (b"c" for _ in range(20)), tags="TagC")
    c = lite(broker, "g-lite-tags", auto_commit=False)
    c.subscribe("LiteTags", "TagA || TagC")
    async with c:
        got = await poll_until(c, 40)
        assert await c.poll(300) == []
    assert Counter(m.tags for m in got) == {"TagA": 20, "TagC": 20}


async def test_pause_holds_one_queue_while_others_flow(broker: Any) -> None:
    await create_topic(broker, "LitePause", 2)
    await produce(broker.namesrv_addr, "LitePause", (b"p" for _ in range(100)), batch=10)
    highs = await max_offsets(broker.namesrv_addr, broker.broker_addr, "LitePause", 2)
    assert all(highs.values())
    c = lite(broker, "g-lite-pause", auto_commit=False)
    async with c:
        q0, q1 = await c.fetch_message_queues("LitePause")
        c.assign([q0, q1])
        # fetched batches of q0 may already be buffered: pausing holds them back too
        await asyncio.sleep(0.5)
        c.pause([q0])
        assert c.paused() == {q0}
        got = await poll_until(c, highs[q1.queue_id])
        assert {m.queue_id for m in got} == {q1.queue_id}
        assert await c.poll(1000) == []
        c.resume([q0])
        rest = await poll_until(c, highs[q0.queue_id])
        assert by_queue(rest) == {q0.queue_id: list(range(highs[q0.queue_id]))}


async def test_two_members_split_queues_and_drop_stale_batches(broker: Any) -> None:
    await create_topic(broker, "LiteSplit", 4)
    total = 400
    await produce(
        broker.namesrv_addr, "LiteSplit", (f"s-{i}".encode() for i in range(total)), batch=20
    )
    a = lite(broker, "g-lite-split")
    a.subscribe("LiteSplit")
    b = lite(broker, "g-lite-split")
    b.subscribe("LiteSplit")
    b_changes: list[list[MessageQueue]] = []

    async def on_change(
        topic: str, all_q: frozenset[MessageQueue], mine: list[MessageQueue]
    ) -> None:
        b_changes.append(mine)

    b.register_rebalance_listener(on_change)
    async with a:
        await wait_for(lambda: len(a.assignment()) == 4, 10, "a holding all queues")
        await asyncio.sleep(1.0)  # a's fetchers buffer every queue, a polls nothing
        async with b:
            await wait_for(
                lambda: (
                    len(a.assignment()) == 2
                    and len(b.assignment()) == 2
                    and bool(b_changes)
                    and set(b_changes[-1]) == b.assignment()
                ),
                15,
                "the queues split between a and b, and b's listener told",
            )
            assert not a.assignment() & b.assignment()
            got_a: list[MessageExt] = []
            got_b: list[MessageExt] = []

            async def drain(c: AsyncLitePullConsumer, into: list[MessageExt]) -> None:
                while len(got_a) + len(got_b) < total:
                    into.extend(await c.poll(200))

            await asyncio.wait_for(asyncio.gather(drain(a, got_a), drain(b, got_b)), 20)
            # a's batches fetched before the split, of queues now b's, were never handed out
            assert {queue_of(m) for m in got_a} <= a.assignment()
            assert {queue_of(m) for m in got_b} <= b.assignment()
    bodies = Counter(m.body for m in got_a + got_b)
    assert bodies == Counter(f"s-{i}".encode() for i in range(total))


async def test_sync_facade_from_a_thread(broker: Any) -> None:
    await create_topic(broker, "LiteSync", 2)
    await produce(broker.namesrv_addr, "LiteSync", (f"y-{i}".encode() for i in range(50)), batch=10)

    def run() -> tuple[list[bytes], dict[MessageQueue, int]]:
        got: list[bytes] = []
        with LitePullConsumer(
            "g-lite-sync",
            namesrv_addr=broker.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            auto_commit=False,
        ) as c:
            queues = c.fetch_message_queues("LiteSync")
            c.assign(queues)
            assert c.assignment() == set(queues)
            deadline = time.monotonic() + 20
            while len(got) < 50 and time.monotonic() < deadline:
                got.extend(m.body for m in c.poll(500))
            c.commit_async().result(10)
            committed = {mq: c.committed(mq) for mq in queues}
        return got, committed

    got, committed = await asyncio.to_thread(run)
    assert sorted(got) == sorted(f"y-{i}".encode() for i in range(50))
    highs = await max_offsets(broker.namesrv_addr, broker.broker_addr, "LiteSync", 2)
    assert {mq.queue_id: off for mq, off in committed.items()} == highs


# -- misuse, without a broker -----------------------------------------------------------


def test_exported_lazily_from_the_package() -> None:
    assert rmqk.LitePullConsumer is LitePullConsumer
    assert rmqk.AsyncLitePullConsumer is AsyncLitePullConsumer


async def test_subscribe_and_assign_are_mutually_exclusive() -> None:
    c = AsyncLitePullConsumer("g-x", namesrv_addr="127.0.0.1:1")
    c.subscribe("T")
    with pytest.raises(ClientError, match="mutually exclusive"):
        c.assign([MessageQueue("T", "b", 0)])
    d = AsyncLitePullConsumer("g-y", namesrv_addr="127.0.0.1:1")
    d.assign([MessageQueue("T", "b", 0)])
    with pytest.raises(ClientError, match="mutually exclusive"):
        d.subscribe("T")
    with pytest.raises(ClientError, match="can not be null or empty"):
        d.assign([])


async def test_not_running_calls_fail_clearly() -> None:
    c = AsyncLitePullConsumer("g-z", namesrv_addr="127.0.0.1:1")
    with pytest.raises(ClientError, match="not running"):
        await c.poll(10)
    with pytest.raises(ClientError, match="not running"):
        await c.commit()
    await c.close()  # closing a consumer never started does nothing


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"consume_thread_max": 4}, "consume_thread_max"),
        ({"auto_commit_interval_ms": 500}, "auto_commit_interval_ms"),
        ({"auto_commit": "yes"}, "auto_commit"),
        (
            {"broker_suspend_max_time_millis": 40_000},
            "consumer_timeout_millis_when_suspend",
        ),
        ({"pull_batch_size": 0}, "pull_batch_size"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        AsyncLitePullConsumer("g-opt", **options)
    assert [p.key for p in info.value.problems] == [key]


def test_group_is_checked() -> None:
    with pytest.raises(ConfigError, match="DEFAULT_CONSUMER"):
        AsyncLitePullConsumer("DEFAULT_CONSUMER")
    with pytest.raises(ConfigError, match="illegal characters"):
        AsyncLitePullConsumer("bad group")


async def test_start_twice_and_after_close_is_refused(broker: Any) -> None:
    c = lite(broker, "g-lite-state")
    await c.start()
    with pytest.raises(ClientError, match="maybe started once, RUNNING"):
        await c.start()
    await c.close()
    with pytest.raises(ClientError, match="maybe started once, SHUTDOWN_ALREADY"):
        await c.start()
    with pytest.raises(ClientError, match="not running"):
        await c.poll(0)
