"""SQL92 filtering on the broker: ConsumerFilterManager and ExpressionMessageFilter.

A consumer's heartbeat registers each SQL92 subscription here; its expression is
compiled when the subscription first arrives or its version grows with a new
text, never per message.  A pull then tests every stored record's properties
against the compiled selector.  Like Apache 4.9.8 with ``filterSupportRetry``
off (its default), pulls of a retry topic are not filtered: the consumer
subscribes to its retry topic by tag ``*``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable

import attrs

from rmqk.model import ExpressionType, SubscriptionData
from rmqk.model.message import parse_properties
from rmqk.plugins.broker.sql92 import Selector, Sql92Error, compile_selector
from rmqk.wire.message_codec import MAGIC_CODE_V2, prefix_size
from rmqk.wire.protocol import ResponseCode

__all__ = [
    "ConsumerFilters",
    "FilterData",
    "check_subscription",
    "record_filter",
    "record_properties",
]

log = logging.getLogger("rmqk.broker")

_SYS_FLAG = struct.Struct(">i")
_MAGIC = struct.Struct(">i")
_SHORT = struct.Struct(">H")
_SYS_FLAG_POS = 4 + 4 + 4 + 4 + 4 + 8 + 8  # total, magic, crc, queue id, flag, two offsets


@attrs.frozen
class FilterData:
    """One group's compiled subscription to one topic (ConsumerFilterData)."""

    topic: str
    group: str
    expression: str
    expression_type: str
    client_version: int
    selector: Selector = attrs.field(repr=False)
    # Built with the data, so a pull only looks it up.
    record_filter: Callable[[bytes], bool] = attrs.field(repr=False, eq=False)


def compile_filter(expression_type: str, expression: str) -> Selector:
    """FilterFactory.get(type).compile(expr): SQL92 is the only filter type registered."""
    if expression_type != ExpressionType.SQL92.value:
        # Apache dereferences the missing FilterSpi: a NullPointerException, no message.
        raise Sql92Error(None)
    return compile_selector(expression)


def check_subscription(
    expression_type: str | None, expression: str | None, enabled: bool
) -> tuple[int, str | None]:
    """CHECK_CLIENT_CONFIG's answer (code, remark) for one subscription."""
    if expression_type in (None, "", ExpressionType.TAG.value):
        return ResponseCode.SUCCESS, None
    if not enabled:
        return (
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {expression_type}",
        )
    try:
        # A null expression reaches Apache's parser as a NullPointerException too.
        compile_filter(expression_type, expression if expression is not None else "")
    except Sql92Error as exc:
        return ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.remark
    return ResponseCode.SUCCESS, None


class ConsumerFilters:
    """Compiled SQL92 subscriptions by (topic, group), as ConsumerFilterManager keeps them."""

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], FilterData] = {}

    @staticmethod
    def build(
        topic: str, group: str, expression: str, etype: ExpressionType, version: int
    ) -> FilterData | None:
        """ConsumerFilterManager.build: the compiled data, or None (logged) when it fails."""
        try:
            selector = compile_filter(etype.value, expression)
        except Sql92Error as exc:
            log.error(
                "parse error: expr=%s, topic=%s, group=%s, error=%s", expression, topic, group, exc
            )
            return None
        return FilterData(
            topic, group, expression, etype.value, version, selector, record_filter(selector)
        )

    def get(self, topic: str, group: str) -> FilterData | None:
        return self._table.get((topic, group))

    def register_group(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """A heartbeat's subscriptions; Apache keeps a dropped topic's data (marked dead)."""
        for sub in subscriptions:
            self.register(sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version)

    def register(
        self, topic: str, group: str, expression: str, etype: ExpressionType, version: int
    ) -> None:
        if etype is ExpressionType.TAG or not expression:
            return
        key = (topic, group)
        old = self._table.get(key)
        if old is None:
            built = self.build(topic, group, expression, etype, version)
            if built is not None:
                self._table[key] = built
            return
        if version <= old.client_version:
            return  # an older or repeated subscription version: nothing to recompile
        if old.expression != expression or old.expression_type != etype.value:
            built = self.build(topic, group, expression, etype, version)
            if built is None:
                # Apache drops the old filter so the client's pulls report the error.
                del self._table[key]
            else:
                self._table[key] = built
            return
        self._table[key] = attrs.evolve(old, client_version=version)


def record_properties(record: bytes | memoryview) -> dict[str, str]:
    """MessageDecoder.decodeProperties on one stored record."""
    sys_flag = _SYS_FLAG.unpack_from(record, _SYS_FLAG_POS)[0]
    pos = prefix_size(sys_flag)
    body_length = _SYS_FLAG.unpack_from(record, pos - 4)[0]
    pos += body_length
    if _MAGIC.unpack_from(record, 4)[0] == MAGIC_CODE_V2:
        topic_length = _SHORT.unpack_from(record, pos)[0]
        pos += 2
    else:
        topic_length = record[pos]
        pos += 1
    pos += topic_length
    length = _SHORT.unpack_from(record, pos)[0]
    pos += 2
    return parse_properties(bytes(record[pos : pos + length]).decode("utf-8", "replace"))


def record_filter(selector: Selector) -> Callable[[bytes], bool]:
    """isMatchedByCommitLog: a record matches when its properties select TRUE."""
    matches = selector.matches

    def accept(record: bytes) -> bool:
        try:
            props = record_properties(record)
        except (struct.error, IndexError):
            log.error("Message Filter error, cannot decode properties, %s", selector.expression)
            return False
        return matches(props)

    return accept
