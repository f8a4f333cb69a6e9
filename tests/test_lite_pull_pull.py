"""``LitePullConsumer.pull``: Java's ``DefaultMQPullConsumer.pull`` (issue 27 item 5).

Over real TCP against the embedded broker: the broker's status and offsets come
back as they are, tags are filtered, nothing is committed, and bad arguments
are refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, produce

from rmqk.engine.lite_pull import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer
from rmqk.engine.sync import LitePullConsumer, Producer
from rmqk.model import MessageQueue, PullStatus
from rmqk.model.errors import ClientError, SubscriptionRefusedError
from rmqk.model.message import Message

pytestmark = pytest.mark.timeout(60)


async def _topic(broker: Any) -> None:
    """Topic PullT, one queue: offsets 0-9 tagged a, 10-19 tagged b."""
    await create_topic(broker, "PullT", 1)
    await produce(broker.namesrv_addr, "PullT", (f"a-{i}".encode() for i in range(10)), tags="a")
    await produce(broker.namesrv_addr, "PullT", (f"b-{i}".encode() for i in range(10)), tags="b")


async def test_pull_answers_as_the_broker_and_commits_nothing(broker: Any) -> None:
    await _topic(broker)
    c = AsyncLitePullConsumer("g-pull", namesrv_addr=broker.namesrv_addr)
    mq = MessageQueue("PullT", "broker-a", 0)
    with pytest.raises(ClientError, match="not running"):
        await c.pull(mq, "*", 0, 1)
    async with c:
        (mq,) = await c.fetch_message_queues("PullT")
        found = await c.pull(mq, "*", 0, 5)
        assert found.status is PullStatus.FOUND
        assert [m.queue_offset for m in found.messages] == [0, 1, 2, 3, 4]
        assert [m.body for m in found.messages] == [f"a-{i}".encode() for i in range(5)]
        assert (found.next_begin_offset, found.min_offset, found.max_offset) == (5, 0, 20)

        # A tag filter: only b's, read on from next_begin_offset until the end.
        offset, tagged = 0, []
        while True:
            r = await c.pull(mq, "b", offset, 32)
            if r.status is not PullStatus.FOUND:
                break
            tagged.extend(r.messages)
            offset = r.next_begin_offset
        assert r.status is PullStatus.NO_NEW_MSG and offset == 20
        assert [m.queue_offset for m in tagged] == list(range(10, 20))
        assert {m.tags for m in tagged} == {"b"}

        # At the max offset: nothing new, answered at once (not held by the broker).
        at_end = await asyncio.wait_for(c.pull(mq, "*", 20, 32, timeout_ms=3000), 10)
        assert (at_end.status, at_end.messages, at_end.next_begin_offset) == (
            PullStatus.NO_NEW_MSG,
            (),
            20,
        )
        past = await c.pull(mq, "*", 25, 32)
        assert past.status is PullStatus.OFFSET_ILLEGAL and past.max_offset == 20

        for args, words in [
            ((mq, "*", -1, 1), "offset must be an integer >= 0"),
            ((mq, "*", 0, 0), "max_nums must be an integer > 0"),
            (("PullT", "*", 0, 1), "is not a MessageQueue"),
            ((mq, "a|b", 0, 1), "single '|'"),
            ((mq, "a > 1", 0, 1), "looks like SQL92"),
        ]:
            with pytest.raises(ClientError, match=re.escape(words)):
                await c.pull(*args)
        with pytest.raises(ClientError, match="expression type"):
            await c.pull(mq, "*", 0, 1, expression_type="XPATH")
    # Nothing committed: the broker holds no offset of the group (its query answers
    # 0 for a queue starting at 0, as Java's does, so its table is asked).
    assert broker.store.consumer_offsets.query_offset("g-pull", "PullT", 0) == -1


async def test_the_blocking_twin_pulls(broker: Any) -> None:
    await _topic(broker)

    def run() -> tuple[PullStatus, list[int]]:
        with LitePullConsumer("g-pull-sync", namesrv_addr=broker.namesrv_addr) as c:
            (mq,) = c.fetch_message_queues("PullT")
            r = c.pull(mq, "a || b", 8, 4)
            return r.status, [m.queue_offset for m in r.messages]

    assert await asyncio.to_thread(run) == (PullStatus.FOUND, [8, 9, 10, 11])


def test_the_migration_guide_snippet_runs_as_written(broker_thread: Any, tmp_path: Path) -> None:
    """docs/migration-from-java.md's pull loop reads exactly TagA and TagB, then stops."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "migration-from-java.md").read_text()
    (code,) = [b for b in re.findall(r"^```python\n(.*?)^```", page, re.M | re.S) if ".pull(" in b]
    assert "127.0.0.1:9876" in code
    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=2))
    with Producer("snippet-producer", namesrv_addr=broker_thread.namesrv_addr) as producer:
        for tag in ("TagA", "TagB", "TagC"):
            for i in range(5):
                producer.send(Message("Orders", f"{tag}-{i}".encode(), tags=tag))
    script = tmp_path / "pull_snippet.py"
    script.write_text(code.replace("127.0.0.1:9876", broker_thread.namesrv_addr))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    bodies = sorted(line.split()[2] for line in done.stdout.splitlines())
    assert bodies == sorted(f"{tag}-{i}" for tag in ("TagA", "TagB") for i in range(5))


@pytest.mark.broker_options(enable_property_filter=True)
async def test_pull_by_sql92(broker: Any) -> None:
    await create_topic(broker, "PullSql", 1)
    async with AsyncProducer("pull-sql-producer", namesrv_addr=broker.namesrv_addr) as producer:
        await producer.send_batch(
            [Message("PullSql", b"x", properties={"n": str(n)}) for n in range(20)]
        )
    async with AsyncLitePullConsumer("g-pull-sql", namesrv_addr=broker.namesrv_addr) as c:
        (mq,) = await c.fetch_message_queues("PullSql")
        r = await c.pull(mq, "n >= 15", 0, 32, expression_type="SQL92")
        assert r.status is PullStatus.FOUND
        assert [m.get_property("n") for m in r.messages] == [str(n) for n in range(15, 20)]
        # A pull alone has the broker log the parse error and answer anyway; asked, it refuses.
        with pytest.raises(SubscriptionRefusedError) as refused:
            await c.pull(mq, "n >>> 1", 0, 32, expression_type="SQL92")
        assert "n >>> 1" in str(refused.value) and refused.value.remark
