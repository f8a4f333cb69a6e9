"""The producer's options: Java DefaultMQProducer's settings, snake_case, with its defaults.

Validated together at construction, so every mistake is reported at once and
nothing is sent with a value Java would never have used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.spi.options import OptionType, option
from rmqk.wire.protocol import ResponseCode

__all__ = [
    "DEFAULT_LATENCY_MAX",
    "DEFAULT_NOT_AVAILABLE_DURATION",
    "DEFAULT_RETRY_RESPONSE_CODES",
    "ProducerOptions",
]

# MQFaultStrategy's latencyMax and notAvailableDuration (4.9.8), in milliseconds.
DEFAULT_LATENCY_MAX: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
DEFAULT_NOT_AVAILABLE_DURATION: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)

# DefaultMQProducer.retryResponseCodes: what a synchronous send retries; any other
# broker answer that is not a send status fails the send at once.
DEFAULT_RETRY_RESPONSE_CODES: frozenset[int] = frozenset(
    {
        int(ResponseCode.TOPIC_NOT_EXIST),  # 17
        int(ResponseCode.SERVICE_NOT_AVAILABLE),  # 14
        int(ResponseCode.SYSTEM_ERROR),  # 1
        int(ResponseCode.NO_PERMISSION),  # 16
        204,  # NO_BUYER_ID
        205,  # NOT_IN_CURRENT_UNIT
    }
)

_WHERE = "<options>"


@attrs.frozen
class ProducerOptions:
    """One resolved set of producer options; build it with :meth:`build`.

    Each field carries its :class:`~rmqk.spi.options.OptionSpec` (for the config
    reference and the option audit); :meth:`build` checks the values.
    """

    send_msg_timeout: int = option(
        OptionType.INT,
        "One time budget for a send and all its retries.",
        3000,
        java_name="sendMsgTimeout",
        minimum=1,
        unit="ms",
    )
    retry_times_when_send_failed: int = option(
        OptionType.INT,
        "Retries of a synchronous send after a retried failure (retry_response_codes, "
        "connection errors).",
        2,
        java_name="retryTimesWhenSendFailed",
        minimum=0,
    )
    retry_times_when_send_async_failed: int = option(
        OptionType.INT,
        "Retries of an asynchronous send.",
        2,
        java_name="retryTimesWhenSendAsyncFailed",
        minimum=0,
    )
    retry_another_broker_when_not_store_ok: bool = option(
        OptionType.BOOL,
        "Retry on another broker when the broker answers a status other than SEND_OK "
        "(flush or slave timeouts).",
        False,
        java_name="retryAnotherBrokerWhenNotStoreOK",
    )
    send_latency_fault_enable: bool = option(
        OptionType.BOOL,
        "Avoid, for a while, a broker whose sends were slow or failed (MQFaultStrategy).",
        False,
        java_name="sendLatencyFaultEnable",
    )
    latency_max: tuple[int, ...] = option(
        OptionType.ANY,
        "Latency steps (ascending, ms): a send at least this slow makes its broker "
        "unavailable for the matching not_available_duration.",
        DEFAULT_LATENCY_MAX,
        default_text=str(list(DEFAULT_LATENCY_MAX)),
        java_name="latencyMax",
        unit="ms",
    )
    not_available_duration: tuple[int, ...] = option(
        OptionType.ANY,
        "How long a broker is avoided after a send reached each latency_max step.",
        DEFAULT_NOT_AVAILABLE_DURATION,
        default_text=str(list(DEFAULT_NOT_AVAILABLE_DURATION)),
        java_name="notAvailableDuration",
        unit="ms",
    )
    retry_response_codes: frozenset[int] = option(
        OptionType.ANY,
        "Broker response codes a synchronous send retries; any other error fails at once.",
        DEFAULT_RETRY_RESPONSE_CODES,
        default_text=str(sorted(DEFAULT_RETRY_RESPONSE_CODES)),
        java_name="retryResponseCodes",
    )
    compress_msg_body_over_howmuch: int = option(
        OptionType.INT,
        "Bodies longer than this are sent zlib-compressed (not in batches).",
        4096,
        java_name="compressMsgBodyOverHowmuch",
        minimum=0,
        unit="bytes",
    )
    max_message_size: int = option(
        OptionType.INT,
        "Largest body a send accepts; a larger one fails before anything is sent.",
        4 * 1024 * 1024,
        java_name="maxMessageSize",
        minimum=1,
        unit="bytes",
    )
    default_topic_queue_nums: int = option(
        OptionType.INT,
        "Queues of a topic the broker creates on the first send to it.",
        4,
        java_name="defaultTopicQueueNums",
        minimum=1,
        unit="queues",
    )
    # Java's enableMsgTrace and customizedTraceTopic: acted on by the ``trace`` plugin.
    enable_msg_trace: bool = option(
        OptionType.BOOL,
        "Trace every send (the trace plugin publishes a trace record per message).",
        False,
        java_name="enableMsgTrace",
    )
    customized_trace_topic: str | None = option(
        OptionType.STR,
        "The topic trace records go to instead of RMQ_SYS_TRACE_TOPIC.",
        None,
        default_text="(none: RMQ_SYS_TRACE_TOPIC)",
        java_name="customizedTraceTopic",
        nullable=True,
    )
    vip_channel_enabled: bool = option(
        OptionType.BOOL,
        "Send messages to a broker's VIP channel, its listen port minus 2 (Java's "
        "MixAll.brokerVIPChannel), as Java 4.9.8's sendKernelImpl does. Heartbeats "
        "stay on the main port.",
        False,
        java_name="vipChannelEnabled",
    )

    @classmethod
    def build(
        cls,
        *,
        send_msg_timeout: object,
        retry_times_when_send_failed: object,
        retry_times_when_send_async_failed: object,
        retry_another_broker_when_not_store_ok: object,
        send_latency_fault_enable: object,
        latency_max: object,
        not_available_duration: object,
        retry_response_codes: object,
        compress_msg_body_over_howmuch: object,
        max_message_size: object,
        default_topic_queue_nums: object,
        enable_msg_trace: object = False,
        customized_trace_topic: object = None,
        vip_channel_enabled: object = False,
    ) -> ProducerOptions:
        """The options, or a ConfigError naming every option that is wrong and why."""
        problems: list[ConfigProblem] = []

        def bad(key: str, message: str) -> None:
            problems.append(ConfigProblem(_WHERE, "producer", key, message))

        def integer(key: str, value: object, low: int) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                bad(key, f"must be an integer, got {value!r}")
                return low
            if value < low:
                bad(key, f"must be at least {low}, got {value}")
            return value

        def flag(key: str, value: object) -> bool:
            if not isinstance(value, bool):
                bad(key, f"must be true or false, got {value!r}")
                return False
            return value

        def table(key: str, value: object) -> tuple[int, ...]:
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                bad(key, f"must be a list of milliseconds, got {value!r}")
                return ()
            items = tuple(value)
            if not items or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in items
            ):
                bad(key, f"must be a non-empty list of milliseconds >= 0, got {list(items)}")
            return items

        latency = table("latency_max", latency_max)
        durations = table("not_available_duration", not_available_duration)
        if latency and list(latency) != sorted(latency):
            bad("latency_max", f"must be in ascending order, got {list(latency)}")
        if latency and durations and len(latency) != len(durations):
            bad(
                "not_available_duration",
                f"has {len(durations)} entries but latency_max has {len(latency)}: "
                "each latency step needs its duration",
            )
        codes: frozenset[int] = frozenset()
        if isinstance(retry_response_codes, str | bytes) or not isinstance(
            retry_response_codes, Iterable
        ):
            bad(
                "retry_response_codes",
                f"must be a set of response codes, got {retry_response_codes!r}",
            )
        else:
            listed = list(retry_response_codes)
            if any(isinstance(c, bool) or not isinstance(c, int) for c in listed):
                bad("retry_response_codes", f"must hold integer response codes, got {listed}")
            else:
                codes = frozenset(int(c) for c in listed)
        trace_topic = customized_trace_topic if isinstance(customized_trace_topic, str) else None
        if customized_trace_topic is not None and trace_topic is None:
            bad("customized_trace_topic", f"must be a topic name, got {customized_trace_topic!r}")
        options = cls(
            send_msg_timeout=integer("send_msg_timeout", send_msg_timeout, 1),
            retry_times_when_send_failed=integer(
                "retry_times_when_send_failed", retry_times_when_send_failed, 0
            ),
            retry_times_when_send_async_failed=integer(
                "retry_times_when_send_async_failed", retry_times_when_send_async_failed, 0
            ),
            retry_another_broker_when_not_store_ok=flag(
                "retry_another_broker_when_not_store_ok", retry_another_broker_when_not_store_ok
            ),
            send_latency_fault_enable=flag("send_latency_fault_enable", send_latency_fault_enable),
            latency_max=latency,
            not_available_duration=durations,
            retry_response_codes=codes,
            compress_msg_body_over_howmuch=integer(
                "compress_msg_body_over_howmuch", compress_msg_body_over_howmuch, 0
            ),
            max_message_size=integer("max_message_size", max_message_size, 1),
            default_topic_queue_nums=integer(
                "default_topic_queue_nums", default_topic_queue_nums, 1
            ),
            enable_msg_trace=flag("enable_msg_trace", enable_msg_trace),
            customized_trace_topic=trace_topic or None,
            vip_channel_enabled=flag("vip_channel_enabled", vip_channel_enabled),
        )
        if problems:
            raise ConfigError(problems)
        return options
