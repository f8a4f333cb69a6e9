"""Admin calls of the ``tcp`` transport: queue offsets and times, a message by offset, topics.

What Java's ``MQAdminImpl`` asks a broker, answered in kernel value types.
"""

from __future__ import annotations

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.remoting.replies import check_success, header_int, protocol_error
from rmqk.plugins.remoting.rpc import RemotingClient
from rmqk.wire.message_codec import decode_messages
from rmqk.wire.protocol import RemotingCommand, RequestCode

__all__ = ["AdminCalls"]

class AdminCalls(RemotingClient):
    async def _queue_query(
        self,
        code: RequestCode,
        addr: str,
        mq: MessageQueue,
        answer: str,
        timeout_ms: int | None,
        **extra: object,
    ) -> int:
        # Java sends these queue queries through brokerVIPChannel.
        addr = self.vip(addr)
        fields: dict[str, object] = {"topic": mq.topic, "queueId": mq.queue_id}
        fields.update(extra)
        fields["bname"] = mq.broker_name
        response = await self.invoke(addr, RemotingCommand.request(code, fields), timeout_ms)
        check_success(response, addr)
        return header_int(response, answer, addr)

    async def get_max_offset(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int:
        return await self._queue_query(RequestCode.GET_MAX_OFFSET, addr, mq, "offset", timeout_ms)

    async def get_min_offset(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int:
        return await self._queue_query(RequestCode.GET_MIN_OFFSET, addr, mq, "offset", timeout_ms)

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout_ms: int | None = None
    ) -> int:
        return await self._queue_query(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            addr,
            mq,
            "offset",
            timeout_ms,
            timestamp=timestamp_ms,
        )

    async def get_earliest_msg_store_time(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int:
        return await self._queue_query(
            RequestCode.GET_EARLIEST_MSG_STORETIME, addr, mq, "timestamp", timeout_ms
        )

    async def view_message(
        self, addr: str, commit_log_offset: int, timeout_ms: int | None = None
    ) -> MessageExt:
        cmd = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_log_offset})
        target = self.vip(addr)
        response = await self.invoke(target, cmd, timeout_ms)
        check_success(response, target)
        messages = decode_messages(response.body, self.broker_name_of(addr))
        if not messages:
            raise protocol_error(
                target, response.code, "VIEW_MESSAGE_BY_ID answer holds no message"
            )
        return messages[0]

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        max_num: int,
        begin_timestamp: int,
        end_timestamp: int,
        unique_key: bool = False,
        timeout_ms: int | None = None,
    ) -> tuple[int, list[MessageExt]]:
        cmd = RemotingCommand.request(
            RequestCode.QUERY_MESSAGE,
            {
                "topic": topic,
                "key": key,
                "maxNum": max_num,
                "beginTimestamp": begin_timestamp,
                "endTimestamp": end_timestamp,
                # MixAll.UNIQUE_MSG_QUERY_FLAG, always sent by MQClientAPIImpl.queryMessage.
                "_UNIQUE_KEY_QUERY": "true" if unique_key else "false",
            },
        )
        target = self.vip(addr)
        response = await self.invoke(target, cmd, timeout_ms)
        check_success(response, target)
        stamp = header_int(response, "indexLastUpdateTimestamp", target)
        return stamp, decode_messages(response.body, self.broker_name_of(addr))

    async def create_topic(
        self,
        addr: str,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        timeout_ms: int | None = None,
        # The topic whose settings a new topic copies (AUTO_CREATE_TOPIC_KEY_TOPIC).
        default_topic: str = "TBW102",
        topic_sys_flag: int = 0,
    ) -> None:
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                # MQAdmin.createTopic's key; TBW102 for the tools.
                "defaultTopic": default_topic,
                "readQueueNums": read_queue_nums,
                "writeQueueNums": write_queue_nums,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": topic_sys_flag,
                "order": False,
            },
        )
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)
