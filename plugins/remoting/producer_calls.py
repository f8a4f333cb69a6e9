"""Producer calls of the ``tcp`` transport: SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and
SEND_REPLY_MESSAGE_V2.

The send result names the message by its UNIQ_KEY (the ids of a batch joined by
commas), falling back to the broker's offset message id, as Java's
``MQClientAPIImpl.processSendResponse`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from rmqk.model import MessageQueue, SendResult, SendStatus
from rmqk.model.errors import BrokerError
from rmqk.model.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Message,
    MessageProperty,
    parse_properties,
)
from rmqk.plugins.remoting.replies import header_int
from rmqk.plugins.remoting.rpc import RemotingClient
from rmqk.spi.transport import SendMessageRequest
from rmqk.wire.message_codec import decode_batch, encode_batch
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["DEFAULT_REGION_ID", "ProducerCalls"]

# MixAll.DEFAULT_TRACE_REGION_ID: the region a send result reports when the broker names none.
DEFAULT_REGION_ID = "DefaultRegion"

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


def _property_value(text: str, key: str) -> str:
    """One property of a ``k\x01v\x02`` text without parsing the rest ("" if absent).

    The last occurrence wins, as with parse_properties (a Java HashMap put).
    """
    probe = f"{key}{NAME_VALUE_SEPARATOR}"
    end = len(text)
    while True:
        at = text.rfind(probe, 0, end)
        if at < 0:
            return ""
        if at == 0 or text[at - 1] == PROPERTY_SEPARATOR:
            begin = at + len(probe)
            stop = text.find(PROPERTY_SEPARATOR, begin)
            value = text[begin:] if stop < 0 else text[begin:stop]
            if value:  # an empty value is skipped, as parse_properties does
                return value
        end = at + len(probe) - 1


def _batch_uniq_ids(body: bytes) -> list[str]:
    """The UNIQ_KEY of each message of a SEND_BATCH_MESSAGE body, in order."""
    key = MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    ids = (parse_properties(entry.properties_raw).get(key) for entry in decode_batch(body))
    return [uniq for uniq in ids if uniq]


class ProducerCalls(RemotingClient):
    def encode_batch(self, messages: Sequence[Message]) -> bytes:
        return encode_batch(messages)

    async def send_message(
        self,
        addr: str,
        broker_name: str,
        request: SendMessageRequest,
        body: bytes,
        timeout_ms: int | None = None,
        oneway: bool = False,
    ) -> SendResult | None:
        # sendKernelImpl sends through brokerVIPChannel.
        addr = self.vip(addr)
        if request.batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        elif _property_value(request.properties, MessageProperty.MESSAGE_TYPE) == "reply":
            # MQClientAPIImpl.sendMessage's isReply: a reply (MessageUtil.createReplyMessage)
            # goes as SEND_REPLY_MESSAGE_V2, which a broker pushes to the requester.
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        else:
            code = RequestCode.SEND_MESSAGE_V2
        cmd = RemotingCommand.request(
            code,
            {
                "a": request.producer_group,
                "b": request.topic,
                "c": request.default_topic,
                "d": request.default_topic_queue_nums,
                "e": request.queue_id,
                "f": request.sys_flag,
                "g": request.born_timestamp,
                "h": request.flag,
                "i": request.properties,
                "j": request.reconsume_times,
                "k": request.unit_mode,
                "l": request.max_reconsume_times,
                "m": request.batch,
                "n": broker_name,
            },
            body=body,
        )
        if oneway:
            await self.invoke_oneway(addr, cmd, timeout_ms)
            return None
        response = await self.invoke(addr, cmd, timeout_ms)
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, response.remark, addr)
        offset_msg_id = response.ext_fields.get("msgId", "")
        if request.batch:
            uniq = ",".join(_batch_uniq_ids(body))
        else:
            uniq = _property_value(
                request.properties, MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
            )
        return SendResult(
            status=status,
            msg_id=uniq or offset_msg_id,
            offset_msg_id=offset_msg_id,
            queue=MessageQueue(request.topic, broker_name, header_int(response, "queueId", addr)),
            queue_offset=header_int(response, "queueOffset", addr),
            transaction_id=response.ext_fields.get("transactionId"),
            region_id=response.ext_fields.get("MSG_REGION") or DEFAULT_REGION_ID,
        )
