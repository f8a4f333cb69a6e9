"""QueryMessageProcessor: VIEW_MESSAGE_BY_ID, a stored message by its commit log offset."""

from __future__ import annotations

from rmqk.plugins.broker.commands import Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import Processor
from rmqk.protocol import RemotingCommand, ResponseCode

__all__ = ["QueryMessageProcessor"]


class QueryMessageProcessor(Processor):
    """Reads messages back from the store for admin tools."""

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
