"""Topic names, permissions and the topics the broker creates on its own.

The rules of Apache's TopicValidator and the create methods of its
TopicConfigManager, shared by the send, client and admin processors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rmqk.model import PERM_INHERIT, PERM_READ, PERM_WRITE, perm_to_string
from rmqk.plugins.broker.processors.context import BrokerContext
from rmqk.plugins.broker.store.topics import TopicConfig

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "TOPIC_MAX_LENGTH",
    "add_retry_topics",
    "create_topic_in_send",
    "create_topic_in_send_back",
    "perm_to_string",
    "save_topic",
    "topic_config_string",
    "validate_group",
    "validate_topic",
]

log = logging.getLogger("rmqk.broker")

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH
_VALID_NAME_CHARS = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def topic_config_string(cfg: TopicConfig) -> str:
    """TopicConfig.toString, as it appears in remarks."""
    return (
        f"TopicConfig [topicName={cfg.topic_name}, readQueueNums={cfg.read_queue_nums}, "
        f"writeQueueNums={cfg.write_queue_nums}, perm={perm_to_string(cfg.perm)}, "
        f"topicFilterType={cfg.topic_filter_type}, topicSysFlag={cfg.topic_sys_flag}, "
        f"order={'true' if cfg.order else 'false'}]"
    )


def validate_topic(topic: str | None) -> str | None:
    """TopicValidator.validateTopic: the SYSTEM_ERROR remark, or None when valid."""
    if topic is None or not topic.strip():
        return "The specified topic is blank."
    if not _VALID_NAME_CHARS.issuperset(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def validate_group(group: str | None) -> str | None:
    """Validators.checkGroup (the client's check, applied at the broker's door).

    The remark, or None when valid. Apache's broker takes any group a client
    names; a name that is not one (a lone surrogate, a space) would become a retry
    topic no listing could show, so here it is refused where it comes in.
    """
    if group is None or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    if not _VALID_NAME_CHARS.issuperset(group):
        shown = group.encode("utf-8", "replace").decode("utf-8")
        return (
            f"the specified group[{shown}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    return None


def add_retry_topics(
    ctx: BrokerContext, wanted: Iterable[tuple[str, int]], perm: int
) -> list[TopicConfig]:
    """createTopicInSendMessageBackMethod for many (topic, sys flag) at once, in memory.

    The caller writes the topic file and registers the routes once for all of
    them (:meth:`BrokerContext.persist_topics`): one request naming a thousand new
    groups costs one write, not a thousand ever longer ones.
    """
    created: list[TopicConfig] = []
    queue_nums = ctx.settings.retry_queue_nums
    for topic, sys_flag in wanted:
        if ctx.topics.get(topic) is None:
            cfg = TopicConfig(topic, queue_nums, queue_nums, perm=perm, topic_sys_flag=sys_flag)
            ctx.topics.put(cfg, persist=False)
            created.append(cfg)
    if created:
        log.info(
            "creating %d topic(s) with %d queues: %s%s",
            len(created),
            queue_nums,
            ", ".join(c.topic_name for c in created[:3]),
            ", ..." if len(created) > 3 else "",
        )
    return created


def save_topic(ctx: BrokerContext, cfg: TopicConfig) -> TopicConfig:
    """Store ``cfg`` and let the name server learn the new route."""
    ctx.topics.put(cfg)
    ctx.on_topics_changed()
    return cfg


def create_topic_in_send_back(
    ctx: BrokerContext, topic: str, queue_nums: int, perm: int, sys_flag: int = 0
) -> TopicConfig:
    """createTopicInSendMessageBackMethod: retry and DLQ topics appear on first use."""
    cfg = ctx.topics.get(topic)
    if cfg is not None:
        return cfg
    log.info("creating topic %s with %d queues", topic, queue_nums)
    return _save_new_topic(ctx, topic, queue_nums, perm, sys_flag)


def create_topic_in_send(
    ctx: BrokerContext,
    topic: str,
    default_topic: str | None,
    client_queue_nums: int,
    sys_flag: int,
) -> TopicConfig | None:
    """createTopicInSendMessageMethod: inherit from the default topic (TBW102)."""
    cfg = ctx.topics.get(topic)
    if cfg is not None:
        return cfg
    if default_topic is None:
        return None
    default = ctx.topics.get(default_topic)
    if default is None:
        return None
    perm = default.perm
    if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not ctx.settings.auto_create_topic:
        perm = PERM_READ | PERM_WRITE
    if not perm & PERM_INHERIT:
        return None
    queue_nums = max(0, min(client_queue_nums, default.write_queue_nums))
    log.info("auto-creating topic %s with %d queues (from %s)", topic, queue_nums, default_topic)
    return _save_new_topic(
        ctx, topic, queue_nums, perm & ~PERM_INHERIT, sys_flag, default.topic_filter_type
    )


def _save_new_topic(
    ctx: BrokerContext,
    topic: str,
    queue_nums: int,
    perm: int,
    sys_flag: int,
    filter_type: str = "SINGLE_TAG",
) -> TopicConfig:
    # A topic the broker creates itself has as many read queues as write queues.
    cfg = TopicConfig(
        topic_name=topic,
        read_queue_nums=queue_nums,
        write_queue_nums=queue_nums,
        perm=perm,
        topic_filter_type=filter_type,
        topic_sys_flag=sys_flag,
    )
    return save_topic(ctx, cfg)
