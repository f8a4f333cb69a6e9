"""ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP and the consumer offsets.

Answers QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET as Apache 4.9.8 does.
"""

from __future__ import annotations

from rmqk.plugins.broker.commands import Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import Processor
from rmqk.wire import jsonwire
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["ConsumerManageProcessor"]


class ConsumerManageProcessor(Processor):
    """Which consumers a group has, and where each of its queues was consumed to."""

    def get_consumer_list_by_group(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group = Headers(request).text("consumerGroup")
        info = self.ctx.clients.consumer_group(group)
        if info is not None:
            ids = info.client_ids()
            if ids:
                return make_response(request, body=jsonwire.dumps({"consumerIdList": ids}))
        return make_response(
            request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
        )

    def query_consumer_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("consumerGroup", "topic", "queueId")
        group, topic, queue_id = h.text("consumerGroup"), h.text("topic"), h.number("queueId")
        offset = self.ctx.store.consumer_offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return make_response(request, fields={"offset": offset})
        # Apache answers 0 when the queue still starts at 0 and its first message is
        # in memory; everything the embedded broker stores counts as in memory.
        if self.ctx.store.min_offset(topic, queue_id) <= 0:
            return make_response(request, fields={"offset": 0})
        return make_response(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_consumer_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("consumerGroup", "topic", "queueId", "commitOffset")
        self.ctx.store.consumer_offsets.commit_offset(
            h.text("consumerGroup"), h.text("topic"), h.number("queueId"), h.number("commitOffset")
        )
        return make_response(request)

    # -- offsets and messages of queues --------------------------------------------
