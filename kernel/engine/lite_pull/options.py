"""The lite pull consumer's own options: their table, defaults and validator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.errors import ConfigError, ConfigProblem
from rmqk.options import ConsumerOptions, Where, describe_value, validate_options

__all__ = [
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

    auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    poll_timeout_ms: int = 5_000
    # Fetching pauses while buffered batches times pull_batch_size exceed this.
    pull_threshold_for_all: int = 10_000
    # Fetching a queue pauses while its buffered offsets span more than this.
    consume_max_span: int = 2_000
    broker_suspend_max_time_millis: int = 20_000
    consumer_timeout_millis_when_suspend: int = 30_000


# Each lite pull option: its type (bool or int) and smallest allowed value.
_LITE_SPECS: dict[str, tuple[type, int]] = {
    "auto_commit": (bool, 0),
    "auto_commit_interval_ms": (int, MIN_AUTO_COMMIT_INTERVAL_MS),
    "poll_timeout_ms": (int, 0),
    "pull_threshold_for_all": (int, 1),
    "consume_max_span": (int, 1),
    "broker_suspend_max_time_millis": (int, 1),
    "consumer_timeout_millis_when_suspend": (int, 1),
}
LITE_PULL_OPTION_NAMES = frozenset(_LITE_SPECS)


def resolve_lite_pull_options(
    mapping: Mapping[str, Any], where: Where, options: ConsumerOptions | None = None
) -> tuple[ConsumerOptions, LitePullOptions]:
    """Split ``mapping`` into client/consumer options and lite pull options, checking all.

    Raises :class:`ConfigError` listing every problem. ``pull_batch_size``
    defaults to the lite pull consumer's 10 rather than the push consumer's 32.
    """
    problems: list[ConfigProblem] = []
    lite: dict[str, Any] = {}
    common: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in _LITE_SPECS:
            kind, minimum = _LITE_SPECS[key]
            if kind is bool:
                if not isinstance(value, bool):
                    problems.append(
                        where.problem(key, f"must be true or false, got {describe_value(value)}")
                    )
                    continue
            elif isinstance(value, bool) or not isinstance(value, int):
                problems.append(
                    where.problem(key, f"must be an integer, got {describe_value(value)}")
                )
                continue
            elif value < minimum:
                problems.append(where.problem(key, f"must be at least {minimum}, got {value}"))
                continue
            lite[key] = value
        elif key in PUSH_ONLY_OPTIONS:
            problems.append(
                where.problem(
                    key, "is a push consumer option; the lite pull consumer has no such setting"
                )
            )
        else:
            common[key] = value
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
