"""Embedded broker: what survives a restart on the same data directory."""

from __future__ import annotations

import pytest
from test_broker_support import RawClient, messages_of

from rmqk.wire.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(60)


async def test_offsets_topics_and_messages_survive_a_restart(broker_factory, tmp_path):
    data = tmp_path / "restart"
    first = await broker_factory(data_dir=data)
    client = await RawClient.connect(first.broker_addr)
    for i in range(5):
        await client.send_message("Durable", f"m{i}".encode(), queue_id=1)
    await first.create_topic("Created", queues=2)
    await client.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "dg", "topic": "Durable", "queueId": 1, "commitOffset": 3},
    )
    await client.pull("Durable", queue_id=1, group="dg2", sys_flag=0x5, commit_offset=4)
    await client.close()
    await first.stop()

    second = await broker_factory(data_dir=data)
    client = await RawClient.connect(second.broker_addr)
    try:
        for group, offset in (("dg", "3"), ("dg2", "4")):
            query = await client.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": "Durable", "queueId": 1},
            )
            assert (query.code, query.ext_fields) == (ResponseCode.SUCCESS, {"offset": offset})
        cfg = second.store.topics.get("Created")
        assert (cfg.read_queue_nums, cfg.write_queue_nums) == (2, 2)
        assert second.namesrv.routes.route("Created") is not None
        pulled = await client.pull("Durable", queue_id=1, offset=3)
        assert [m.body for m in messages_of(pulled)] == [b"m3", b"m4"]
        # New messages continue the queue.
        sent = await client.send_message("Durable", b"m5", queue_id=1)
        assert sent.ext_fields["queueOffset"] == "5"
    finally:
        await client.close()
