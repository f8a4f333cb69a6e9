"""The ``tcp`` transport: MQClientAPIImpl over RocketMQ 4.9 remoting frames.

:class:`TcpTransport` implements :class:`rmqk.transport.Transport`. Each API
method builds the request header Java's client sends (the same ``extFields``
names), sends it through the :class:`~rmqk.plugins.remoting.connection.ConnectionPool`,
and turns the response into kernel value types, raising
:class:`~rmqk.errors.BrokerError` for an error code as ``MQClientAPIImpl`` throws
``MQBrokerException``. Requests brokers send to the client are answered the way
Java's ``ClientRemotingProcessor`` answers them, through the engine's
:class:`~rmqk.transport.InboundHandler`.

RPC hooks: ``rmqk_before_request`` runs before every request sent and before a
broker-pushed request is handled; ``rmqk_after_response`` runs after a sync
call's response arrived and after a broker-pushed request was handled (with the
answer, or None), exactly where Java's NettyRemotingClient calls its RPCHook.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from rmqk.errors import BrokerError, ConfigError, RemotingConnectError, RemotingError
from rmqk.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Message,
    MessageExt,
    MessageProperty,
    parse_properties,
)
from rmqk.model import (
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    TopicRouteData,
)
from rmqk.plugins.remoting import bodies
from rmqk.plugins.remoting.connection import Connection, ConnectionPool
from rmqk.plugins.remoting.frame import SerializeType
from rmqk.plugins.remoting.message_codec import decode_batch, decode_messages, encode_batch
from rmqk.plugins.remoting.namesrv import decode_topic_route
from rmqk.plugins.remoting.tls import client_ssl_context, server_hostname
from rmqk.protocol import RemotingCommand, RequestCode, ResponseCode
from rmqk.transport import (
    HeartbeatData,
    InboundHandler,
    PullMessageRequest,
    SendMessageRequest,
    TransportConfig,
)

__all__ = ["CLOSE_SOCKET_IF_TIMEOUT", "DEFAULT_REGION_ID", "TcpTransport", "exception_simple_desc"]

log = logging.getLogger("rmqk.remoting")

# MixAll.DEFAULT_TRACE_REGION_ID: the region a send result reports when the broker names none.
DEFAULT_REGION_ID = "DefaultRegion"
_TBW102 = "TBW102"
# TransportConfig.options key: close a connection when a sync call on it times out.
CLOSE_SOCKET_IF_TIMEOUT = "client_close_socket_if_timeout"

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

# Java's ClientRemotingProcessor remark when a group is not in this client.
_GROUP_NOT_HERE = "The Consumer Group <{}> not exist in this consumer"


def exception_simple_desc(exc: BaseException) -> str:
    """The remark of a SYSTEM_ERROR answer: the exception and where it was raised
    (RemotingHelper.exceptionSimpleDesc)."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f", {last.name}({os.path.basename(last.filename)}:{last.lineno})"
    return text


def _serialize_type(name: str) -> SerializeType:
    try:
        return SerializeType[name.strip().upper()]
    except KeyError:
        raise ConfigError(f"serialize_type {name!r} is not one of JSON, ROCKETMQ") from None


def _protocol_error(addr: str, code: int, what: str) -> bodies.BodyFormatError:
    return bodies.BodyFormatError(f"response code {code} from {addr}: {what}")


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


def _header_int(response: RemotingCommand, name: str, addr: str) -> int:
    value = response.ext_fields.get(name)
    if value is None:
        raise _protocol_error(addr, response.code, f"header field {name!r} is missing")
    try:
        return int(value)
    except ValueError:
        raise _protocol_error(
            addr, response.code, f"header field {name!r}={value!r} is not an integer"
        ) from None


def _check_success(response: RemotingCommand, addr: str) -> None:
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, response.remark, addr)


def _batch_uniq_ids(body: bytes) -> list[str]:
    """The UNIQ_KEY of each message of a SEND_BATCH_MESSAGE body, in order."""
    key = MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    ids = (parse_properties(entry.properties_raw).get(key) for entry in decode_batch(body))
    return [uniq for uniq in ids if uniq]


InboundFn = Callable[
    ["TcpTransport", InboundHandler, RemotingCommand], Awaitable[RemotingCommand | None]
]


class TcpTransport:
    """The client side of the remoting protocol over TCP (optionally TLS).

    Connections open on first use (``start`` is optional); ``close`` fails what is
    in flight and refuses later calls. ``timeout_ms=None`` means
    ``config.request_timeout_ms``. ``config.options`` may hold
    ``client_close_socket_if_timeout`` (default true, as Java 4.9.8).

    Messages decoded from pulls carry the broker name that the routes fetched
    through :meth:`get_route` give their address.

    Inbound handler conventions beyond :class:`~rmqk.transport.InboundHandler`:
    ``get_consumer_running_info`` and ``consume_message_directly`` may raise
    ``LookupError`` (or return None) for a group this client does not have; the
    broker then gets Java's SYSTEM_ERROR "The Consumer Group <g> not exist in this
    consumer". Any other exception is answered SYSTEM_ERROR with its description.
    """

    def __init__(self, config: TransportConfig, hook: Any | None = None) -> None:
        self.config = config
        self._hook = hook
        self._serialize_type = _serialize_type(config.serialize_type)
        self._ssl = client_ssl_context(config.tls)
        close_if_timeout = config.options.get(CLOSE_SOCKET_IF_TIMEOUT, True)
        if not isinstance(close_if_timeout, bool):
            raise ConfigError(
                f"transport option {CLOSE_SOCKET_IF_TIMEOUT} must be true or false, "
                f"got {close_if_timeout!r}"
            )
        self._close_socket_if_timeout = close_if_timeout
        self._handler: InboundHandler | None = None
        self._pool: ConnectionPool | None = None
        self._closed = False
        self._namesrv_addrs: list[str] = []
        self._namesrv_index = -1
        self._namesrv_chosen: str | None = None
        self._broker_names: dict[str, str] = {}
        self.update_namesrv_addrs(config.namesrv_addrs)

    # -- lifecycle

    async def start(self) -> None:
        self._ensure_pool()

    def _ensure_pool(self) -> ConnectionPool:
        if self._closed:
            raise RemotingConnectError("the tcp transport is closed")
        if self._pool is None:
            tls = self.config.tls
            self._pool = ConnectionPool(
                connect_timeout_ms=self.config.connect_timeout_ms,
                channel_max_idle_s=self.config.channel_max_idle_s,
                async_permits=self.config.async_permits,
                oneway_permits=self.config.oneway_permits,
                serialize_type=self._serialize_type,
                ssl_context=self._ssl,
                tls_server_hostname=lambda host: server_hostname(tls, host),
                on_request=self._on_request,
                close_socket_if_timeout=self._close_socket_if_timeout,
            )
        return self._pool

    @property
    def pool(self) -> ConnectionPool:
        """The connections (started on first use)."""
        return self._ensure_pool()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            await self._pool.close()

    def set_inbound_handler(self, handler: InboundHandler | None) -> None:
        self._handler = handler

    # -- name server list

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        return tuple(self._namesrv_addrs)

    @property
    def chosen_namesrv(self) -> str | None:
        """The name server requests stick to until it fails."""
        return self._namesrv_chosen

    def update_namesrv_addrs(self, addrs: Iterable[str]) -> None:
        """Replace the name server list when its set of addresses changed; the new
        list is shuffled, so clients spread over the name servers (Java does the same)."""
        new = []
        for addr in addrs:
            for part in addr.split(";"):
                if part.strip() and part.strip() not in new:
                    new.append(part.strip())
        if not new or set(new) == set(self._namesrv_addrs):
            return
        random.shuffle(new)
        self._namesrv_addrs = new
        if self._namesrv_chosen not in new:
            self._namesrv_chosen = None

    def _choose_namesrv(self) -> str:
        addrs = self._namesrv_addrs
        if self._namesrv_chosen is not None and self._namesrv_chosen in addrs:
            return self._namesrv_chosen
        self._namesrv_index = (self._namesrv_index + 1) % len(addrs)
        self._namesrv_chosen = addrs[self._namesrv_index]
        return self._namesrv_chosen

    async def invoke_namesrv(
        self, make_request: Callable[[], RemotingCommand], timeout_ms: int | None = None
    ) -> tuple[str, RemotingCommand]:
        """Send to the chosen name server; on connection trouble or a timeout, move
        to the next one, trying each at most once. Returns (address, response)."""
        if not self._namesrv_addrs:
            raise RemotingConnectError("no name server address is configured (namesrv_addrs)")
        failure: RemotingError | None = None
        for _ in range(len(self._namesrv_addrs)):
            addr = self._choose_namesrv()
            try:
                return addr, await self.invoke(addr, make_request(), timeout_ms)
            except RemotingError as exc:
                log.warning("name server %s failed, trying the next one: %s", addr, exc)
                failure = exc
                if self._namesrv_chosen == addr:
                    self._namesrv_chosen = None
        assert failure is not None
        raise failure

    # -- hooks

    def _before(self, addr: str, request: RemotingCommand) -> None:
        if self._hook is not None:
            self._hook.rmqk_before_request(address=addr, request=request)

    def _after(self, addr: str, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if self._hook is not None:
            self._hook.rmqk_after_response(address=addr, request=request, response=response)

    # -- raw calls

    def _timeout(self, timeout_ms: int | None) -> int:
        return self.config.request_timeout_ms if timeout_ms is None else timeout_ms

    async def invoke(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> RemotingCommand:
        """Send ``request`` and wait for the response (invokeSync)."""
        return await self._invoke(addr, request, timeout_ms)

    async def _invoke(
        self,
        addr: str,
        request: RemotingCommand,
        timeout_ms: int | None,
        *,
        close_on_timeout: bool | None = None,
    ) -> RemotingCommand:
        pool = self._ensure_pool()
        self._before(addr, request)
        response = await pool.request(
            addr, request, self._timeout(timeout_ms), close_on_timeout=close_on_timeout
        )
        self._after(addr, request, response)
        return response

    async def invoke_async(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> asyncio.Future[RemotingCommand]:
        """Send ``request`` now and return the future of its response (invokeAsync).

        Holds one of ``async_permits`` until the future is done; a request with no
        response is failed by the sweep within a second after its timeout.
        """
        pool = self._ensure_pool()
        self._before(addr, request)
        return await pool.request_async(addr, request, self._timeout(timeout_ms))

    async def invoke_oneway(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> None:
        """Send ``request`` flagged oneway; no response comes (invokeOneway)."""
        pool = self._ensure_pool()
        self._before(addr, request)
        await pool.oneway(addr, request, self._timeout(timeout_ms))

    # -- name server

    async def get_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData | None:
        def make() -> RemotingCommand:
            return RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
                {"topic": topic, "acceptStandardJsonOnly": True},
            )

        addr, response = await self.invoke_namesrv(make, timeout_ms)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise BrokerError(response.code, response.remark, addr)
        route = decode_topic_route(response.body)
        for broker in route.broker_datas:
            for broker_addr in broker.broker_addrs.values():
                self._broker_names[broker_addr] = broker.broker_name
        return route

    def broker_name_of(self, addr: str) -> str:
        """The broker name the routes seen so far give ``addr`` ("" when unknown)."""
        return self._broker_names.get(addr, "")

    # -- consuming

    async def pull_message(
        self, addr: str, request: PullMessageRequest, timeout_ms: int
    ) -> PullResult:
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
        cmd = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=fields)
        pool = self._ensure_pool()
        self._before(addr, cmd)
        # Java pulls with invokeAsync: no timer per long poll (the sweep enforces the
        # timeout), and a timeout leaves the connection open for the other queues.
        response = await pool.request_swept(addr, cmd, self._timeout(timeout_ms))
        self._after(addr, cmd, response)
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, response.remark, addr)
        messages: tuple[MessageExt, ...] = ()
        if status is PullStatus.FOUND and response.body:
            broker_name = request.broker_name or self.broker_name_of(addr)
            messages = tuple(decode_messages(response.body, broker_name))
        return PullResult(
            status=status,
            next_begin_offset=_header_int(response, "nextBeginOffset", addr),
            min_offset=_header_int(response, "minOffset", addr),
            max_offset=_header_int(response, "maxOffset", addr),
            messages=messages,
            suggest_which_broker_id=_header_int(response, "suggestWhichBrokerId", addr),
        )

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int | None:
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
        _check_success(response, addr)
        return _header_int(response, "offset", addr)

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        oneway: bool = True,
        timeout_ms: int | None = None,
    ) -> None:
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
        _check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def send_heartbeat(
        self, addr: str, heartbeat: HeartbeatData, timeout_ms: int | None = None
    ) -> int:
        cmd = RemotingCommand.request(
            RequestCode.HEART_BEAT, body=bodies.encode_heartbeat(heartbeat)
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        _check_success(response, addr)
        return response.version

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
        _check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def get_consumer_ids(
        self, addr: str, group: str, timeout_ms: int | None = None
    ) -> list[str]:
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
        cmd = RemotingCommand.request(
            RequestCode.LOCK_BATCH_MQ,
            body=bodies.encode_lock_batch_request(group, client_id, mqs),
        )
        response = await self.invoke(addr, cmd, timeout_ms)
        _check_success(response, addr)
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
        cmd = RemotingCommand.request(
            RequestCode.UNLOCK_BATCH_MQ,
            body=bodies.encode_lock_batch_request(group, client_id, mqs),
        )
        if oneway:
            await self.invoke_oneway(addr, cmd, timeout_ms)
            return
        _check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def consumer_send_msg_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        timeout_ms: int | None = None,
    ) -> None:
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
        _check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    async def _queue_query(
        self,
        code: RequestCode,
        addr: str,
        mq: MessageQueue,
        answer: str,
        timeout_ms: int | None,
        **extra: object,
    ) -> int:
        fields: dict[str, object] = {"topic": mq.topic, "queueId": mq.queue_id}
        fields.update(extra)
        fields["bname"] = mq.broker_name
        response = await self.invoke(addr, RemotingCommand.request(code, fields), timeout_ms)
        _check_success(response, addr)
        return _header_int(response, answer, addr)

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
        response = await self.invoke(addr, cmd, timeout_ms)
        _check_success(response, addr)
        messages = decode_messages(response.body, self.broker_name_of(addr))
        if not messages:
            raise _protocol_error(addr, response.code, "VIEW_MESSAGE_BY_ID answer holds no message")
        return messages[0]

    # -- producing

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
        code = RequestCode.SEND_BATCH_MESSAGE if request.batch else RequestCode.SEND_MESSAGE_V2
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
            queue=MessageQueue(request.topic, broker_name, _header_int(response, "queueId", addr)),
            queue_offset=_header_int(response, "queueOffset", addr),
            transaction_id=response.ext_fields.get("transactionId"),
            region_id=response.ext_fields.get("MSG_REGION") or DEFAULT_REGION_ID,
        )

    # -- admin

    async def create_topic(
        self,
        addr: str,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        timeout_ms: int | None = None,
    ) -> None:
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": _TBW102,
                "readQueueNums": read_queue_nums,
                "writeQueueNums": write_queue_nums,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )
        _check_success(await self.invoke(addr, cmd, timeout_ms), addr)

    # -- requests brokers send us (ClientRemotingProcessor)

    def _on_request(self, conn: Connection, cmd: RemotingCommand, st: SerializeType) -> None:
        # Each request runs as its own task: a slow handler (a reset sleeps for
        # seconds in Java) must hold up neither the read loop nor other requests.
        assert self._pool is not None
        self._pool.spawn(self._serve(conn, cmd, st), name=f"rmqk-inbound-{cmd.code}")

    async def _serve(self, conn: Connection, cmd: RemotingCommand, st: SerializeType) -> None:
        handler = self._handler
        fn = _INBOUND.get(cmd.code)
        response: RemotingCommand | None
        if fn is None or handler is None:
            response = _not_supported(cmd)
            # Tools run without a handler and still get NOTIFY_CONSUMER_IDS_CHANGED.
            level = logging.WARNING if fn is None else logging.DEBUG
            log.log(level, "%s: request code %d is not supported here", conn.addr, cmd.code)
        else:
            try:
                self._before(conn.addr, cmd)
                response = await fn(self, handler, cmd)
                self._after(conn.addr, cmd, response)
            except NotImplementedError:
                response = _not_supported(cmd)
            except Exception as exc:
                log.exception("request code %d from %s failed", cmd.code, conn.addr)
                response = RemotingCommand.response_to(
                    cmd, ResponseCode.SYSTEM_ERROR, exception_simple_desc(exc)
                )
        # A oneway sender keeps no record of its request, so an answer would only be
        # logged by the peer as unmatched.
        if response is not None and not cmd.is_oneway:
            conn.send_response(response, st)


def _not_supported(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.response_to(
        cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
    )


def _group_missing(cmd: RemotingCommand, group: str) -> RemotingCommand:
    return RemotingCommand.response_to(
        cmd, ResponseCode.SYSTEM_ERROR, _GROUP_NOT_HERE.format(group)
    )


async def _notify_consumer_ids_changed(
    transport: TcpTransport, handler: InboundHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    await handler.notify_consumer_ids_changed(cmd.field("consumerGroup") or "")
    return None


async def _reset_offset(
    transport: TcpTransport, handler: InboundHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    offsets = bodies.decode_reset_offset(cmd.body) if cmd.body else {}
    await handler.reset_offset(cmd.field("topic") or "", cmd.field("group") or "", offsets)
    return None


async def _get_consumer_status(
    transport: TcpTransport, handler: InboundHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    offsets = await handler.get_consumer_status(cmd.field("topic") or "", cmd.field("group") or "")
    return RemotingCommand.response_to(cmd, body=bodies.encode_consumer_status(offsets))


async def _get_consumer_running_info(
    transport: TcpTransport, handler: InboundHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    group = cmd.field("consumerGroup") or ""
    jstack = (cmd.field("jstackEnable") or "false").lower() == "true"
    try:
        info: bytes | None = await handler.get_consumer_running_info(group, jstack)
    except LookupError:
        info = None
    if info is None:
        return _group_missing(cmd, group)
    return RemotingCommand.response_to(cmd, body=bytes(info))


async def _consume_message_directly(
    transport: TcpTransport, handler: InboundHandler, cmd: RemotingCommand
) -> RemotingCommand | None:
    group = cmd.field("consumerGroup") or ""
    broker_name = cmd.field("brokerName")
    messages = decode_messages(cmd.body, broker_name or "")
    if not messages:
        return RemotingCommand.response_to(
            cmd, ResponseCode.SYSTEM_ERROR, "CONSUME_MESSAGE_DIRECTLY request holds no message"
        )
    try:
        result = await handler.consume_message_directly(group, messages[0], broker_name)
    except LookupError:
        return _group_missing(cmd, group)
    if result is None:  # Java's contract; a handler typed looser than ours may do it
        return _group_missing(cmd, group)  # type: ignore[unreachable,unused-ignore]
    return RemotingCommand.response_to(
        cmd, body=bodies.encode_consume_message_directly_result(result)
    )


_INBOUND: dict[int, InboundFn] = {
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: _notify_consumer_ids_changed,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: _reset_offset,
    RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: _get_consumer_status,
    RequestCode.GET_CONSUMER_RUNNING_INFO: _get_consumer_running_info,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _consume_message_directly,
}
