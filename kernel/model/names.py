"""What Java's Validators accept as a group, topic or tag expression."""

from __future__ import annotations

import re

from rmqk.spi.option_text import describe_value

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "GROUP_MAX_LENGTH",
    "NAME_PATTERN",
    "TOPIC_MAX_LENGTH",
    "check_expression",
    "check_group",
    "check_tag_expression",
    "check_topic",
]

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
GROUP_MAX_LENGTH = 255
TOPIC_MAX_LENGTH = 127
# Validators.checkGroup / checkTopic (TopicValidator's character table).
NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]+")


def _check_name(kind: str, name: str, max_length: int) -> str | None:
    """Java's checks shared by group and topic names: not blank, not too long, legal characters."""
    if not name.strip():
        return f"the specified {kind} is blank"
    if len(name) > max_length:
        return (
            f"the specified {kind} is longer than {kind} max length {max_length} "
            f"(it has {len(name)} characters)"
        )
    if not _NAME_RE.fullmatch(name):
        return (
            f"the specified {kind}[{name}] contains illegal characters, allowing only "
            f"{NAME_PATTERN}"
        )
    return None


def check_group(group: object) -> str | None:
    """What is wrong with a consumer group name, or None (Java's checkConfig)."""
    if not isinstance(group, str):
        return f"must be a string, got {describe_value(group)}"
    problem = _check_name("group", group, GROUP_MAX_LENGTH)
    if problem is None and group == DEFAULT_CONSUMER_GROUP:
        return f"group can not equal {DEFAULT_CONSUMER_GROUP}, please specify another one"
    return problem


def check_topic(topic: str) -> str | None:
    """What is wrong with a topic name, or None (Java's Validators.checkTopic)."""
    return _check_name("topic", topic, TOPIC_MAX_LENGTH)


# Characters and words that make a TAG expression read as SQL92: Java would take
# ``a > 1`` as the tag "a > 1" and the subscription would silently match nothing.
_SQL_CHARS = ("=", "<", ">", "(", ")", "'")
_SQL_WORDS = frozenset(
    ("AND", "OR", "NOT", "IS", "NULL", "BETWEEN", "IN", "TRUE", "FALSE", "STARTSWITH", "ENDSWITH")
)
_SQL_HINT = 'if it is an SQL92 filter, give the expression type "SQL92"'


def check_tag_expression(expression: str) -> str | None:
    """What is wrong with a TAG expression, or None.

    Java's FilterAPI splits on ``||`` and trims; ``*`` or blank means every tag.
    Stricter than Java on two points, since both subscribe to tags no producer
    sets: a single ``|`` (a mistyped ``||``), and a tag that reads as SQL92
    (a comparison, a parenthesis, a quote, or an SQL keyword between words).
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
        sql = next((c for c in _SQL_CHARS if c in tag), None)
        words = tag.split()
        if sql is None and len(words) > 1:
            sql = next((w for w in words if w.upper() in _SQL_WORDS), None)
        if sql is not None:
            return (
                f"tag expression {expression!r} looks like SQL92 (it has {sql!r}); a TAG "
                f'expression is tags separated by "||"; {_SQL_HINT}'
            )
    return None


def check_expression(expression: str | None, expression_type: str = "TAG") -> str | None:
    """What is wrong with a subscription expression of ``expression_type``, or None.

    The one rule every API applies (consumers' ``subscribe``, the Spark source,
    ``rmqk check``). An SQL92 expression is only checked to be present here: its
    syntax is the broker's to judge, and a broker's refusal names its reason.
    """
    if expression_type not in ("TAG", "SQL92"):
        return f'expression type {expression_type!r} is not one of "TAG", "SQL92"'
    if expression_type == "SQL92":
        if expression is None or not expression.strip():
            return "an SQL92 expression must not be empty"
        return None
    if expression is None:
        return None
    return check_tag_expression(expression)
