"""Every option of a push consumer: name, type, Java default, allowed values, doc.

A declarative table. The options are Apache RocketMQ 4.9.8's
``DefaultMQPushConsumer`` and ``ClientConfig`` settings in snake_case, plus the
names of the plugins a consumer is composed of. :class:`ConsumerOptions` holds
one resolved set; each of its fields carries an :class:`~rmqk.spi.options.OptionSpec`,
and :data:`OPTIONS` lists them in order. The same table validates
``PushConsumer`` keyword options and the keys of a ``[consumers.<name>]`` config
table, and generates the config reference.

Defaults are the 4.9.8 client's, including where older releases or the seed
documents differ (``consume_thread_max`` is 20, not 64;
``pull_time_delay_mills_when_exception`` is ClientConfig's 1000 ms, which
``DefaultMQPushConsumerImpl``'s constructor copies over its own 3000).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from rmqk.model import ConsumeFromWhere, MessageModel
from rmqk.model.errors import ConfigProblem
from rmqk.spi.client_options import AccessChannel, ClientOptions, client_option_problems
from rmqk.spi.option_text import unknown_key_message
from rmqk.spi.options import (
    JAVA_INT_MAX,
    JAVA_LONG_MAX,
    TIMESTAMP_FORMAT,
    OptionSpec,
    OptionType,
    Where,
    convert_values,
    option_specs,
)
from rmqk.spi.options import option as _option
from rmqk.spi.transport import DEFAULT_MAX_DECOMPRESSED_BODY_SIZE

__all__ = [
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "AccessChannel",
    "ConsumerOptions",
    "default_consume_timestamp",
    "validate_options",
]


def default_consume_timestamp(now: float | None = None) -> str:
    """Half an hour before ``now``, in local time, as Java's consumeTimestamp default."""
    moment = time.time() if now is None else now
    return time.strftime("%Y%m%d%H%M%S", time.localtime(moment - 30 * 60))


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty_table() -> Mapping[str, Any]:
    return _EMPTY


@attrs.frozen
class ConsumerOptions(ClientOptions):
    """One resolved set of consumer options; build it with :func:`validate_options`.

    The client options (:class:`~rmqk.spi.client_options.ClientOptions`) come first, under
    the same names every client kind takes; ``.client_options`` is just those.

    Each field is made by ``_option``, which returns an ``attrs.field`` carrying
    the option's :class:`OptionSpec` (ruff's RUF009 cannot see that).
    """

    # -- client (ClientConfig): ClientOptions' fields, then the consumer's own -----------
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
        "How many messages (batches of consume_message_batch_max_size) are consumed at "
        "once: the size of the consume pool (its core size, as in Java), which in "
        "concurrent mode grows toward consume_thread_max under a backlog above "
        "adjust_thread_pool_nums_threshold and comes back to this when it drains.",
        20,
        java_name="consumeThreadMin",
        minimum=1,
        maximum=1000,
        java_checked=True,
        unit="threads",
    )
    consume_thread_max: int = _option(
        OptionType.INT,
        "Maximum size of the consume thread pool; must not be below consume_thread_min. "
        "Concurrent mode with a plain (not async) listener: every minute the pool grows "
        "by one thread, up to this, while the broker-side backlog of the consumer's "
        "queues exceeds adjust_thread_pool_nums_threshold, and shrinks by one, down to "
        "consume_thread_min, while it is below 80 % of it.",
        20,
        java_name="consumeThreadMax",
        minimum=1,
        maximum=1000,
        java_checked=True,
        unit="threads",
    )
    adjust_thread_pool_nums_threshold: int = _option(
        OptionType.INT,
        "Backlog (Java's msgAccCnt summed over the consumer's queues: each queue's max "
        "offset minus the newest pulled offset) above which the "
        "concurrent consume pool grows by one thread a minute toward consume_thread_max; "
        "below 80 % of it the pool shrinks by one a minute toward consume_thread_min. "
        "No effect on orderly consumption or async listeners (they use no thread pool).",
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
    max_decompressed_body_size: int = _option(
        OptionType.INT,
        "A compressed message body that would inflate past this is not delivered: "
        "like any record that cannot be decoded, it is skipped with one error naming "
        "its queue and offset. Bounds what a decompression bomb costs (an rmqk "
        "limit; Java has none). The default is 16 times the 4 MiB that Java "
        "producers and brokers allow for a body before compression.",
        DEFAULT_MAX_DECOMPRESSED_BODY_SIZE,
        minimum=1,
        maximum=JAVA_INT_MAX,
        unit="bytes",
    )
    on_offsets_reset: str = _option(
        OptionType.STR,
        "What to do when a queue's offsets go backwards: its max offset on the broker is "
        "below the offset the group (or an exactly-once sink's commit records) recorded, as "
        "after a broker rebuilt with an empty store under the same name or a topic deleted "
        "and created again. fail stops the consumer with one error naming the topic, "
        "broker, queue and both offsets (rmqk run exits with it). resume starts the queue "
        "afresh from its min offset, with a WARNING and the offsets_reset counter "
        "(rmqk_offsets_reset_total, the stop line), an exactly-once sink forgetting the "
        "queue's commit records first so its new messages are written. An rmqk option: "
        "Java 4.9.8 adopts the broker's nextBeginOffset for every OFFSET_ILLEGAL answer, "
        "which here is past the new messages, and only logs it.",
        "fail",
        allowed=("fail", "resume"),
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


OPTIONS: tuple[OptionSpec, ...] = tuple(option_specs(ConsumerOptions).values())
OPTIONS_BY_NAME: Mapping[str, OptionSpec] = option_specs(ConsumerOptions)


def validate_options(
    mapping: Mapping[str, Any], where: Where
) -> tuple[ConsumerOptions, list[ConfigProblem]]:
    """Resolve ``mapping`` (option name to value) against :data:`OPTIONS`.

    Returns the resolved options, with defaults for keys not given and for keys
    whose value was rejected, and every problem found, each naming its key and
    what is allowed. The options are only meaningful when there are no problems.
    """
    values, problems = convert_values(OPTIONS_BY_NAME, mapping, where, unknown=unknown_key_message)
    client_problems = client_option_problems(values, mapping, where)
    problems.extend(client_problems)
    for problem in client_problems:
        # The options returned hold no value that was refused.
        values.pop(problem.key or "", None)
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
