"""Namespaces: how a client's topics and groups are named on the wire (Java's NamespaceUtil).

A client with namespace ``ns`` sends topic ``T`` as ``ns%T`` and group ``G`` as
``ns%G``; the group's retry and dead-letter topics become ``%RETRY%ns%G`` and
``%DLQ%ns%G``. System topics (``TBW102``, ``SCHEDULE_TOPIC_XXXX``,
``RMQ_SYS_TRACE_TOPIC``, anything starting ``rmq_sys_``, ...) and system groups
(``CID_RMQ_SYS_...``) are never wrapped, and a name that already carries the
namespace is left as it is, so wrapping twice is harmless. Unwrapping is the
inverse for names of this namespace only: another namespace's names pass through.

Every function here is pure and follows Apache RocketMQ 4.9.8's ``NamespaceUtil``,
``ClientConfig`` and ``NameServerAddressUtils`` rule for rule (tests/test_namespace.py
holds the table). The consumers and the producer call them at their API boundary:
everything inside the client, and everything on the wire, uses wrapped names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rmqk.model import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.spi.options import Where

__all__ = [
    "NAMESPACE_SEPARATOR",
    "SYSTEM_TOPICS",
    "check_namespace",
    "effective_namespace",
    "is_already_with_namespace",
    "is_system_resource",
    "namespace_from_endpoint",
    "namespace_of",
    "resolve_namespace",
    "unwrap",
    "unwrap_queue",
    "wrap",
    "wrap_and_retry",
    "wrap_queue",
]

NAMESPACE_SEPARATOR = "%"

# TopicValidator.SYSTEM_TOPIC_SET of 4.9.8, plus its prefix rule below.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# MixAll.isSysConsumerGroup.
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"

# NameServerAddressUtils.INST_ENDPOINT_PATTERN: an Aliyun-style instance endpoint.
_INSTANCE_ENDPOINT = re.compile(r"(\w+://|)MQ_INST_\w+_\w+\..*", re.DOTALL)
# The characters Java accepts in a topic or group, less '%': a namespace holding the
# separator would be cut at the wrong place when unwrapped (Java cuts at the first '%').
_NAMESPACE_CHARS = re.compile(r"[|a-zA-Z0-9_-]+")


def is_system_resource(resource: str) -> bool:
    """A system topic or group, which no namespace applies to."""
    if not resource:
        return False
    return (
        resource in SYSTEM_TOPICS
        or resource.startswith(SYSTEM_TOPIC_PREFIX)
        or resource.startswith(SYSTEM_GROUP_PREFIX)
    )


def _strip_retry_dlq(resource: str) -> tuple[str, str]:
    """(the %RETRY% or %DLQ% prefix or "", the rest)."""
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_GROUP_TOPIC_PREFIX, resource[len(RETRY_GROUP_TOPIC_PREFIX) :]
    if resource.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return DLQ_GROUP_TOPIC_PREFIX, resource[len(DLQ_GROUP_TOPIC_PREFIX) :]
    return "", resource


def is_already_with_namespace(resource: str, namespace: str | None) -> bool:
    if not namespace or not resource or is_system_resource(resource):
        return False
    return _strip_retry_dlq(resource)[1].startswith(namespace + NAMESPACE_SEPARATOR)


def wrap(namespace: str | None, resource: str) -> str:
    """``ns%name`` (``%RETRY%ns%name``, ``%DLQ%ns%name``); system and wrapped names unchanged."""
    if not namespace or not resource:
        return resource
    if is_system_resource(resource) or is_already_with_namespace(resource, namespace):
        return resource
    prefix, rest = _strip_retry_dlq(resource)
    return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{rest}"


def wrap_and_retry(namespace: str | None, group: str) -> str:
    """The retry topic of ``group`` under ``namespace``: ``%RETRY%ns%group``."""
    return RETRY_GROUP_TOPIC_PREFIX + wrap(namespace, group)


def _unwrap_any(resource: str) -> str:
    # NamespaceUtil.withoutNamespace(resource): cut everything up to the first '%'
    # after the retry/DLQ prefix, whichever namespace it names.
    if not resource or is_system_resource(resource):
        return resource
    prefix, rest = _strip_retry_dlq(resource)
    index = rest.find(NAMESPACE_SEPARATOR)
    if index > 0:
        return prefix + rest[index + 1 :]
    return resource


def unwrap(namespace: str | None, resource: str) -> str:
    """The name the user gave: ``ns%T`` -> ``T``, ``%RETRY%ns%G`` -> ``%RETRY%G``.

    Names of another namespace, or of none, are returned unchanged.
    """
    if not resource or not namespace:
        return resource
    if _strip_retry_dlq(resource)[1].startswith(namespace + NAMESPACE_SEPARATOR):
        return _unwrap_any(resource)
    return resource


def namespace_of(resource: str) -> str:
    """The namespace a wire name carries, or "" (getNamespaceFromResource)."""
    if not resource or is_system_resource(resource):
        return ""
    rest = _strip_retry_dlq(resource)[1]
    index = rest.find(NAMESPACE_SEPARATOR)
    return rest[:index] if index > 0 else ""


def wrap_queue(namespace: str | None, queue: MessageQueue) -> MessageQueue:
    """queueWithNamespace: the same queue under its wire topic."""
    if not namespace:
        return queue
    topic = wrap(namespace, queue.topic)
    return queue if topic == queue.topic else MessageQueue(topic, queue.broker_name, queue.queue_id)


def unwrap_queue(namespace: str | None, queue: MessageQueue) -> MessageQueue:
    if not namespace:
        return queue
    topic = unwrap(namespace, queue.topic)
    return queue if topic == queue.topic else MessageQueue(topic, queue.broker_name, queue.queue_id)


def namespace_from_endpoint(namesrv_addr: str) -> str | None:
    """The instance id of an ``MQ_INST_<a>_<b>.<host>`` name server endpoint, else None.

    Java's ClientConfig.getNamespace falls back to it when no namespace is set.
    """
    if not namesrv_addr or not _INSTANCE_ENDPOINT.fullmatch(namesrv_addr):
        return None
    return namesrv_addr[namesrv_addr.rfind("/") + 1 : namesrv_addr.find(".")]


def effective_namespace(namespace: str | None, namesrv_addrs: Iterable[str]) -> str | None:
    """The namespace a client uses: the option, else the one its name server endpoint names.

    An empty namespace is Java's ``setNamespace("")``: none, and no endpoint fallback.
    """
    if namespace is not None:
        return namespace or None
    return namespace_from_endpoint(";".join(namesrv_addrs))


def resolve_namespace(namespace: str | None, namesrv_addrs: Iterable[str], who: str) -> str | None:
    """Check the ``namespace`` option of ``who`` and return the effective namespace.

    Raises :class:`rmqk.model.errors.ConfigError` naming the option when it is not usable.
    """
    problem = check_namespace(namespace)
    if problem:
        raise ConfigError([Where("<options>", who).problem("namespace", problem)])
    return effective_namespace(namespace, namesrv_addrs)


def check_namespace(namespace: object) -> str | None:
    """What is wrong with a namespace option value, or None."""
    if namespace is None or namespace == "":
        return None
    if not isinstance(namespace, str):
        return f"must be a string, got {type(namespace).__name__}"
    if NAMESPACE_SEPARATOR in namespace:
        return (
            f"the namespace {namespace!r} contains '%', the separator between namespace and "
            "name; allowed: letters, digits, '_', '-' and '|'"
        )
    if not _NAMESPACE_CHARS.fullmatch(namespace):
        return (
            f"the namespace {namespace!r} contains illegal characters; allowed: letters, "
            "digits, '_', '-' and '|' (topics and groups allow only ^[%|a-zA-Z0-9_-]+$)"
        )
    return None
