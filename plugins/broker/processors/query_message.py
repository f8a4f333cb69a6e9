"""QueryMessageProcessor: QUERY_MESSAGE (messages by key from the index) and
VIEW_MESSAGE_BY_ID (a stored message by its commit log offset)."""

from __future__ import annotations

from rmqk.plugins.broker.commands import Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import Processor
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["UNIQUE_MSG_QUERY_FLAG", "QueryMessageProcessor"]

# MixAll.UNIQUE_MSG_QUERY_FLAG: an extFields entry "true" on a query by UNIQ_KEY.
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

_QUERY_FIELDS = ("topic", "key", "maxNum", "beginTimestamp", "endTimestamp")


class QueryMessageProcessor(Processor):
    """Reads messages back from the store for admin tools."""

    def query_message(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require(*_QUERY_FIELDS)
        topic, key = h.text("topic"), h.text("key")
        max_num = h.number("maxNum")
        begin, end = h.number("beginTimestamp"), h.number("endTimestamp")
        if h.opt_text(UNIQUE_MSG_QUERY_FLAG) == "true":
            # One message has one UNIQ_KEY: the broker, not the client, bounds the answer.
            max_num = self.ctx.store.index.config.default_query_max_num
        result = self.ctx.store.query_message(topic, key, max_num, begin, end)
        fields = {
            "indexLastUpdateTimestamp": result.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": result.index_last_update_phyoffset,
        }
        if result.records:
            return make_response(request, fields=fields, body=result.body)
        return make_response(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
            fields,
        )

    def view_message_by_id(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        offset = h.number("offset")
        record = self.ctx.store.look_message(offset)
        if record is None:
            return make_response(
                request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return make_response(request, body=bytes(record))
