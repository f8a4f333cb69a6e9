"""Consumer calls of the ``tcp`` transport: pulls, offsets, heartbeats, locks, send-back.

Each builds the request header Java's ``MQClientAPIImpl`` sends (the same
``extFields`` names) and turns the answer into kernel value types.
"""

from __future__ import annotations

from collections.abc import Iterable

from rmqk.model import MessageQueue, PullResult, PullStatus, SkippedRecord, SubscriptionData
from rmqk.model.errors import BrokerError
from rmqk.model.message import MessageExt
from rmqk.plugins.remoting.pull_body import decode_plain, decode_pull_body
from rmqk.plugins.remoting.replies import check_success, header_int
from rmqk.plugins.remoting.rpc import RemotingClient
from rmqk.spi.transport import HeartbeatData, PullMessageRequest
from rmqk.wire import bodies
from rmqk.wire.message_codec import decode_messages
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["ConsumerCalls", "pull_command"]

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def _found(response: RemotingCommand, request: PullMessageRequest, addr: str) -> PullResult | None:
    """A FOUND answer whose header numbers all parse and whose records all decode
    plainly, in fewer steps; None for anything else, which ``_pull_result`` then
    handles (and reports) as before."""
    fields = response.ext_fields
    try:
        next_begin_offset = int(fields["nextBeginOffset"])
        min_offset = int(fields["minOffset"])
        max_offset = int(fields["maxOffset"])
        suggest = int(fields["suggestWhichBrokerId"])
    except (KeyError, ValueError):
        return None
    broker_name = request.broker_name
    if not broker_name:
        return None
    messages = decode_plain(response.body, broker_name, request.max_body_size)
    if messages is None:
        return None
    return PullResult(
        status=PullStatus.FOUND,
        next_begin_offset=next_begin_offset,
        min_offset=min_offset,
        max_offset=max_offset,
        messages=messages,
        suggest_which_broker_id=suggest,
    )


def pull_command(request: PullMessageRequest) -> RemotingCommand:
    """The PULL_MESSAGE command of ``request``: the one encoding of a pull header."""
    # The fields typed out rather than through stringify_fields: this runs for
    # every pull. Field order matches the other requests (Java's header class).
    fields = {
        "consumerGroup": request.consumer_group,
        "topic": request.topic,
        "queueId": str(request.queue_id),
        "queueOffset": str(request.queue_offset),
        "maxMsgNums": str(request.max_msg_nums),
        "sysFlag": str(request.sys_flag),
        "commitOffset": str(request.commit_offset),
        "suspendTimeoutMillis": str(request.suspend_timeout_millis),
    }
    if request.subscription is not None:
        fields["subscription"] = request.subscription
    fields["subVersion"] = str(request.sub_version)
    fields["expressionType"] = request.expression_type
    if request.broker_name:
        fields["bname"] = request.broker_name
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=fields)


class ConsumerCalls(RemotingClient):
    async def pull_message(
        self, addr: str, request: PullMessageRequest, timeout_ms: int
    ) -> PullResult:
        cmd = pull_command(request)
        # Java pulls with invokeAsync: no timer per long poll (the sweep enforces the
        # timeout), and a timeout leaves the connection open for the other queues.
        pool = self._pool
        conn = None if pool is None or self._closed else pool.connection(addr)
        if pool is None or conn is None:
            response = await self.invoke_swept(addr, cmd, timeout_ms)
        else:
            # invoke_swept's open-connection case inline: one coroutine less per pull.
            self.before_request(addr, cmd)
            future = conn.request_async(cmd, timeout_ms, pool.serialize_type)
            try:
                response = await future
            finally:
                # Cancelling the waiter cancels the future too; withdraw it either way.
                if not future.done() or future.cancelled():
                    conn.withdraw(cmd, future)
            self.after_response(addr, cmd, response)
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, response.remark, addr)
        if status is PullStatus.FOUND and request.skip_bad_records and response.body:
            fast = _found(response, request, addr)
            if fast is not None:
                return fast
        return self._pull_result(response, status, request, addr)

    def _pull_result(
        self, response: RemotingCommand, status: PullStatus, request: PullMessageRequest, addr: str
    ) -> PullResult:
        messages: tuple[MessageExt, ...] = ()
        skipped: tuple[SkippedRecord, ...] = ()
        next_begin_offset = header_int(response, "nextBeginOffset", addr)
        if status is PullStatus.FOUND and response.body:
            broker_name = request.broker_name or self.broker_name_of(addr)
            if request.skip_bad_records:
                decoded = decode_pull_body(
                    response.body,
                    broker_name,
                    queue_id=request.queue_id,
                    request_offset=request.queue_offset,
                    next_begin_offset=next_begin_offset,
                    max_body_size=request.max_body_size,
                )
                messages, skipped = decoded.messages, decoded.skipped
                next_begin_offset = decoded.next_begin_offset
            else:
                messages = tuple(
                    decode_messages(response.body, broker_name, max_body_size=request.max_body_size)
                )
        return PullResult(
            status=status,
            next_begin_offset=next_begin_offset,
            min_offset=header_int(response, "minOffset", addr),
            max_offset=header_int(response, "maxOffset", addr),
            messages=messages,
            suggest_which_broker_id=header_int(response, "suggestWhichBrokerId", addr),
            skipped=skipped,
        )

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int | None:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": mq.queue_id,
                "bname": mq.broker_name,
            },
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        check_success(response, addr)
        return header_int(response, "offset", addr)

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        oneway: bool = True,
        timeout_ms: int | None = None,
    ) -> None:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": mq.queue_id,
                "commitOffset": offset,
                "bname": mq.broker_name,
            },
        )
        if oneway:
            await self.invoke_oneway(addr, cmd, timeout_ms)
            return
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def send_heartbeat(
        self, addr: str, heartbeat: HeartbeatData, timeout_ms: int | None = None
    ) -> int:
        cmd = RemotingCommand.request(
            RequestCode.HEART_BEAT, body=bodies.encode_heartbeat(heartbeat)
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        check_success(response, addr)
        return response.version

    async def check_client_config(
        self,
        addr: str,
        group: str,
        client_id: str,
        subscription: SubscriptionData,
        timeout_ms: int | None = None,
    ) -> None:
        cmd = RemotingCommand.request(
            RequestCode.CHECK_CLIENT_CONFIG,
            body=bodies.encode_check_client(client_id, group, subscription),
        )
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        producer_group: str | None,
        consumer_group: str | None,
        timeout_ms: int | None = None,
    ) -> None:
        cmd = RemotingCommand.request(
            RequestCode.UNREGISTER_CLIENT,
            {
                "clientID": client_id,
                "producerGroup": producer_group,
                "consumerGroup": consumer_group,
            },
        )
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def get_consumer_ids(
        self, addr: str, group: str, timeout_ms: int | None = None
    ) -> list[str]:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise BrokerError(response.code, response.remark, addr)
        return bodies.decode_consumer_id_list(response.body)

    async def lock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        timeout_ms: int | None = None,
    ) -> set[MessageQueue]:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.LOCK_BATCH_MQ,
            body=bodies.encode_lock_batch_request(group, client_id, mqs),
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        check_success(response, addr)
        if not response.body:
            return set()
        return bodies.decode_lock_batch_response(response.body)

    async def unlock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        oneway: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.UNLOCK_BATCH_MQ,
            body=bodies.encode_lock_batch_request(group, client_id, mqs),
        )
        if oneway:
            await self.invoke_oneway(addr, cmd, timeout_ms)
            return
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def consumer_send_msg_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        timeout_ms: int | None = None,
    ) -> None:
        # Java sends this through brokerVIPChannel.
        addr = self.vip(addr)
        cmd = RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": msg.commit_log_offset,
                "group": group,
                "delayLevel": delay_level,
                "originMsgId": msg.msg_id,
                "originTopic": msg.topic,
                "unitMode": False,
                "maxReconsumeTimes": max_reconsume_times,
                "bname": msg.broker_name or None,
            },
        )
        check_success(await self.invoke(addr, cmd, timeout_ms), addr)
