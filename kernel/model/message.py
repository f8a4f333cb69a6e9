"""Messages: what a producer sends and what a consumer receives.

``MessageExt`` is not an attrs class on purpose: it is built once per consumed
message on the hot path, its properties are parsed only when first read (parsing
them is more than half the cost of a full decode), and the retry path rewrites
its topic the way Java's ``resetRetryAndNamespace`` does.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "Message",
    "MessageExt",
    "MessageProperty",
    "format_properties",
    "offset_msg_id",
    "parse_properties",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class MessageProperty:
    """Reserved property names (MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    INSTANCE_ID = "INSTANCE_ID"
    CLUSTER = "CLUSTER"
    # Request-reply (RocketMQ 4.6+): what a request carries and its reply echoes.
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    MESSAGE_TYPE = "MSG_TYPE"
    KEY_SEPARATOR = " "


def parse_properties(text: str | None) -> dict[str, str]:
    """Parse ``k\\x01v\\x02`` pairs as Java's string2messageProperties does.

    Segments shorter than three characters, and those with an empty key or an
    empty value, are skipped rather than raising: a peer's odd properties must
    never make a message undeliverable.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        key, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            out[key] = value
    return out


def format_properties(props: Mapping[str, str]) -> str:
    """The inverse of :func:`parse_properties` (messageProperties2String)."""
    parts: list[str] = []
    for key, value in props.items():
        if value is None or not key or value == "":
            continue
        parts.append(f"{key}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts)


def _split_host(host: str) -> tuple[str, int]:
    ip, _, port = host.rpartition(":")
    return ip.strip("[]"), int(port)


def offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    """The broker-side message id: upper-case hex of store IP, port and commit log offset."""
    ip, port = _split_host(store_host)
    packed = ipaddress.ip_address(ip).packed
    offset = commit_log_offset.to_bytes(8, "big", signed=True)
    return (packed + port.to_bytes(4, "big") + offset).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Reverse :func:`offset_msg_id`: returns (``ip:port``, commit log offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        ip = str(ipaddress.IPv4Address(raw[:4]))
        rest = raw[4:]
    elif len(raw) == 28:
        ip = "[" + str(ipaddress.IPv6Address(raw[:16])) + "]"
        rest = raw[16:]
    else:
        raise ValueError(f"not an offset message id: {msg_id!r}")
    port = int.from_bytes(rest[:4], "big")
    return f"{ip}:{port}", int.from_bytes(rest[4:12], "big", signed=True)


class _TagsAndKeys:
    """The two property shortcuts sent and consumed messages share, as in Java's Message."""

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def properties(self) -> dict[str, str]: ...

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageProperty.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageProperty.KEYS)


class Message(_TagsAndKeys):
    """A message to send (producer side)."""

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        flag: int = 0,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        self.topic = topic
        self.body = bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = dict(properties or {})
        if tags:
            self.properties[MessageProperty.TAGS] = tags
        if keys:
            self.properties[MessageProperty.KEYS] = (
                keys if isinstance(keys, str) else MessageProperty.KEY_SEPARATOR.join(keys)
            )
        if delay_level > 0:
            self.properties[MessageProperty.DELAY_TIME_LEVEL] = str(delay_level)
        if not wait_store_msg_ok:
            self.properties[MessageProperty.WAIT_STORE_MSG_OK] = "false"

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(MessageProperty.DELAY_TIME_LEVEL, "0"))

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, tags={self.tags!r}, body={len(self.body)}B)"


_EXT_SLOTS = (
    "topic",
    "body",
    "flag",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body_crc",
    "store_size",
    "broker_name",
    "_props_raw",
    "_props",
    "_queue_bounds",
)


class MessageExt(_TagsAndKeys):
    """A consumed message with everything the broker stored about it.

    ``properties`` is parsed from the raw properties text on first access.
    ``msg_id`` is the client's unique id (``UNIQ_KEY``) when the producer set one,
    otherwise the broker's offset message id, as Java's MessageClientExt does.
    """

    __slots__ = _EXT_SLOTS

    topic: str
    body: bytes
    flag: int
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    store_size: int
    broker_name: str
    # The properties as they came off the wire (bytes, decoded on first read) or as
    # given (str); ``_props`` once parsed.
    _props_raw: str | bytes | None
    _props: dict[str, str] | None
    # The queue's (min, max) offsets at the pull that brought this message; added to
    # the properties as MIN_OFFSET / MAX_OFFSET when they are parsed.
    _queue_bounds: tuple[int, int] | None

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        queue_offset: int = 0,
        flag: int = 0,
        commit_log_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        store_timestamp: int = 0,
        store_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
        broker_name: str = "",
        properties: Mapping[str, str] | None = None,
        properties_raw: str | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self.broker_name = broker_name
        self._props = dict(properties) if properties is not None else None
        self._props_raw = properties_raw
        self._queue_bounds = None

    @property
    def properties(self) -> dict[str, str]:
        props = self._props
        if props is None:
            raw = self._props_raw
            if isinstance(raw, bytes):
                raw = raw.decode("utf-8", "replace")
            props = self._props = parse_properties(raw)
            bounds = self._queue_bounds
            if bounds is not None:
                props[MessageProperty.MIN_OFFSET] = str(bounds[0])
                props[MessageProperty.MAX_OFFSET] = str(bounds[1])
        return props

    @property
    def tags(self) -> str | None:
        # A subscription to named tags re-checks every consumed message's tag: read it
        # from the raw text when that is unambiguous instead of parsing every property.
        if self._props is None:
            raw = self._props_raw
            if isinstance(raw, bytes):
                found = _tags_in_raw(raw)
                if found is not _AMBIGUOUS:
                    return found
        return self.properties.get(MessageProperty.TAGS)

    def queue_max_offset(self) -> int | None:
        """The queue's max offset when this message was pulled (MAX_OFFSET), if stamped."""
        if self._props is None:
            bounds = self._queue_bounds
            return None if bounds is None else bounds[1]
        text = self._props.get(MessageProperty.MAX_OFFSET)
        try:
            return None if text is None else int(text)
        except ValueError:
            return None

    def set_queue_bounds(self, bounds: tuple[int, int]) -> None:
        """Record the queue's min and max offset (PullAPIWrapper's MIN/MAX_OFFSET)."""
        if self._props is None:
            self._queue_bounds = bounds
        else:
            self._props[MessageProperty.MIN_OFFSET] = str(bounds[0])
            self._props[MessageProperty.MAX_OFFSET] = str(bounds[1])

    def properties_text(self) -> str | bytes:
        """The properties as ``k\x01v\x02`` text, without parsing them.

        The bytes received while the properties are unparsed (so without the
        pull's MIN/MAX_OFFSET), the text formatted from them once parsed. For
        columnar readers that parse many messages' properties at once.
        """
        if self._props is not None:
            return format_properties(self._props)
        return self._props_raw or ""

    @property
    def properties_raw(self) -> str:
        if self._props is not None or self._queue_bounds is not None:
            return format_properties(self.properties)
        raw = self._props_raw
        if isinstance(raw, bytes):
            return raw.decode("utf-8", "replace")
        return raw or ""

    def get_property(self, key: str, default: str | None = None) -> str | None:
        return self.properties.get(key, default)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        uniq = self.properties.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        return uniq if uniq else self.offset_msg_id

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, body={len(self.body)}B)"
        )

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return (
            all(getattr(self, s) == getattr(other, s) for s in _EXT_SLOTS if not s.startswith("_"))
            and self.properties == other.properties
        )

    __hash__ = None  # type: ignore[assignment]


_TAGS_SEGMENT = b"TAGS\x01"


class _Ambiguous(enum.Enum):
    TOKEN = 0


_AMBIGUOUS: Final = _Ambiguous.TOKEN


def _tags_in_raw(raw: bytes) -> str | Literal[_Ambiguous.TOKEN] | None:
    """TAGS from raw ``k\x01v\x02`` bytes as parse_properties would read it, or _AMBIGUOUS.

    Only the plain case is answered: one TAGS segment at a segment start, a
    non-empty valid UTF-8 value. Anything else (a repeated key, ``TAGS\x01``
    inside another value, bad bytes) is left to the full parse.
    """
    at = raw.rfind(_TAGS_SEGMENT)
    if at < 0:
        return None
    if (at > 0 and raw[at - 1] != 2) or raw.find(_TAGS_SEGMENT) != at:
        return _AMBIGUOUS
    start = at + len(_TAGS_SEGMENT)
    end = raw.find(b"\x02", start)
    value = raw[start:] if end < 0 else raw[start:end]
    if not value:
        return _AMBIGUOUS
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return _AMBIGUOUS
