"""ReplyMessageProcessor: SEND_REPLY_MESSAGE (V1, V2), the reply of a request-reply exchange.

As Apache 4.9.8: the reply is checked as a send is (msgCheck), pushed with
PUSH_REPLY_MESSAGE_TO_CLIENT to the connection of the client its REPLY_TO_CLIENT
property names (a producer registered by heartbeat), and then stored in its
topic (Apache's ``storeReplyMessageEnable``, on by default; the embedded broker
always stores). The answer is SUCCESS with message id "0" and offset 0 when the
push succeeded (overwritten by the stored message's id and offset), or
SYSTEM_ERROR saying why the push failed.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Coroutine
from typing import Any

from rmqk.model.errors import RemotingError
from rmqk.model.message import MessageProperty, format_properties, parse_properties
from rmqk.plugins.broker.commands import make_request
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.context import BrokerContext, Processor
from rmqk.plugins.broker.processors.send import SendMessageProcessor
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["ReplyMessageProcessor"]

log = logging.getLogger("rmqk.broker")


class ReplyMessageProcessor(Processor):
    """Pushes replies to the requesting client (and stores them)."""

    def __init__(self, ctx: BrokerContext, send: SendMessageProcessor) -> None:
        super().__init__(ctx)
        # The header decoding, the response's fixed fields and msgCheck are the send's.
        self.send = send

    def send_reply_message(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> Coroutine[Any, Any, RemotingCommand]:
        return self._process(conn, request)

    async def _process(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = self.send.send_header(request)
        response = self.send.send_response(request)
        cfg = self.send.msg_check(conn, header, response)
        if cfg is None:
            return response
        queue_id = header.queue_id if header.queue_id is not None else -1
        if queue_id < 0:
            queue_id = random.randrange(99999999) % cfg.write_queue_nums
        props = parse_properties(header.properties)
        store_host = self.ctx.settings.broker_addr
        fields: dict[str, object] = {
            # 4.9.8 writes both hosts as "ip:port" (getHostAddress() + ":" + port).
            "bornHost": conn.remote_addr,
            "storeHost": store_host,
            "storeTimestamp": int(time.time() * 1000),
            "producerGroup": header.producer_group,
            "topic": header.topic,
            "defaultTopic": header.default_topic,
            "defaultTopicQueueNums": header.default_topic_queue_nums,
            "queueId": header.queue_id,
            "sysFlag": header.sys_flag,
            "bornTimestamp": header.born_timestamp,
            "flag": header.flag,
            "properties": header.properties,
            "reconsumeTimes": header.reconsume_times,
            "unitMode": header.unit_mode,
        }
        remark = await self._push(request, props, fields)
        if remark is not None:
            response.code, response.remark = ResponseCode.SYSTEM_ERROR, remark
        else:
            response.code, response.remark = ResponseCode.SUCCESS, None
            # Apache's "set to zero to avoid client decoding exception".
            response.ext_fields["msgId"] = "0"
            response.ext_fields["queueId"] = str(queue_id)
            response.ext_fields["queueOffset"] = "0"
        result = self.ctx.store.put_message(
            topic=header.topic,
            queue_id=queue_id,
            body=request.body,
            flag=header.flag or 0,
            properties_raw=header.properties or "",
            sys_flag=header.sys_flag or 0,
            born_timestamp=header.born_timestamp or 0,
            born_host=conn.remote_addr,
            reconsume_times=header.reconsume_times or 0,
        )
        if result is not None and result.ok:
            response.ext_fields["msgId"] = str(result.msg_id)
            response.ext_fields["queueId"] = str(queue_id)
            response.ext_fields["queueOffset"] = str(result.queue_offset)
        else:
            # Apache only logs a failed store; the answer stays the push's.
            log.warning("process reply message, store putMessage failed: %s", result)
        return response

    async def _push(
        self, request: RemotingCommand, props: dict[str, str], fields: dict[str, object]
    ) -> str | None:
        """pushReplyMessage: None when the requester took the reply, else the remark."""
        sender_id = props.get(MessageProperty.MESSAGE_REPLY_TO_CLIENT)
        if sender_id is None:
            log.warning("REPLY_TO_CLIENT is null, can not reply message")
            return f"reply message properties[{MessageProperty.MESSAGE_REPLY_TO_CLIENT}] is null"
        channel = self.ctx.clients.find_producer_channel(sender_id)
        if channel is None:
            remark = f"push reply message fail, channel of <{sender_id}> not found."
            log.warning(remark)
            return remark
        props[MessageProperty.PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        fields["properties"] = format_properties(props)
        push = make_request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
            {k: v for k, v in fields.items() if v is not None},
            body=request.body,
        )
        failed = f"push reply message to {sender_id}fail."  # sic: Apache's remark
        try:
            answer = await channel.request(push, self.ctx.settings.call_client_timeout)
        except RemotingError as exc:
            log.warning("push reply message to <%s> fail. %s", sender_id, exc)
            return failed
        if answer.code != ResponseCode.SUCCESS:
            log.warning(
                "push reply message to <%s> return fail, response remark: %s",
                sender_id,
                answer.remark,
            )
            return failed
        return None
