"""RocketMQ 4.9 remoting constants and the transport-neutral command object.

The byte layout of frames lives in the ``tcp`` transport plugin; the kernel only
knows the command model, so that RPC hooks (ACL signing, tracing) and the engine's
handlers of broker-pushed requests work with any transport.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping

__all__ = [
    "PROTOCOL_VERSION",
    "RPC_ONEWAY",
    "RPC_TYPE_RESPONSE",
    "LanguageCode",
    "PullSysFlag",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
]

RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2
# The version a 4.9.8 Java client sends: the ordinal of MQVersion.Version.V4_9_8.
PROTOCOL_VERSION = 409


class RequestCode(enum.IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_TOPIC_STATS_INFO = 202
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    GET_CONSUME_STATS = 208
    GET_CONSUMER_CONNECTION_LIST = 203
    REGISTER_MESSAGE_FILTER_CLASS = 302
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    FLOW_CONTROL = 215
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006


class LanguageCode(enum.IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class PullSysFlag(enum.IntFlag):
    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10


_opaque_counter = itertools.count()


def next_opaque() -> int:
    """A process-wide request id, wrapped to a signed 32-bit int like Java's AtomicInteger."""
    n = next(_opaque_counter) & 0xFFFFFFFF
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


class RemotingCommand:
    """One request or response: code, flags, opaque, remark, string fields and a body.

    Mutable on purpose: RPC hooks add fields (the ACL signature) before the
    command is encoded, exactly as Java's RPCHook mutates the RemotingCommand.
    """

    __slots__ = ("body", "code", "ext_fields", "flag", "language", "opaque", "remark", "version")

    def __init__(
        self,
        code: int,
        *,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
        remark: str | None = None,
        opaque: int | None = None,
        flag: int = 0,
        language: int | str = LanguageCode.PYTHON,
        version: int = PROTOCOL_VERSION,
    ) -> None:
        self.code = int(code)
        self.language = language
        self.version = version
        self.opaque = next_opaque() if opaque is None else opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, str] = dict(ext_fields or {})
        self.body = body

    @classmethod
    def request(
        cls,
        code: int,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        language: int | str = LanguageCode.PYTHON,
        version: int = PROTOCOL_VERSION,
    ) -> RemotingCommand:
        """A request whose header fields are stringified as Java's makeCustomHeaderToNet does."""
        return cls(
            code,
            ext_fields=stringify_fields(fields or {}),
            body=body,
            language=language,
            version=version,
        )

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        language: int | str = LanguageCode.PYTHON,
        version: int = PROTOCOL_VERSION,
    ) -> RemotingCommand:
        return cls(
            code,
            ext_fields=stringify_fields(fields or {}),
            body=body,
            remark=remark,
            opaque=request.opaque,
            flag=RPC_TYPE_RESPONSE,
            language=language,
            version=version,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def mark_oneway(self) -> None:
        self.flag |= RPC_ONEWAY

    def field(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code}, opaque={self.opaque}, "
            f"remark={self.remark!r}, fields={self.ext_fields!r}, body={len(self.body)}B)"
        )


def stringify_fields(fields: Mapping[str, object]) -> dict[str, str]:
    """Header fields as strings; None is skipped and booleans are Java's ``true``/``false``."""
    out: dict[str, str] = {}
    for key, value in fields.items():
        # Exact str and int first: nearly every field, on every request.
        kind = value.__class__
        if kind is str:
            out[key] = value  # type: ignore[assignment]
        elif kind is int:
            out[key] = str(value)
        elif value is None:
            continue
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, enum.Enum):
            out[key] = str(value.value)
        else:
            out[key] = str(value)
    return out
