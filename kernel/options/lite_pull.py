"""The lite pull consumer's own options: their table, defaults and validator.

A declarative table like :mod:`rmqk.options.consumer`: each field of
:class:`LitePullOptions` carries its :class:`~rmqk.spi.options.OptionSpec`, which
validates it and generates its entry in the config reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.options import ConsumerOptions, Where, validate_options
from rmqk.spi.options import OptionSpec, OptionType, convert_values, option, option_specs

__all__ = [
    "LITE_OPTIONS",
    "LITE_PULL_OPTION_NAMES",
    "PUSH_ONLY_OPTIONS",
    "LitePullOptions",
    "resolve_lite_pull_options",
]

# DefaultLitePullConsumer.MIN_AUTOCOMMIT_INTERVAL_MILLIS (Java ignores smaller values).
MIN_AUTO_COMMIT_INTERVAL_MS = 1000
# DefaultLitePullConsumer.pullBatchSize: smaller than the push consumer's 32.
DEFAULT_PULL_BATCH_SIZE = 10

# Push consumer options that mean nothing to a lite pull consumer: rejected by
# name rather than silently ignored.
PUSH_ONLY_OPTIONS = frozenset(
    {
        "adjust_thread_pool_nums_threshold",
        "await_termination_millis_when_shutdown",
        "consume_concurrently_max_span",
        "consume_message_batch_max_size",
        "consume_service",
        "consume_service_options",
        "consume_thread_max",
        "consume_thread_min",
        "consume_timeout",
        "max_reconsume_times",
        "post_subscription_when_pull",
        "pull_interval",
        "pull_threshold_for_topic",
        "pull_threshold_size_for_topic",
        "suspend_current_queue_time_millis",
    }
)


@attrs.frozen
class LitePullOptions:
    """The settings only a lite pull consumer has (DefaultLitePullConsumer 4.9.8 defaults).

    Java's ``consumerPullTimeoutMillis`` is missing on purpose: it applies only
    to pulls that do not long-poll, and the lite pull consumer always long-polls.
    ``pullThreadNums`` is missing too: fetchers are asyncio tasks, not threads.
    """

    auto_commit: bool = option(
        OptionType.BOOL,
        "Commit what earlier polls returned, every auto_commit_interval_ms, from poll.",
        True,
        java_name="autoCommit",
    )
    auto_commit_interval_ms: int = option(
        OptionType.INT,
        "How often auto commit commits (Java ignores values below 1000; rmqk rejects them).",
        5_000,
        java_name="autoCommitIntervalMillis",
        minimum=MIN_AUTO_COMMIT_INTERVAL_MS,
        unit="ms",
    )
    poll_timeout_ms: int = option(
        OptionType.INT,
        "How long poll waits for messages when it is given no timeout.",
        5_000,
        java_name="pollTimeoutMillis",
        minimum=0,
        unit="ms",
    )
    pull_threshold_for_all: int = option(
        OptionType.INT,
        "Fetching pauses while the buffered batches times pull_batch_size exceed this.",
        10_000,
        java_name="pullThresholdForAll",
        minimum=1,
        unit="messages",
    )
    consume_max_span: int = option(
        OptionType.INT,
        "Fetching a queue pauses while its buffered offsets span more than this.",
        2_000,
        java_name="consumeMaxSpan",
        minimum=1,
        unit="offsets",
    )
    broker_suspend_max_time_millis: int = option(
        OptionType.INT,
        "How long the broker holds a pull that finds no message (long polling).",
        20_000,
        java_name="brokerSuspendMaxTimeMillis",
        minimum=1,
        unit="ms",
    )
    consumer_timeout_millis_when_suspend: int = option(
        OptionType.INT,
        "How long a long-polling pull waits for the broker's answer; must exceed "
        "broker_suspend_max_time_millis.",
        30_000,
        java_name="consumerTimeoutMillisWhenSuspend",
        minimum=1,
        unit="ms",
    )


LITE_OPTIONS: Mapping[str, OptionSpec] = option_specs(LitePullOptions)
LITE_PULL_OPTION_NAMES = frozenset(LITE_OPTIONS)


def resolve_lite_pull_options(
    mapping: Mapping[str, Any], where: Where, options: ConsumerOptions | None = None
) -> tuple[ConsumerOptions, LitePullOptions]:
    """Split ``mapping`` into client/consumer options and lite pull options, checking all.

    Raises :class:`ConfigError` listing every problem. ``pull_batch_size``
    defaults to the lite pull consumer's 10 rather than the push consumer's 32.
    """
    problems: list[ConfigProblem] = []
    common: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in LITE_OPTIONS:
            given[key] = value
        elif key in PUSH_ONLY_OPTIONS:
            problems.append(
                where.problem(
                    key, "is a push consumer option; the lite pull consumer has no such setting"
                )
            )
        else:
            common[key] = value
    lite, lite_problems = convert_values(LITE_OPTIONS, given, where)
    problems.extend(lite_problems)
    if options is None:
        common.setdefault("pull_batch_size", DEFAULT_PULL_BATCH_SIZE)
        options, more = validate_options(common, where)
        problems.extend(more)
    elif common:
        problems.append(
            where.problem(
                ", ".join(sorted(common)),
                "pass either a ConsumerOptions or these keyword options, not both",
            )
        )
    resolved = LitePullOptions(**lite)
    if resolved.consumer_timeout_millis_when_suspend < resolved.broker_suspend_max_time_millis:
        problems.append(
            where.problem(
                "consumer_timeout_millis_when_suspend",
                "Long polling mode, the consumer consumer_timeout_millis_when_suspend "
                f"({resolved.consumer_timeout_millis_when_suspend}) must be greater than "
                f"broker_suspend_max_time_millis ({resolved.broker_suspend_max_time_millis})",
            )
        )
    if problems:
        raise ConfigError(problems)
    return options, resolved
