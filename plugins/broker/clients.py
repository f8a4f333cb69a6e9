"""The broker's consumer and producer tables (ConsumerManager, ProducerManager).

Clients announce themselves with HEART_BEAT; a group's members are told to
rebalance (NOTIFY_CONSUMER_IDS_CHANGED, through the ``notify`` callback) when a
member joins or leaves, when the set of subscribed topics changes, when a
member's connection closes, and when a member has sent no heartbeat for
``channel_expiry`` seconds (its connection is then closed too).

A newer ``subVersion`` of an already known topic replaces the subscription
without a notification, as Apache does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from rmqk.model import (
    SUB_ALL,
    ConsumeFromWhere,
    ConsumeType,
    ExpressionType,
    MessageModel,
    SubscriptionData,
)
from rmqk.wire.jsonwire import as_list

__all__ = [
    "ChannelLike",
    "ClientChannelInfo",
    "ClientManager",
    "ConsumerGroupInfo",
    "HeartbeatConsumer",
    "HeartbeatInfo",
    "parse_heartbeat",
    "subscription_from_json",
]

log = logging.getLogger("rmqk.broker.clients")


class ChannelLike(Protocol):
    """What the tables need of a connection."""

    remote_addr: str
    closed: bool

    def close(self) -> None: ...


@attrs.define
class ClientChannelInfo:
    """One client connection in a group (mutable: heartbeats refresh it)."""

    channel: Any
    client_id: str
    language: str
    version: int
    last_update: float = attrs.field(factory=time.monotonic)


@attrs.frozen
class HeartbeatConsumer:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...]
    unit_mode: bool = False


@attrs.frozen
class HeartbeatInfo:
    client_id: str
    producer_groups: tuple[str, ...]
    consumers: tuple[HeartbeatConsumer, ...]


def _enum_name(value: Any, default: str) -> str:
    if value is None:
        return default
    return str(value)


def subscription_from_json(data: Mapping[str, Any]) -> SubscriptionData:
    """A SubscriptionData as a Java client writes it in HeartbeatData."""
    expression = data.get("expressionType") or ExpressionType.TAG.value
    try:
        etype = ExpressionType(expression)
    except ValueError:
        raise ValueError(f"unknown expressionType {expression!r} in a subscription") from None
    code_set = frozenset(int(c) for c in as_list(data.get("codeSet")))
    tags_set = frozenset(str(t) for t in as_list(data.get("tagsSet")))
    return SubscriptionData(
        topic=str(data["topic"]),
        sub_string=str(data.get("subString") if data.get("subString") is not None else SUB_ALL),
        tags_set=tags_set,
        code_set=code_set,
        sub_version=int(data.get("subVersion") or 0),
        expression_type=etype,
        class_filter_mode=bool(data.get("classFilterMode", False)),
    )


def parse_heartbeat(data: Mapping[str, Any]) -> HeartbeatInfo:
    """HeartbeatData JSON → value object; raises ValueError/KeyError on a malformed body."""
    client_id = data.get("clientID")
    if not isinstance(client_id, str):
        raise ValueError("HeartbeatData has no clientID")
    producers = tuple(str(p["groupName"]) for p in as_list(data.get("producerDataSet")))
    consumers: list[HeartbeatConsumer] = []
    for c in as_list(data.get("consumerDataSet")):
        consumers.append(
            HeartbeatConsumer(
                group=str(c["groupName"]),
                consume_type=_enum_name(c.get("consumeType"), ConsumeType.CONSUME_PASSIVELY.value),
                message_model=_enum_name(c.get("messageModel"), MessageModel.CLUSTERING.value),
                consume_from_where=_enum_name(
                    c.get("consumeFromWhere"), ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value
                ),
                subscriptions=tuple(
                    subscription_from_json(s) for s in as_list(c.get("subscriptionDataSet"))
                ),
                unit_mode=bool(c.get("unitMode", False)),
            )
        )
    return HeartbeatInfo(client_id, producers, tuple(consumers))


class ConsumerGroupInfo:
    """Members and subscriptions of one consumer group."""

    def __init__(
        self, group: str, consume_type: str, message_model: str, consume_from_where: str
    ) -> None:
        self.group = group
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.channels: dict[Any, ClientChannelInfo] = {}
        self.last_update = time.monotonic()

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_channel(
        self,
        info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
    ) -> bool:
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        updated = False
        old = self.channels.get(info.channel)
        if old is None:
            self.channels[info.channel] = info
            old = info
            updated = True
            log.info("new consumer connected, group %s: %s", self.group, info.client_id)
        elif old.client_id != info.client_id:
            self.channels[info.channel] = info
            old = info
        self.last_update = time.monotonic()
        old.last_update = self.last_update
        return updated

    def update_subscriptions(self, subs: Sequence[SubscriptionData]) -> bool:
        updated = False
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in list(self.subscriptions):
            if topic not in topics:
                del self.subscriptions[topic]
                updated = True
        self.last_update = time.monotonic()
        return updated


Notify = Callable[[Any, str], None]


class ClientManager:
    """Consumer groups and producer groups seen on this broker's connections."""

    def __init__(self, notify: Notify, *, channel_expiry: float = 120.0) -> None:
        self._notify = notify
        self.channel_expiry = channel_expiry
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[Any, ClientChannelInfo]] = {}
        self._producer_rr = 0

    # -- consumers ---------------------------------------------------------------

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def register_consumer(
        self,
        hb: HeartbeatConsumer,
        channel_info: ClientChannelInfo,
        *,
        notify_enabled: bool = True,
    ) -> bool:
        info = self.consumers.get(hb.group)
        if info is None:
            info = ConsumerGroupInfo(
                hb.group, hb.consume_type, hb.message_model, hb.consume_from_where
            )
            self.consumers[hb.group] = info
        r1 = info.update_channel(
            channel_info, hb.consume_type, hb.message_model, hb.consume_from_where
        )
        r2 = info.update_subscriptions(hb.subscriptions)
        if (r1 or r2) and notify_enabled:
            self._notify_all(hb.group, info.channels)
        return r1 or r2

    def unregister_consumer(self, group: str, channel: Any, *, notify_enabled: bool = True) -> None:
        info = self.consumers.get(group)
        if info is None:
            return
        info.channels.pop(channel, None)
        if not info.channels:
            self.consumers.pop(group, None)
            log.info("consumer group %s has no member left; removed", group)
        if notify_enabled:
            self._notify_all(group, info.channels)

    # -- producers ---------------------------------------------------------------

    def register_producer(self, group: str, channel_info: ClientChannelInfo) -> None:
        table = self.producers.setdefault(group, {})
        old = table.get(channel_info.channel)
        if old is None:
            table[channel_info.channel] = channel_info
        else:
            old.last_update = time.monotonic()

    def unregister_producer(self, group: str, channel: Any) -> None:
        table = self.producers.get(group)
        if table is None:
            return
        table.pop(channel, None)
        if not table:
            del self.producers[group]

    def find_producer_channel(self, client_id: str) -> Any:
        """ProducerManager.findChannel: the open connection of a producer client, or None."""
        for table in self.producers.values():
            for info in table.values():
                if info.client_id == client_id and not getattr(info.channel, "closed", False):
                    return info.channel
        return None

    def available_producer_channel(self, group: str | None) -> Any:
        """ProducerManager.getAvailableChannel: a live connection of the group, round robin.

        A connection that is open and not write-paused wins; failing that, the last
        open one seen; None when the group has none (the check is then skipped).
        """
        table = self.producers.get(group) if group is not None else None
        if not table:
            log.warning("Check transaction failed, channel table is empty. groupId=%s", group)
            return None
        channels = list(table)
        self._producer_rr += 1
        start = self._producer_rr % len(channels)
        last_open = None
        for step in range(len(channels)):
            channel = channels[(start + step) % len(channels)]
            if getattr(channel, "closed", False):
                continue
            if not getattr(channel, "_write_paused", False):
                return channel
            last_open = channel
        return last_open

    # -- channel events ----------------------------------------------------------

    def channel_closed(self, channel: Any) -> None:
        """A connection closed: drop it everywhere and tell the rest of its groups."""
        for group in list(self.producers):
            self.unregister_producer(group, channel)
        for group, info in list(self.consumers.items()):
            if info.channels.pop(channel, None) is None:
                continue
            log.info("consumer connection %s of group %s closed", _addr(channel), group)
            if not info.channels:
                self.consumers.pop(group, None)
            self._notify_all(group, info.channels)

    def scan_expired(self, now: float | None = None) -> list[Any]:
        """Close connections without a heartbeat for ``channel_expiry`` seconds.

        Returns the channels closed. Their groups are notified through
        :meth:`channel_closed`, which the connection's close callback calls.
        """
        now = time.monotonic() if now is None else now
        expired: dict[int, Any] = {}
        for info in list(self.consumers.values()):
            for ch, ci in list(info.channels.items()):
                if now - ci.last_update > self.channel_expiry:
                    expired[id(ch)] = ch
        for table in list(self.producers.values()):
            for ch, ci in list(table.items()):
                if now - ci.last_update > self.channel_expiry:
                    expired[id(ch)] = ch
        for ch in expired.values():
            log.warning(
                "no heartbeat from %s for %.0f s; closing it", _addr(ch), self.channel_expiry
            )
            self.channel_closed(ch)
            try:
                ch.close()
            except Exception:
                log.exception("closing expired channel %s failed", _addr(ch))
        return list(expired.values())

    def _notify_all(self, group: str, channels: Iterable[Any]) -> None:
        for ch in list(channels):
            try:
                self._notify(ch, group)
            except Exception:
                log.exception("notifying %s of group %s change failed", _addr(ch), group)


def _addr(channel: Any) -> str:
    return str(getattr(channel, "remote_addr", channel))
