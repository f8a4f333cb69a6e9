"""``rmqk broker --config FILE``: the keys of Apache's broker.conf that rmqk's broker reads.

The file is a Java properties file as ``mqbroker -c`` takes it. A key rmqk does
not implement is an error naming it, never silently ignored; a flag given on
the command line wins over the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import attrs

from rmqk.model.errors import RmqkError

__all__ = ["BROKER_CONF_KEYS", "BrokerFileConfig", "read_broker_config"]


@attrs.frozen
class BrokerFileConfig:
    """The settings a broker.conf gave; None where it did not name the key."""

    enable_property_filter: bool | None = None
    broker_name: str | None = None
    cluster: str | None = None
    auto_create_topic: bool | None = None
    transaction_timeout_ms: int | None = None
    transaction_check_max: int | None = None
    transaction_check_interval_ms: int | None = None
    message_index_enable: bool | None = None
    max_hash_slot_num: int | None = None
    max_index_num: int | None = None


def _boolean(key: str, text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise RmqkError(f"broker config: {key}={text!r}: expected true or false")
    return lowered == "true"


def _name(key: str, text: str) -> str:
    if not text:
        raise RmqkError(f"broker config: {key} is empty")
    return text


def _at_least(low: int) -> Callable[[str, str], int]:
    def convert(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise RmqkError(f"broker config: {key}={text!r}: expected a whole number") from None
        if value < low:
            raise RmqkError(f"broker config: {key}={value}: must be at least {low}")
        return value

    return convert


_positive = _at_least(1)


# broker.conf key -> (BrokerFileConfig field, converter)
_KEYS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "enablePropertyFilter": ("enable_property_filter", _boolean),
    "brokerName": ("broker_name", _name),
    "brokerClusterName": ("cluster", _name),
    "autoCreateTopicEnable": ("auto_create_topic", _boolean),
    # Apache's units: milliseconds for the two times.
    "transactionTimeOut": ("transaction_timeout_ms", _positive),
    "transactionCheckMax": ("transaction_check_max", _positive),
    "transactionCheckInterval": ("transaction_check_interval_ms", _positive),
    # MessageStoreConfig's index keys; entry 0 of an index file is never used.
    "messageIndexEnable": ("message_index_enable", _boolean),
    "maxHashSlotNum": ("max_hash_slot_num", _positive),
    "maxIndexNum": ("max_index_num", _at_least(2)),
}

# What `rmqk broker --help` lists: every key a broker.conf may hold for rmqk.
BROKER_CONF_KEYS: tuple[str, ...] = tuple(_KEYS)


def _pairs(text: str) -> list[tuple[str, str]]:
    # java.util.Properties: '#' and '!' comments, '=' or ':' or a blank separates.
    out: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            key, _, value = line.partition(" ")
        else:
            key, value = line[:cut], line[cut + 1 :]
        out.append((key.strip(), value.strip()))
    return out


def read_broker_config(path: str | os.PathLike[str]) -> BrokerFileConfig:
    """Read a broker.conf; raises RmqkError naming an unknown key or a bad value."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RmqkError(f"broker config {path}: {exc.strerror or exc}") from exc
    values: dict[str, object] = {}
    for key, value in _pairs(text):
        known = _KEYS.get(key)
        if known is None:
            raise RmqkError(
                f"broker config {path}: {key} is not a setting rmqk's broker has "
                f"(it reads {', '.join(sorted(_KEYS))})"
            )
        field, convert = known
        values[field] = convert(key, value)
    return BrokerFileConfig(**values)  # type: ignore[arg-type]
