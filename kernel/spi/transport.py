"""The client side of the RocketMQ remoting protocol, as the engine sees it.

A transport plugin (``tcp`` by default) implements :class:`Transport`: every call
a push consumer, a lite pull consumer and a producer make to name servers and
brokers, with kernel value types in and out. The engine never sees bytes.
Broker-pushed requests reach the engine through :class:`InboundHandler`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    PullResult,
    SendResult,
    SubscriptionData,
    TopicRouteData,
)
from rmqk.model.message import Message, MessageExt
from rmqk.wire.protocol import RemotingCommand


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _sub_tuple(values: Iterable[SubscriptionData]) -> tuple[SubscriptionData, ...]:
    return tuple(values)


__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BODY_SIZE",
    "CheckTransactionStateRequest",
    "ConsumeMessageDirectlyResult",
    "ConsumeStatus",
    "ConsumerData",
    "ConsumerRunningInfo",
    "Credentials",
    "HeartbeatData",
    "InboundHandler",
    "ProcessQueueInfo",
    "ProducerData",
    "PullMessageRequest",
    "SendMessageRequest",
    "TlsConfig",
    "Transport",
    "TransportConfig",
]


@attrs.frozen
class TlsConfig:
    """TLS on the remoting port (Apache's ``tls.*`` client settings)."""

    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_hostname: str | None = None


@attrs.frozen(repr=False)
class Credentials:
    """An ACL access key and its secret (Java's SessionCredentials).

    The secret key and the security token never show in a repr or a log.
    """

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:
        token = ", security_token=***" if self.security_token else ""
        return f"Credentials(access_key={self.access_key!r}, secret_key=***{token})"


@attrs.frozen
class TransportConfig:
    """What a transport factory is given (NettyClientConfig plus name servers)."""

    namesrv_addrs: tuple[str, ...] = attrs.field(converter=_str_tuple)
    client_id: str = "127.0.0.1@DEFAULT"
    connect_timeout_ms: int = 3000
    request_timeout_ms: int = 3000
    async_permits: int = 65535
    oneway_permits: int = 65535
    channel_max_idle_s: int = 120
    serialize_type: str = "JSON"  # or "ROCKETMQ"
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # The client's own ACL credentials (its access_key / secret_key options): a transport
    # signs every request it sends with them as Apache's AclClientRPCHook does, after the
    # rmqk_before_request hooks ran. None: the process defaults apply (the acl plugin's
    # [acl] table or environment variables, through rmqk_before_request).
    credentials: Credentials | None = None
    # The plugin manager's hook relay (pm.hook), for calling the RPC hooks; None: none.
    hook: Any = attrs.field(default=None, eq=False, repr=False)


# Java's producer refuses an uncompressed body over its maxMessageSize (4 MiB by
# default, Validators.checkMessage) before compressing it, and the broker stores at
# most its own maxMessageSize (4 MiB): 64 MiB leaves 16 times that for clusters that
# raised both limits, while bounding what one hostile record costs a consumer.
DEFAULT_MAX_DECOMPRESSED_BODY_SIZE = 64 * 1024 * 1024


# A dict class: frozen slotted attrs classes set each field through
# object.__setattr__ (2.4 us for these 14 per pull); this one writes its __dict__ (1 us).
@attrs.frozen(slots=False)
class PullMessageRequest:
    """PullMessageRequestHeader."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int
    expression_type: str = "TAG"
    # Sent as ``bname`` (4.9's RpcRequestHeader); also names the broker of pulled messages.
    broker_name: str = ""
    # Not sent: how the transport decodes the answer. A compressed body inflating
    # past ``max_body_size`` is a bad record. With ``skip_bad_records`` a bad record
    # is left out and listed in PullResult.skipped; without, it fails the whole pull.
    max_body_size: int = DEFAULT_MAX_DECOMPRESSED_BODY_SIZE
    skip_bad_records: bool = False


@attrs.frozen
class SendMessageRequest:
    """SendMessageRequestHeader (sent as the V2 short-named header by default)."""

    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4


@attrs.frozen
class ConsumerData:
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: tuple[SubscriptionData, ...] = attrs.field(converter=_sub_tuple)
    unit_mode: bool = False


@attrs.frozen
class ProducerData:
    group_name: str


def _producers(values: Iterable[ProducerData]) -> tuple[ProducerData, ...]:
    return tuple(values)


def _consumers(values: Iterable[ConsumerData]) -> tuple[ConsumerData, ...]:
    return tuple(values)


@attrs.frozen
class HeartbeatData:
    client_id: str
    producers: tuple[ProducerData, ...] = attrs.field(default=(), converter=_producers)
    consumers: tuple[ConsumerData, ...] = attrs.field(default=(), converter=_consumers)


@attrs.frozen
class ConsumeMessageDirectlyResult:
    order: bool
    auto_commit: bool
    consume_result: str  # CR_SUCCESS, CR_LATER, CR_RETURN_NULL, CR_THROW_EXCEPTION, ...
    remark: str | None
    spent_time_mills: int


@attrs.frozen
class ProcessQueueInfo:
    """Java's ProcessQueueInfo: one held queue in a running-info report.

    Each field is one of the Java class's (``droped`` is Java's spelling); the
    transport writes them under Java's names.
    """

    commit_offset: int
    cached_msg_min_offset: int
    cached_msg_max_offset: int
    cached_msg_count: int
    cached_msg_size_in_mib: int
    transaction_msg_min_offset: int
    transaction_msg_max_offset: int
    transaction_msg_count: int
    locked: bool
    try_unlock_times: int
    last_lock_timestamp: int
    droped: bool
    last_pull_timestamp: int
    last_consume_timestamp: int


@attrs.frozen
class ConsumeStatus:
    """Java's ConsumeStatus: one topic's consume statistics in a running-info report."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0


@attrs.frozen
class ConsumerRunningInfo:
    """Java's ConsumerRunningInfo, the answer to GET_CONSUMER_RUNNING_INFO.

    A value, not bytes: the transport writes it the way Java's tools read it
    (fastjson's object keys for ``mqTable``), so every transport writes the same.
    """

    properties: Mapping[str, str]
    subscriptions: tuple[SubscriptionData, ...] = attrs.field(converter=_sub_tuple, default=())
    mq_table: Mapping[MessageQueue, ProcessQueueInfo] = attrs.field(factory=dict)
    status_table: Mapping[str, ConsumeStatus] = attrs.field(factory=dict)
    jstack: str | None = None


@attrs.frozen
class CheckTransactionStateRequest:
    """CheckTransactionStateRequestHeader: which half message a broker asks about."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    broker_name: str | None = None


class InboundHandler(Protocol):
    """The engine's side of broker-pushed requests (ClientRemotingProcessor).

    A transport calls these when a broker sends the matching request code; an
    unset handler, or one that raises NotImplementedError, makes the transport
    answer REQUEST_CODE_NOT_SUPPORTED as Java does.
    """

    async def notify_consumer_ids_changed(self, group: str) -> None: ...

    async def reset_offset(
        self, topic: str, group: str, offsets: Mapping[MessageQueue, int]
    ) -> None: ...

    async def get_consumer_status(self, topic: str, group: str) -> dict[MessageQueue, int]: ...

    async def get_consumer_running_info(self, group: str, jstack: bool) -> ConsumerRunningInfo: ...

    async def consume_message_directly(
        self, group: str, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult: ...

    async def check_transaction_state(
        self, addr: str, header: CheckTransactionStateRequest, msg: MessageExt
    ) -> None:
        """CHECK_TRANSACTION_STATE from the broker at ``addr``; answered by END_TRANSACTION."""
        ...

    async def receive_reply_message(self, msg: MessageExt) -> None:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: the reply to one of this client's requests."""
        ...


class Transport(Protocol):
    """MQClientAPIImpl over some wire. Every method raises a RemotingError subclass
    on connection trouble and BrokerError on an error response."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def set_inbound_handler(self, handler: InboundHandler | None) -> None: ...

    def update_namesrv_addrs(self, addrs: Iterable[str]) -> None: ...

    # raw calls, for tools and plugins that speak codes the API below lacks
    async def invoke(
        self, addr: str, request: RemotingCommand, timeout_ms: int | None = None
    ) -> RemotingCommand: ...

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None: ...

    # name server
    async def get_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData | None:
        """The route of a topic, or None when the name server says it does not exist."""
        ...

    # broker: consuming
    async def pull_message(
        self, addr: str, request: PullMessageRequest, timeout_ms: int
    ) -> PullResult: ...

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int | None:
        """The committed offset, or None when the broker has none (QUERY_NOT_FOUND)."""
        ...

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        oneway: bool = True,
        timeout_ms: int | None = None,
    ) -> None: ...

    async def send_heartbeat(
        self, addr: str, heartbeat: HeartbeatData, timeout_ms: int | None = None
    ) -> int:
        """Returns the broker's protocol version."""
        ...

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        producer_group: str | None,
        consumer_group: str | None,
        timeout_ms: int | None = None,
    ) -> None: ...

    async def check_client_config(
        self,
        addr: str,
        group: str,
        client_id: str,
        subscription: SubscriptionData,
        timeout_ms: int | None = None,
    ) -> None:
        """CHECK_CLIENT_CONFIG: raises BrokerError when the broker cannot filter by it."""
        ...

    async def get_consumer_ids(
        self, addr: str, group: str, timeout_ms: int | None = None
    ) -> list[str]: ...

    async def lock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        timeout_ms: int | None = None,
    ) -> set[MessageQueue]: ...

    async def unlock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        oneway: bool = False,
        timeout_ms: int | None = None,
    ) -> None: ...

    async def consumer_send_msg_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        timeout_ms: int | None = None,
    ) -> None: ...

    async def get_max_offset(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int: ...

    async def get_min_offset(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int: ...

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout_ms: int | None = None
    ) -> int: ...

    async def get_earliest_msg_store_time(
        self, addr: str, mq: MessageQueue, timeout_ms: int | None = None
    ) -> int: ...

    async def view_message(
        self, addr: str, commit_log_offset: int, timeout_ms: int | None = None
    ) -> MessageExt: ...

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
        """QUERY_MESSAGE: (indexLastUpdateTimestamp, the messages the index matched by
        hash); BrokerError on any answer but SUCCESS."""
        ...

    # broker: producing
    def encode_batch(self, messages: Sequence[Message]) -> bytes:
        """The SEND_BATCH_MESSAGE body for ``messages`` (the producer sends it as-is)."""
        ...

    async def send_message(
        self,
        addr: str,
        broker_name: str,
        request: SendMessageRequest,
        body: bytes,
        timeout_ms: int | None = None,
        oneway: bool = False,
    ) -> SendResult | None:
        """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE when ``request.batch``); None when oneway."""
        ...

    # admin
    async def create_topic(
        self,
        addr: str,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        timeout_ms: int | None = None,
        default_topic: str = "TBW102",
        topic_sys_flag: int = 0,
    ) -> None: ...
