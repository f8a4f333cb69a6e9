"""END_TRANSACTION (Apache 4.9.8's EndTransactionProcessor).

A commit looks the half message up by its commit log offset, checks that it is
the half message the producer means (group, half queue offset, commit log
offset), stores it again under its real topic and queue, where consumers see it,
and marks the half message settled with an op message. A rollback only marks it
settled. "Not known yet" (and any answer Apache ignores) changes nothing: the check
service asks again later.

Apache answers a producer's request with a SYSTEM_ERROR remark when the offsets
do not name a half message; rmqk adds one case Apache would fail with a
NullPointerException: a record that is not in the half topic (for example an
ordinary message's offset) is refused with "not a half message".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rmqk.model.message import MessageExt, MessageProperty
from rmqk.plugins.broker.commands import HeaderError, Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import BrokerContext, Processor
from rmqk.plugins.broker.store.results import PutResult
from rmqk.plugins.broker.transactions import (
    HALF_TOPIC,
    TransactionalMessageBridge,
    reset_transaction_bits,
)
from rmqk.wire.message_codec import MessageSysFlag, java_properties_string
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["EndTransactionProcessor", "not_supported", "refuse_half_message"]

log = logging.getLogger("rmqk.broker.transaction")

NOT_TYPE = 0
COMMIT_TYPE = int(MessageSysFlag.TRANSACTION_COMMIT)
ROLLBACK_TYPE = int(MessageSysFlag.TRANSACTION_ROLLBACK)


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
    """With ``rejectTransactionMessage``: fill ``response`` with the refusal of a half message."""
    if props.get(MessageProperty.TRANSACTION_PREPARED, "").lower() != "true":
        return False
    response.code = ResponseCode.NO_PERMISSION
    response.remark = f"the broker[{broker_ip}] sending transaction message is forbidden"
    return True


class EndTransactionProcessor(Processor):
    """Commits or rolls back half messages."""

    def __init__(self, ctx: BrokerContext, bridge: TransactionalMessageBridge) -> None:
        super().__init__(ctx)
        self.bridge = bridge

    def end_transaction(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        h = Headers(request)
        h.require(
            "producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback",
            "msgId",
        )  # fmt: skip
        group = h.text("producerGroup")
        table_offset = h.number("tranStateTableOffset")
        commit_log_offset = h.number("commitLogOffset")
        kind = h.number("commitOrRollback")
        if kind not in (NOT_TYPE, COMMIT_TYPE, ROLLBACK_TYPE):
            raise HeaderError("commitOrRollback field wrong")
        from_check = h.boolean("fromTransactionCheck")
        described = (
            f"producer {conn.remote_addr} group {group} commitLogOffset {commit_log_offset} "
            f"tranStateTableOffset {table_offset} msgId {request.ext_fields.get('msgId')} "
            f"remark {request.remark}"
        )
        if kind == NOT_TYPE:
            where = "a check" if from_check else "sending the message"
            log.warning("end transaction after %s, and it's pending status: %s", where, described)
            return None
        if kind == ROLLBACK_TYPE or from_check:
            verb = "commit" if kind == COMMIT_TYPE else "rollback"
            log.warning("end transaction (%s%s): %s", verb,
                        ", answering a check" if from_check else "", described)  # fmt: skip
        response = make_response(request)
        half = self.bridge.look_message(commit_log_offset)
        problem = _check_prepare_message(half, group, table_offset, commit_log_offset)
        if problem is not None or half is None:
            response.code = ResponseCode.SYSTEM_ERROR
            response.remark = problem
            log.warning("END_TRANSACTION refused (%s): %s", problem, described)
            return response
        if kind == COMMIT_TYPE:
            result = self._put_final_message(half)
            if not result.ok:
                response.code = ResponseCode.SYSTEM_ERROR
                response.remark = str(result.error or result.status.name)
                return response
        self.bridge.put_op_remove(half)
        return response

    def _put_final_message(self, half: MessageExt) -> PutResult:
        """endMessageTransaction + sendFinalMessage: the message under its real name.

        The stored properties stay the half message's, TRAN_MSG, PGROUP, REAL_TOPIC
        and REAL_QID included: Apache clears them from the map after writing the
        properties string it stores, so Java consumers see them, and so do rmqk's.
        """
        props = half.properties
        topic = props.get(MessageProperty.REAL_TOPIC, "")
        real_qid = props.get(MessageProperty.REAL_QUEUE_ID, "")
        queue_id = int(real_qid) if real_qid.isdigit() else 0
        result: PutResult = self.ctx.store.put_message(
            topic=topic,
            queue_id=queue_id,
            body=half.body,
            flag=half.flag,
            properties_raw=java_properties_string(props),
            sys_flag=reset_transaction_bits(half.sys_flag, COMMIT_TYPE),
            born_timestamp=half.born_timestamp,
            born_host=half.born_host,
            reconsume_times=half.reconsume_times,
        )
        return result


def _check_prepare_message(
    half: MessageExt | None, group: str, table_offset: int, commit_log_offset: int
) -> str | None:
    """checkPrepareMessage (plus the half-topic test); the refusal's remark or None."""
    if half is None:
        return "Find prepared transaction message failed"
    if half.topic != HALF_TOPIC:
        return f"the message at commit log offset {commit_log_offset} is not a half message"
    if half.properties.get(MessageProperty.PRODUCER_GROUP) != group:
        return "The producer group wrong"
    if half.queue_offset != table_offset:
        return "The transaction state table offset wrong"
    if half.commit_log_offset != commit_log_offset:
        return "The commit log offset wrong"
    return None
