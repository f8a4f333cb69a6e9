"""What Java's Validators accept as a group, topic or tag expression."""

from __future__ import annotations

import re

from rmqk.optiontext import describe_value

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "GROUP_MAX_LENGTH",
    "NAME_PATTERN",
    "TOPIC_MAX_LENGTH",
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
