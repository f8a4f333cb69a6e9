"""Transactions, which the embedded broker refuses (EndTransactionProcessor's place).

The embedded broker has no transaction service, so it behaves as an Apache broker
with ``rejectTransactionMessage=true``: a half (prepared) message is refused at
send time, and END_TRANSACTION is answered like any request code it does not
serve.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmqk.message import MessageProperty
from rmqk.plugins.broker.commands import make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.protocol import RemotingCommand, ResponseCode

__all__ = ["EndTransactionProcessor", "not_supported", "refuse_half_message"]


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """What AdminBrokerProcessor, the broker's default processor, answers an unknown code."""
    return make_response(
        request,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        f" request type {request.code} not supported",
    )


def refuse_half_message(
    props: Mapping[str, str], broker_ip: str, response: RemotingCommand
) -> bool:
    """Fill ``response`` with the refusal and say True when ``props`` mark a half message."""
    if props.get(MessageProperty.TRANSACTION_PREPARED, "").lower() != "true":
        return False
    response.code = ResponseCode.NO_PERMISSION
    response.remark = f"the broker[{broker_ip}] sending transaction message is forbidden"
    return True


class EndTransactionProcessor:
    """END_TRANSACTION: nothing to commit or roll back, since no half message is stored."""

    def end_transaction(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        return not_supported(request)
