"""A consumer table's ``subscription`` key: topics and their tag or SQL92 expressions.

``subscription = { Orders = "TagA || TagB" }`` or, with a type,
``subscription = { Orders = { expression = "a > 5", type = "SQL92" } }``.
Every mistake is added to the caller's problem list, named by its key.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmqk.model import ExpressionType, SubscriptionData, build_subscription
from rmqk.model.errors import ConfigProblem
from rmqk.model.names import check_expression, check_topic
from rmqk.spi.option_text import (
    describe_value,
    render_key,
    render_value,
    suggest,
    unknown_key_message,
)
from rmqk.spi.options import (
    Where,
)

__all__ = ["SUBSCRIPTION_TABLE_KEYS", "parse_subscriptions"]

SUBSCRIPTION_TABLE_KEYS = ("expression", "type")


def parse_subscriptions(
    raw: object, where: Where, problems: list[ConfigProblem], sub_version: int
) -> tuple[SubscriptionData, ...]:
    example = 'e.g. subscription = { Orders = "TagA || TagB" }'
    if not isinstance(raw, Mapping):
        problems.append(
            where.problem(
                "subscription",
                f"must be a table of topic = tag expression, {example}; got {describe_value(raw)}",
            )
        )
        return ()
    if not raw:
        problems.append(where.problem("subscription", f"subscribes to no topic; {example}"))
        return ()
    out: list[SubscriptionData] = []
    for topic, value in raw.items():
        key = f"subscription.{render_key(topic)}"
        before = len(problems)
        topic_problem = check_topic(topic)
        if topic_problem:
            problems.append(where.problem(key, topic_problem))
        parsed = _expression(value, where, key, problems)
        if parsed is None or len(problems) > before:
            continue
        expression, etype = parsed
        try:
            out.append(build_subscription(topic, expression, etype, sub_version=sub_version))
        except ValueError as exc:
            problems.append(where.problem(key, str(exc)))
    return tuple(out)


def _expression(
    value: object, where: Where, key: str, problems: list[ConfigProblem]
) -> tuple[str, ExpressionType] | None:
    allowed_types = ", ".join(t.name for t in ExpressionType)
    raw_expression: object
    raw_type: object = "TAG"
    if isinstance(value, str):
        raw_expression = value
    elif isinstance(value, Mapping):
        before = len(problems)
        for k in value:
            if k not in SUBSCRIPTION_TABLE_KEYS:
                problems.append(
                    where.problem(
                        f"{key}.{render_key(k)}", unknown_key_message(k, SUBSCRIPTION_TABLE_KEYS)
                    )
                )
        raw_expression = value.get("expression")
        raw_type = value.get("type", "TAG")
        if not isinstance(raw_expression, str):
            what = (
                "is missing"
                if raw_expression is None
                else f"must be a string, got {describe_value(raw_expression)}"
            )
            problems.append(where.problem(f"{key}.expression", f"the expression {what}"))
        if not isinstance(raw_type, str) or raw_type not in ExpressionType.__members__:
            hint = (
                suggest(raw_type, ExpressionType.__members__, case_insensitive=True)
                if isinstance(raw_type, str)
                else ""
            )
            problems.append(
                where.problem(
                    f"{key}.type",
                    f"{render_value(raw_type)} is not an expression type; "
                    f"allowed: {allowed_types}{hint}",
                )
            )
        if len(problems) > before:
            return None
    else:
        problems.append(
            where.problem(
                key,
                'must be a tag expression ("*", "TagA || TagB") or a table '
                f'{{ expression = "...", type = {allowed_types.replace(", ", " | ")} }}, '
                f"got {describe_value(value)}",
            )
        )
        return None
    assert isinstance(raw_expression, str) and isinstance(raw_type, str)
    expression = raw_expression
    type_name = raw_type
    etype = ExpressionType[type_name]
    # The rule every API applies (rmqk.model.names.check_expression), in the same words.
    problem = check_expression(expression, etype.value)
    if problem:
        problems.append(where.problem(key, problem))
        return None
    return expression, etype
