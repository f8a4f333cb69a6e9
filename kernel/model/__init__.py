"""Value objects shared by the kernel and its plugins.

Everything that crosses a module boundary is one of these types, never a dict.
They follow Apache RocketMQ 4.9's client model (``MessageQueue``, ``MessageExt``,
``SubscriptionData``, ``PullResult``, ``TopicRouteData``) with snake_case names.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.model.message import Message, MessageExt
from rmqk.model.names import check_expression

__all__ = [
    "DLQ_GROUP_TOPIC_PREFIX",
    "MASTER_ID",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SUB_ALL",
    "BrokerData",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "ConsumeType",
    "ExpressionType",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "QueueData",
    "SendResult",
    "SendStatus",
    "ServiceState",
    "SkippedRecord",
    "SubscriptionData",
    "TopicRouteData",
    "build_subscription",
    "java_string_hash",
    "perm_to_string",
]

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SUB_ALL = "*"
MASTER_ID = 0

# Permission bits of a queue as the name server reports them (PermName).
PERM_INHERIT = 0x1
PERM_WRITE = 0x2
PERM_READ = 0x4


def perm_to_string(perm: int) -> str:
    """PermName.perm2String: ``RWX`` with ``-`` for a missing bit."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull / lite pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push


class ExpressionType(enum.Enum):
    TAG = "TAG"
    SQL92 = "SQL92"


class ConsumeStatus(enum.Enum):
    """What a concurrent listener returns (ConsumeConcurrentlyStatus)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class ServiceState(enum.Enum):
    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"
    START_FAILED = "START_FAILED"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attr.name} must be >= 0, got {value}")


def _non_empty(_inst: object, attr: attrs.Attribute[Any], value: str) -> None:
    if not value:
        raise ValueError(f"{attr.name} must not be empty")


@attrs.frozen(order=True, cache_hash=True)
class MessageQueue:
    """One consume queue of one topic on one broker.

    Ordered by (topic, broker_name, queue_id) as Java sorts them, because every
    allocation strategy depends on that order across languages.
    """

    topic: str = attrs.field(validator=_non_empty)
    broker_name: str = attrs.field(validator=_non_empty)
    queue_id: int = attrs.field(validator=_non_negative)

    def __str__(self) -> str:
        # Java's MessageQueue.toString(); CONSISTENT_HASH hashes exactly this text.
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
            f"queueId={self.queue_id}]"
        )


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` as a signed 32-bit int.

    The broker filters by these codes, so they must match Java's exactly,
    including for characters outside the BMP (hashed as UTF-16 surrogates).
    """
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


@attrs.frozen
class SubscriptionData:
    """A topic subscription as the client sends it in heartbeats.

    ``sub_version`` is the creation time in ms, which the broker compares to
    detect stale subscriptions.
    """

    topic: str = attrs.field(validator=_non_empty)
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: ExpressionType = ExpressionType.TAG
    class_filter_mode: bool = False

    @property
    def is_all(self) -> bool:
        return self.expression_type is ExpressionType.TAG and self.sub_string == SUB_ALL

    def matches_tag(self, tag: str | None) -> bool:
        """The client-side exact re-filter: the broker only compares hash codes."""
        if self.expression_type is not ExpressionType.TAG or self.sub_string == SUB_ALL:
            return True
        return tag is not None and tag in self.tags_set


def build_subscription(
    topic: str,
    expression: str | None,
    expression_type: ExpressionType | str = ExpressionType.TAG,
    sub_version: int = 0,
) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData: split ``a || b`` into tags and their hash codes."""
    type_name = expression_type if isinstance(expression_type, str) else expression_type.value
    problem = check_expression(expression, type_name)
    if problem:
        raise ValueError(f"topic {topic!r}: {problem}")
    etype = ExpressionType(type_name)
    if etype is ExpressionType.SQL92:
        assert expression is not None
        return SubscriptionData(
            topic=topic,
            sub_string=expression.strip(),
            sub_version=sub_version,
            expression_type=etype,
        )
    if expression is None or expression.strip() in ("", SUB_ALL):
        return SubscriptionData(topic=topic, sub_string=SUB_ALL, sub_version=sub_version)
    tags = [t.strip() for t in expression.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise ValueError(f"tag expression {expression!r} for topic {topic!r} names no tag")
    return SubscriptionData(
        topic=topic,
        sub_string=expression.strip(),
        tags_set=frozenset(tags),
        code_set=frozenset(java_string_hash(t) for t in tags),
        sub_version=sub_version,
    )


@attrs.frozen
class SkippedRecord:
    """A record of a pull body that could not be decoded, skipped rather than retried."""

    queue_offset: int
    reason: str


# A dict class, built once a pull: see PullMessageRequest (rmqk.spi.transport).
@attrs.frozen(slots=False)
class PullResult:
    """A decoded PULL_MESSAGE response (PullResultExt).

    ``skipped`` lists the records left out of ``messages`` because they could not
    be decoded (only when the request asked for ``skip_bad_records``);
    ``next_begin_offset`` then already steps past them.
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[MessageExt, ...] = ()
    suggest_which_broker_id: int = MASTER_ID
    skipped: tuple[SkippedRecord, ...] = ()


@attrs.frozen
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def _sorted_addrs(addrs: Mapping[int, str]) -> dict[int, str]:
    return dict(sorted(addrs.items()))


@attrs.frozen
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(converter=_sorted_addrs)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master if present, otherwise any replica (BrokerData.selectBrokerAddr)."""
        master = self.master_addr()
        if master is not None:
            return master
        return next(iter(self.broker_addrs.values()), None)


@attrs.frozen
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def subscribe_queues(self, topic: str) -> frozenset[MessageQueue]:
        """Readable queues (topicRouteData2TopicSubscribeInfo)."""
        return frozenset(
            MessageQueue(topic, q.broker_name, i)
            for q in self.queue_datas
            if q.readable
            for i in range(q.read_queue_nums)
        )

    def publish_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """Writable queues on brokers with a master (topicRouteData2TopicPublishInfo)."""
        out: list[MessageQueue] = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            b = self.broker(q.broker_name)
            if not q.writable or b is None or b.master_addr() is None:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return tuple(out)


@attrs.frozen
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None
