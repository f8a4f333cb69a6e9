"""Every option of a push consumer: name, type, Java default, allowed values, doc.

The options are Apache RocketMQ 4.9.8's ``DefaultMQPushConsumer`` and
``ClientConfig`` settings in snake_case, plus the names of the plugins a consumer
is composed of. :class:`ConsumerOptions` holds one resolved set; each of its
fields carries an :class:`OptionSpec`, and :data:`OPTIONS` lists them in order.
The same table validates ``PushConsumer`` keyword options and the keys of a
``[consumers.<name>]`` config table, and generates the config reference.

Defaults are the 4.9.8 client's, including where older releases or the seed
documents differ (``consume_thread_max`` is 20, not 64;
``pull_time_delay_mills_when_exception`` is ClientConfig's 1000 ms, which
``DefaultMQPushConsumerImpl``'s constructor copies over its own 3000).
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

import attrs

from rmqk.errors import ConfigProblem
from rmqk.model import ConsumeFromWhere, MessageModel

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "PLUGIN_OPTIONS",
    "AccessChannel",
    "ConsumerOptions",
    "OptionSpec",
    "OptionType",
    "PluginChoice",
    "Where",
    "check_group",
    "check_plugin_names",
    "check_tag_expression",
    "check_timestamp",
    "check_topic",
    "default_consume_timestamp",
    "describe_value",
    "freeze",
    "plugin_choices",
    "render_key",
    "render_value",
    "suggest",
    "thaw",
    "unknown_key_message",
    "validate_options",
]

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
GROUP_MAX_LENGTH = 255
TOPIC_MAX_LENGTH = 127
# Validators.checkGroup / checkTopic (TopicValidator's character table).
NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]+")
TIMESTAMP_FORMAT = "yyyyMMddHHmmss"
_TIMESTAMP_RE = re.compile(r"[0-9]{14}")

_SPEC = "rmqk.option"


class AccessChannel(enum.Enum):
    """ClientConfig.accessChannel: a private cluster or a cloud service."""

    LOCAL = "LOCAL"
    CLOUD = "CLOUD"


class OptionType(enum.Enum):
    INT = "integer"
    BOOL = "boolean"
    STR = "string"
    ENUM = "enum"
    TIMESTAMP = "timestamp"
    ADDRESSES = "addresses"
    PLUGIN = "plugin name"
    TABLE = "table"


class _Invalid(ValueError):
    """A value an option does not accept; the text says what is allowed."""


def default_consume_timestamp(now: float | None = None) -> str:
    """Half an hour before ``now``, in local time, as Java's consumeTimestamp default."""
    moment = time.time() if now is None else now
    return time.strftime("%Y%m%d%H%M%S", time.localtime(moment - 30 * 60))


def _cpu_count() -> int:
    return os.cpu_count() or 1


@attrs.frozen
class OptionSpec:
    """One consumer option: everything needed to validate and document it."""

    name: str
    value_type: OptionType
    doc: str
    default: Any = None
    default_text: str | None = None
    java_name: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    # Values allowed outside [minimum, maximum], such as -1 for "no limit".
    special: Mapping[int, str] = attrs.field(factory=dict, converter=MappingProxyType, hash=False)
    # Java's checkConfig enforces the range; otherwise the range is rmqk's own.
    java_checked: bool = False
    enum_type: type[enum.Enum] | None = None
    plugin_kind: str | None = None
    unit: str | None = None
    nullable: bool = False

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.enum_type) if self.enum_type else ()

    @property
    def range_text(self) -> str | None:
        if self.minimum is None or self.maximum is None:
            return None
        text = f"[{self.minimum}, {self.maximum}]"
        if self.special:
            alts = ", ".join(f"{v} ({why})" for v, why in self.special.items())
            text = f"{text} or {alts}"
        return text

    @property
    def default_repr(self) -> str:
        """The default as the config reference shows it."""
        if self.default_text is not None:
            return self.default_text
        return render_value(self.default)

    def convert(self, value: object) -> Any:
        """The resolved value for ``value``, or :class:`_Invalid` saying what is allowed."""
        converter = _CONVERTERS[self.value_type]
        return converter(self, value)


def _convert_int(spec: OptionSpec, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"must be an integer, got {describe_value(value)}")
    if value in spec.special:
        return value
    lo, hi = spec.minimum, spec.maximum
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _Invalid(f"{spec.name} Out of range {spec.range_text}, got {value}")
    return value


def _convert_bool(spec: OptionSpec, value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, got {describe_value(value)}")
    return value


def _convert_str(spec: OptionSpec, value: object) -> str | None:
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"must be a string, got {describe_value(value)}")
    if not value.strip():
        raise _Invalid("must not be empty")
    return value


def _convert_enum(spec: OptionSpec, value: object) -> enum.Enum:
    assert spec.enum_type is not None
    if isinstance(value, spec.enum_type):
        return value
    allowed = ", ".join(spec.choices)
    if not isinstance(value, str):
        raise _Invalid(f"must be one of {allowed}; got {describe_value(value)}")
    try:
        return spec.enum_type[value]
    except KeyError:
        pass
    hint = suggest(value, spec.choices, case_insensitive=True)
    raise _Invalid(f"{value!r} is not allowed; allowed: {allowed}{hint}")


def _convert_timestamp(spec: OptionSpec, value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(
            f'must be a string in the format {TIMESTAMP_FORMAT} (e.g. "20240131235959"), '
            f"got {describe_value(value)}"
        )
    problem = check_timestamp(value)
    if problem:
        raise _Invalid(problem)
    return value


def check_timestamp(value: str) -> str | None:
    """What is wrong with a consume timestamp, or None (checkConfig's parse)."""
    bad = (
        f"consume_timestamp is invalid, the valid format is {TIMESTAMP_FORMAT}, "
        f"but received {value!r}"
    )
    if not _TIMESTAMP_RE.fullmatch(value):
        return bad
    try:
        datetime.strptime(value, "%Y%m%d%H%M%S")
    except ValueError as exc:
        return f"{bad} ({exc})"
    return None


def _convert_addresses(spec: OptionSpec, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = value.split(";")
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise _Invalid(
            "must be a string of host:port addresses separated by ';' or a list of "
            f"host:port strings, got {describe_value(value)}"
        )
    addrs = [p.strip() for p in parts if p.strip()]
    if not addrs:
        raise _Invalid('names no address; give host:port, e.g. "127.0.0.1:9876"')
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise _Invalid(
                f'{addr!r} is not host:port with a port in [1, 65535], e.g. "127.0.0.1:9876"'
            )
    return tuple(addrs)


def _convert_plugin(spec: OptionSpec, value: object) -> str | None:
    if value is None and spec.nullable:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(
            f"must be the name of a registered {spec.plugin_kind}, got {describe_value(value)}"
        )
    return value


def _convert_table(spec: OptionSpec, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Invalid(f"must be a table, got {describe_value(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise _Invalid(f"keys must be strings, got {bad[0]!r}")
    frozen: Mapping[str, Any] = freeze(value)
    return frozen


_CONVERTERS: dict[OptionType, Callable[[OptionSpec, object], Any]] = {
    OptionType.INT: _convert_int,
    OptionType.BOOL: _convert_bool,
    OptionType.STR: _convert_str,
    OptionType.ENUM: _convert_enum,
    OptionType.TIMESTAMP: _convert_timestamp,
    OptionType.ADDRESSES: _convert_addresses,
    OptionType.PLUGIN: _convert_plugin,
    OptionType.TABLE: _convert_table,
}


def freeze(value: Any) -> Any:
    """A read-only deep copy: tables become mapping proxies, arrays tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dicts and lists again, for JSON."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    return value


def _option(
    value_type: OptionType,
    doc: str,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
    **spec: Any,
) -> Any:
    # The spec's name is filled in from the field name once the class exists.
    meta = {_SPEC: OptionSpec(name="", value_type=value_type, doc=doc, default=default, **spec)}
    hashable = value_type is not OptionType.TABLE
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta, hash=hashable)
    return attrs.field(default=default, metadata=meta, hash=hashable)


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty_table() -> Mapping[str, Any]:
    return _EMPTY


@attrs.frozen
class ConsumerOptions:
    """One resolved set of consumer options; build it with :func:`validate_options`.

    Each field is made by ``_option``, which returns an ``attrs.field`` carrying
    the option's :class:`OptionSpec` (ruff's RUF009 cannot see that).
    """

    # -- client (ClientConfig) ---------------------------------------------------
    namesrv_addr: tuple[str, ...] = _option(
        OptionType.ADDRESSES,
        "Name server addresses (host:port), as one ';'-separated string like Java's "
        "or as a list. Required in a config file.",
        (),
        default_text="(none)",
        java_name="namesrvAddr",
    )
    instance_name: str = _option(
        OptionType.STR,
        "Instance name; with the client IP it forms the client id. In clustering mode "
        '"DEFAULT" becomes "<pid>#<nanotime>" at start, as in Java.',
        "DEFAULT",
        java_name="instanceName",
    )
    client_ip: str | None = _option(
        OptionType.STR,
        "The IP address put in the client id.",
        None,
        default_text="the machine's first non-loopback address",
        java_name="clientIP",
        nullable=True,
    )
    unit_name: str | None = _option(
        OptionType.STR,
        'Unit name, appended to the client id as "@unit_name".',
        None,
        default_text="(none)",
        java_name="unitName",
        nullable=True,
    )
    namespace: str | None = _option(
        OptionType.STR,
        'Namespace: groups and topics become "<namespace>%<name>" on the wire.',
        None,
        default_text="(none)",
        java_name="namespace",
        nullable=True,
    )
    access_channel: AccessChannel = _option(  # noqa: RUF009
        OptionType.ENUM,
        "LOCAL for a private cluster, CLOUD for a cloud service.",
        AccessChannel.LOCAL,
        java_name="accessChannel",
        enum_type=AccessChannel,
    )
    vip_channel_enabled: bool = _option(
        OptionType.BOOL,
        "Send broker requests to the VIP channel (listen port - 2).",
        False,
        java_name="vipChannelEnabled",
    )
    use_tls: bool = _option(
        OptionType.BOOL,
        "Use TLS on connections to name servers and brokers.",
        False,
        java_name="useTLS",
    )
    unit_mode: bool = _option(
        OptionType.BOOL,
        "Unit mode, sent in heartbeats and pull requests.",
        False,
        java_name="unitMode",
    )
    client_callback_executor_threads: int = _option(
        OptionType.INT,
        "Threads that run response callbacks.",
        factory=_cpu_count,
        default_text="the number of CPUs",
        java_name="clientCallbackExecutorThreads",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="threads",
    )
    poll_name_server_interval: int = _option(
        OptionType.INT,
        "How often topic routes are refreshed from the name server.",
        30_000,
        java_name="pollNameServerInterval",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    heartbeat_broker_interval: int = _option(
        OptionType.INT,
        "How often heartbeats are sent to every broker.",
        30_000,
        java_name="heartbeatBrokerInterval",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    persist_consumer_offset_interval: int = _option(
        OptionType.INT,
        "How often consumed offsets are persisted.",
        5_000,
        java_name="persistConsumerOffsetInterval",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    pull_time_delay_mills_when_exception: int = _option(
        OptionType.INT,
        "Delay before a pull is retried after it failed.",
        1_000,
        java_name="pullTimeDelayMillsWhenException",
        minimum=0,
        maximum=JAVA_LONG_MAX,
        unit="ms",
    )
    mq_client_api_timeout: int = _option(
        OptionType.INT,
        "Timeout of synchronous requests to name servers and brokers.",
        3_000,
        java_name="mqClientApiTimeout",
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="ms",
    )
    # -- consumer (DefaultMQPushConsumer) ----------------------------------------
    message_model: MessageModel = _option(  # noqa: RUF009
        OptionType.ENUM,
        "CLUSTERING shares the queues among the group; BROADCASTING gives every "
        "consumer every message.",
        MessageModel.CLUSTERING,
        java_name="messageModel",
        enum_type=MessageModel,
    )
    consume_from_where: ConsumeFromWhere = _option(  # noqa: RUF009
        OptionType.ENUM,
        "Where a queue with no stored offset starts.",
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        java_name="consumeFromWhere",
        enum_type=ConsumeFromWhere,
    )
    consume_timestamp: str = _option(
        OptionType.TIMESTAMP,
        f"Start time for CONSUME_FROM_TIMESTAMP, local time, {TIMESTAMP_FORMAT}.",
        factory=default_consume_timestamp,
        default_text="30 minutes before the options are resolved",
        java_name="consumeTimestamp",
    )
    allocate_message_queue_strategy: str = _option(
        OptionType.PLUGIN,
        "The registered allocation strategy that shares queues among the group.",
        "AVG",
        java_name="allocateMessageQueueStrategy",
        plugin_kind="allocation strategy",
    )
    allocate_options: Mapping[str, Any] = _option(
        OptionType.TABLE,
        "Options passed to the allocation strategy's factory.",
        factory=_empty_table,
        default_text="{}",
    )
    offset_store: str | None = _option(
        OptionType.PLUGIN,
        "The registered offset store.",
        None,
        default_text="remote-broker for CLUSTERING, local-file for BROADCASTING",
        java_name="offsetStore",
        plugin_kind="offset store",
        nullable=True,
    )
    offset_store_options: Mapping[str, Any] = _option(
        OptionType.TABLE,
        "Options passed to the offset store's factory.",
        factory=_empty_table,
        default_text="{}",
    )
    transport: str = _option(
        OptionType.PLUGIN,
        "The registered remoting transport.",
        "tcp",
        plugin_kind="transport",
    )
    transport_options: Mapping[str, Any] = _option(
        OptionType.TABLE,
        "Options passed to the transport's factory.",
        factory=_empty_table,
        default_text="{}",
    )
    consume_service: str = _option(
        OptionType.PLUGIN,
        "The registered consume service: concurrent, or orderly for per-queue order.",
        "concurrent",
        plugin_kind="consume service",
    )
    consume_service_options: Mapping[str, Any] = _option(
        OptionType.TABLE,
        "Options passed to the consume service's factory.",
        factory=_empty_table,
        default_text="{}",
    )
    consume_thread_min: int = _option(
        OptionType.INT,
        "Core size of the consume thread pool.",
        20,
        java_name="consumeThreadMin",
        minimum=1,
        maximum=1000,
        java_checked=True,
        unit="threads",
    )
    consume_thread_max: int = _option(
        OptionType.INT,
        "Maximum size of the consume thread pool (and of concurrent async consumes).",
        20,
        java_name="consumeThreadMax",
        minimum=1,
        maximum=1000,
        java_checked=True,
        unit="threads",
    )
    adjust_thread_pool_nums_threshold: int = _option(
        OptionType.INT,
        "Backlog above which the consume pool may grow.",
        100_000,
        java_name="adjustThreadPoolNumsThreshold",
        minimum=1,
        maximum=JAVA_LONG_MAX,
        unit="messages",
    )
    consume_concurrently_max_span: int = _option(
        OptionType.INT,
        "Concurrent mode: pulling a queue pauses while the offsets it holds span more than this.",
        2_000,
        java_name="consumeConcurrentlyMaxSpan",
        minimum=1,
        maximum=65535,
        java_checked=True,
        unit="offsets",
    )
    pull_threshold_for_queue: int = _option(
        OptionType.INT,
        "Pulling a queue pauses while it holds more messages than this.",
        1_000,
        java_name="pullThresholdForQueue",
        minimum=1,
        maximum=65535,
        java_checked=True,
        unit="messages",
    )
    pull_threshold_size_for_queue: int = _option(
        OptionType.INT,
        "Pulling a queue pauses while its message bodies take more than this.",
        100,
        java_name="pullThresholdSizeForQueue",
        minimum=1,
        maximum=1024,
        java_checked=True,
        unit="MiB",
    )
    pull_threshold_for_topic: int = _option(
        OptionType.INT,
        "Topic-wide message limit, divided among the topic's queues; overrides "
        "pull_threshold_for_queue.",
        -1,
        java_name="pullThresholdForTopic",
        minimum=1,
        maximum=6_553_500,
        special={-1: "no limit"},
        java_checked=True,
        unit="messages",
    )
    pull_threshold_size_for_topic: int = _option(
        OptionType.INT,
        "Topic-wide body size limit, divided among the topic's queues; overrides "
        "pull_threshold_size_for_queue.",
        -1,
        java_name="pullThresholdSizeForTopic",
        minimum=1,
        maximum=102_400,
        special={-1: "no limit"},
        java_checked=True,
        unit="MiB",
    )
    pull_interval: int = _option(
        OptionType.INT,
        "Pause between two pulls of one queue; 0 pulls again at once.",
        0,
        java_name="pullInterval",
        minimum=0,
        maximum=65535,
        java_checked=True,
        unit="ms",
    )
    consume_message_batch_max_size: int = _option(
        OptionType.INT,
        "Most messages handed to one listener or sink call.",
        1,
        java_name="consumeMessageBatchMaxSize",
        minimum=1,
        maximum=1024,
        java_checked=True,
        unit="messages",
    )
    pull_batch_size: int = _option(
        OptionType.INT,
        "Most messages asked for by one pull request.",
        32,
        java_name="pullBatchSize",
        minimum=1,
        maximum=1024,
        java_checked=True,
        unit="messages",
    )
    post_subscription_when_pull: bool = _option(
        OptionType.BOOL,
        "Send the subscription expression with every pull request.",
        False,
        java_name="postSubscriptionWhenPull",
    )
    max_reconsume_times: int = _option(
        OptionType.INT,
        "Retries before a message goes to the dead-letter queue; -1 means 16 "
        "(concurrent) or unlimited (orderly).",
        -1,
        java_name="maxReconsumeTimes",
        minimum=0,
        maximum=JAVA_INT_MAX,
        special={-1: "16 concurrent, unlimited orderly"},
    )
    suspend_current_queue_time_millis: int = _option(
        OptionType.INT,
        "Orderly mode: how long a queue is suspended after a failed consume "
        "(Java clamps to this range silently).",
        1_000,
        java_name="suspendCurrentQueueTimeMillis",
        minimum=10,
        maximum=30_000,
        unit="ms",
    )
    consume_timeout: int = _option(
        OptionType.INT,
        "A consume running longer than this counts as timed out and its messages are "
        "sent back for retry.",
        15,
        java_name="consumeTimeout",
        minimum=1,
        maximum=JAVA_LONG_MAX,
        unit="minutes",
    )
    await_termination_millis_when_shutdown: int = _option(
        OptionType.INT,
        "How long shutdown waits for running consumes; 0 does not wait.",
        0,
        java_name="awaitTerminationMillisWhenShutdown",
        minimum=0,
        maximum=JAVA_LONG_MAX,
        unit="ms",
    )

    @property
    def effective_offset_store(self) -> str:
        """The offset store to use: the chosen one, else the message model's default."""
        if self.offset_store is not None:
            return self.offset_store
        if self.message_model is MessageModel.BROADCASTING:
            return "local-file"
        return "remote-broker"


def _collect_specs() -> tuple[OptionSpec, ...]:
    specs = []
    for field in attrs.fields(ConsumerOptions):
        spec: OptionSpec = field.metadata[_SPEC]
        specs.append(attrs.evolve(spec, name=field.name))
    return tuple(specs)


OPTIONS: tuple[OptionSpec, ...] = _collect_specs()
OPTIONS_BY_NAME: Mapping[str, OptionSpec] = MappingProxyType({s.name: s for s in OPTIONS})

# Pairs of (plugin option, its options table).
PLUGIN_OPTIONS: tuple[tuple[str, str], ...] = (
    ("allocate_message_queue_strategy", "allocate_options"),
    ("offset_store", "offset_store_options"),
    ("transport", "transport_options"),
    ("consume_service", "consume_service_options"),
)


@attrs.frozen
class Where:
    """Where options came from, for the problems found in them."""

    path: str
    table: str = ""

    def problem(self, key: str | None, message: str) -> ConfigProblem:
        return ConfigProblem(self.path, self.table, key, message)


def describe_value(value: object) -> str:
    """A value as a config author would name it: 'string "20"', 'float 2.5'."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
    }.get(type(value))
    if kind is not None:
        return f"{kind} {render_value(value)}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return f"array {render_value(value)}"
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"


def render_value(value: object) -> str:
    """A value in TOML syntax (enums by name), for messages and ``rmqk check``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = ", ".join(f"{render_key(k)} = {render_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if value is None:
        return "(none)"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def render_key(key: object) -> str:
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else render_value(text)


def suggest(word: str, candidates: Iterable[str], *, case_insensitive: bool = False) -> str:
    """' (did you mean "x"?)' for the closest candidate, or ''."""
    pool = list(candidates)
    if case_insensitive:
        for c in pool:
            if c.lower() == word.lower():
                return f" (did you mean {c!r}?)"
    close = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not close and len(word) >= 3:
        # Abbreviations ("expr") score low with difflib but are clear enough.
        close = [c for c in pool if c.startswith(word)][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_group(group: object) -> str | None:
    """What is wrong with a consumer group name, or None (Java's checkConfig)."""
    if not isinstance(group, str):
        return f"must be a string, got {describe_value(group)}"
    if not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return (
            f"the specified group is longer than group max length {GROUP_MAX_LENGTH} "
            f"(it has {len(group)} characters)"
        )
    if not _NAME_RE.fullmatch(group):
        return (
            f"the specified group[{group}] contains illegal characters, allowing only "
            f"{NAME_PATTERN}"
        )
    if group == DEFAULT_CONSUMER_GROUP:
        return f"group can not equal {DEFAULT_CONSUMER_GROUP}, please specify another one"
    return None


def check_topic(topic: str) -> str | None:
    """What is wrong with a topic name, or None (Java's Validators.checkTopic)."""
    if not topic.strip():
        return "the specified topic is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return (
            f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH} "
            f"(it has {len(topic)} characters)"
        )
    if not _NAME_RE.fullmatch(topic):
        return (
            f"the specified topic[{topic}] contains illegal characters, allowing only "
            f"{NAME_PATTERN}"
        )
    return None


def check_tag_expression(expression: str) -> str | None:
    """What is wrong with a TAG expression, or None.

    Stricter than Java on one point: a single ``|`` is almost always a mistyped
    ``||``, and Java would silently subscribe to a tag containing ``|``.
    """
    stripped = expression.strip()
    if stripped in ("", "*"):
        return None
    tags = [t.strip() for t in stripped.split("||")]
    if not any(tags):
        return f'tag expression {expression!r} names no tag; write "*" or "TagA || TagB"'
    for tag in tags:
        if "|" in tag:
            return (
                f"tag expression {expression!r} has a single '|'; tags are separated by '||', "
                'e.g. "TagA || TagB"'
            )
        if tag == "*":
            return f"tag expression {expression!r} mixes '*' with tags; '*' must stand alone"
    return None


def validate_options(
    mapping: Mapping[str, Any], where: Where
) -> tuple[ConsumerOptions, list[ConfigProblem]]:
    """Resolve ``mapping`` (option name to value) against :data:`OPTIONS`.

    Returns the resolved options, with defaults for keys not given and for keys
    whose value was rejected, and every problem found, each naming its key and
    what is allowed. The options are only meaningful when there are no problems.
    """
    problems: list[ConfigProblem] = []
    values: dict[str, Any] = {}
    for key, raw in mapping.items():
        spec = OPTIONS_BY_NAME.get(key)
        if spec is None:
            problems.append(where.problem(key, unknown_key_message(key, OPTIONS_BY_NAME)))
            continue
        try:
            values[key] = spec.convert(raw)
        except _Invalid as exc:
            problems.append(where.problem(key, str(exc)))
    options = ConsumerOptions(**values)
    if (
        "consume_thread_min" in values or "consume_thread_max" in values
    ) and options.consume_thread_min > options.consume_thread_max:
        problems.append(
            where.problem(
                "consume_thread_min",
                f"consume_thread_min ({options.consume_thread_min}) is larger than "
                f"consume_thread_max ({options.consume_thread_max})",
            )
        )
    return options, problems


def unknown_key_message(key: str, known: Collection[str]) -> str:
    hint = suggest(key, known)
    if hint:
        return f"unknown key{hint}"
    return "unknown key; allowed keys: " + ", ".join(sorted(known))


@attrs.frozen
class PluginChoice:
    """One plugin a consumer is composed of: the key that picks it, its name and kind."""

    key: str
    name: str
    kind: str


def plugin_choices(options: ConsumerOptions) -> list[PluginChoice]:
    """The plugins ``options`` compose, with the offset store resolved by message model."""
    out: list[PluginChoice] = []
    for key, _table in PLUGIN_OPTIONS:
        spec = OPTIONS_BY_NAME[key]
        assert spec.plugin_kind is not None
        name = options.effective_offset_store if key == "offset_store" else getattr(options, key)
        out.append(PluginChoice(key, name, spec.plugin_kind))
    return out


def check_plugin_names(
    choices: Iterable[PluginChoice], where: Where, *, explicit: Collection[str] = ()
) -> list[ConfigProblem]:
    """Problems for plugin names that no installed plugin registered.

    Keys not in ``explicit`` are reported as defaults, since the file does not
    mention them.
    """
    from rmqk.pluginmanager import registries

    regs = registries()
    problems: list[ConfigProblem] = []
    for choice in choices:
        registry = regs.by_kind(choice.kind)
        if choice.name in registry:
            continue
        known = ", ".join(registry.names()) or "(none: are the rmqk plugins installed and enabled?)"
        origin = "" if choice.key in explicit else " (the default)"
        hint = suggest(choice.name, registry.names())
        problems.append(
            where.problem(
                choice.key,
                f"unknown {choice.kind} {choice.name!r}{origin}{hint}; registered: {known}",
            )
        )
    return problems
