"""Java's MQAdmin methods on the blocking clients, over real TCP against the embedded broker:
the producer's createTopic, searchOffset, max/minOffset, earliestMsgStoreTime,
viewMessage and queryMessage, and the sync consumers' min/max/search offsets as the
async ones have them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from engine_support import max_offsets

from rmqk.engine.sync import LitePullConsumer, Producer, PushConsumer
from rmqk.model.errors import ClientError
from rmqk.model.message import Message

pytestmark = pytest.mark.timeout(60)


def test_sync_producer_mqadmin_methods(broker_thread: Any) -> None:
    addr = broker_thread.namesrv_addr
    with Producer("p-admin", namesrv_addr=addr) as p:
        p.create_topic("TBW102", "AdminMade", 3)
        queues: list[Any] = []
        for _ in range(100):  # the name server learns it from the broker's registration
            try:
                queues = p.queues_for("AdminMade")
            except ClientError:
                queues = []
            if len(queues) == 3 and all(q.topic == "AdminMade" for q in queues):
                break
            time.sleep(0.05)
        got = asyncio.run(max_offsets(addr, broker_thread.broker_addr, "AdminMade", 3))
        assert got == {0: 0, 1: 0, 2: 0}  # all three queues exist on the broker
        q0 = queues[0]
        before = int(time.time() * 1000)
        results = [p.send(Message("AdminMade", f"m{i}".encode()), queue=q0) for i in range(3)]
        assert p.min_offset(q0) == 0
        assert p.max_offset(q0) == 3
        assert p.search_offset(q0, before - 60_000) == 0
        earliest = p.earliest_msg_store_time(q0)
        assert before - 5_000 <= earliest <= int(time.time() * 1000)
        assert p.search_offset(q0, earliest) == 0
        viewed = p.view_message(results[1].offset_msg_id)
        assert viewed.body == b"m1" and viewed.queue_offset == 1
        with pytest.raises(ClientError, match="no message"):
            p.view_message("not-an-id")
        p.send(Message("AdminMade", b"keyed", keys=["order-1", "other"]))
        p.send(Message("AdminMade", b"unkeyed"))
        now = int(time.time() * 1000)
        found = p.query_message("AdminMade", "order-1", 32, before - 60_000, now + 60_000)
        assert [m.body for m in found.messages] == [b"keyed"]
        assert found.index_last_update_timestamp > 0
        with pytest.raises(ClientError, match="by key finished, but no message"):
            p.query_message("AdminMade", "no-such-key", 32, 0, now + 60_000)
        with pytest.raises(ClientError, match="conflict with system topic"):
            p.create_topic("TBW102", "SELF_TEST_TOPIC", 1)
        with pytest.raises(ClientError, match="maybe key is wrong"):
            p.create_topic("NoSuchKeyTopic", "Whatever", 1)

        push = PushConsumer("g-admin-push", namesrv_addr=addr)
        push.subscribe("AdminMade")
        push.register_listener(lambda msgs: None)
        with push as c:
            assert (c.min_offset(q0), c.max_offset(q0)) == (0, 3)
            assert c.search_offset(q0, before - 60_000) == 0
        lite = LitePullConsumer("g-admin-lite", namesrv_addr=addr)
        lite.start()
        try:
            assert (lite.min_offset(q0), lite.max_offset(q0)) == (0, 3)
            assert lite.search_offset(q0, earliest) == 0
        finally:
            lite.shutdown()
