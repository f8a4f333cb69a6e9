"""A record is the same for every delivery of a message, in every sink that writes records."""

from __future__ import annotations

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.records import message_record

QUEUE = MessageQueue("Orders", "broker-a", 0)


def _delivery(min_offset: str, max_offset: str, started: str) -> MessageExt:
    return MessageExt(
        topic="Orders",
        body=b"paid",
        queue_id=0,
        queue_offset=7,
        born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_500,
        store_host="127.0.0.1:10911",
        properties={
            "TAGS": "paid",
            "KEYS": "order-7",
            "UNIQ_KEY": "ID-7",
            "CLUSTER": "DefaultCluster",
            "region": "eu",
            # What a consumer adds on each delivery: they differ between deliveries.
            "MIN_OFFSET": min_offset,
            "MAX_OFFSET": max_offset,
            "CONSUME_START_TIME": started,
        },
    )


def test_a_redelivered_message_gives_the_same_record() -> None:
    first = message_record(QUEUE, _delivery("0", "8", "1700000001000"), "text")
    again = message_record(QUEUE, _delivery("3", "20", "1700000099000"), "text")
    assert first == again
    # Fields of their own (tags, keys, msg_id) are not repeated in properties, as in
    # the Spark sink's rows; the producer's and the broker's other properties stay.
    assert first["properties"] == {"CLUSTER": "DefaultCluster", "region": "eu"}
    assert (first["tags"], first["keys"], first["msg_id"]) == ("paid", "order-7", "ID-7")
