"""PullMessageProcessor: PULL_MESSAGE, with long polling through the hold service.

Follows Apache 4.9.8 in the response codes, remarks and header fields a pulling
consumer sees, and in committing the offset a pull carries.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from rmqk.model import (
    MASTER_ID,
    PERM_READ,
    SUB_ALL,
    ExpressionType,
    SubscriptionData,
    java_string_hash,
)
from rmqk.plugins.broker.commands import FAQ_SUFFIX, HeaderError, Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.filtering import ConsumerFilters, FilterData
from rmqk.plugins.broker.longpoll import HeldPull, PullHoldService
from rmqk.plugins.broker.processors.context import BrokerContext, Processor
from rmqk.wire.protocol import PullSysFlag, RemotingCommand, ResponseCode

__all__ = ["PullMessageProcessor", "build_broker_subscription"]

log = logging.getLogger("rmqk.broker")

# GetMessageStatus (by name) → pull response code, as PullMessageProcessor maps them.
_PULL_CODES = {
    "FOUND": ResponseCode.SUCCESS,
    "MESSAGE_WAS_REMOVING": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
}
_EMPTY_QUEUE_STATUSES = frozenset({"NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"})
# Plain ints: an int & IntFlag goes through enum machinery on every pull.
_PULL_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_PULL_SUSPEND = int(PullSysFlag.SUSPEND)
_PULL_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_MASTER_ID_TEXT = str(MASTER_ID)


def _java_addr(conn: Connection) -> str:
    # Java's InetSocketAddress.toString() of a numeric address: "/ip:port".
    return "/" + conn.remote_addr


class PullMessageProcessor(Processor):
    """Answers pulls now, or holds them until a message arrives or the suspend time ends."""

    def __init__(self, ctx: BrokerContext, *, hold_check_interval: float) -> None:
        super().__init__(ctx)
        self.holds = PullHoldService(
            self._answer_held_pull,
            self._max_offset,
            tags_codes=self._tags_codes,
            check_interval=hold_check_interval,
        )

    def pull_message(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        return self._process_pull(conn, request, serialize_type, allow_suspend=True)

    def _pull_subscription(
        self, request: RemotingCommand, h: Headers, group: str, topic: str, sys_flag: int
    ) -> tuple[SubscriptionData, FilterData | None] | RemotingCommand:
        if sys_flag & _PULL_SUBSCRIPTION:
            expression_type = h.opt_text("expressionType")
            sub = build_broker_subscription(topic, h.opt_text("subscription"), expression_type)
            if sub is None:
                return make_response(
                    request,
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    "parse the consumer's subscription failed",
                )
            if sub.expression_type is ExpressionType.TAG:
                return sub, None
            # As on Apache, an expression that does not compile leaves no filter at
            # all (every message passes): CHECK_CLIENT_CONFIG is what refuses it.
            return sub, ConsumerFilters.build(
                topic, group, sub.sub_string, sub.expression_type, h.lenient_number("subVersion")
            )
        info = self.ctx.clients.consumer_group(group)
        if info is None:
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist{FAQ_SUFFIX}",
            )
        found = info.subscriptions.get(topic)
        if found is None:
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist{FAQ_SUFFIX}",
            )
        if found.sub_version < h.lenient_number("subVersion"):
            return make_response(
                request,
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                "the consumer's subscription not latest",
            )
        if found.expression_type is ExpressionType.TAG:
            return found, None
        data = self.ctx.filters.get(topic, group)
        if data is None:
            return make_response(
                request,
                ResponseCode.FILTER_DATA_NOT_EXIST,
                "The broker's consumer filter data is not exist!Your expression may be wrong!",
            )
        if data.client_version < h.lenient_number("subVersion"):
            return make_response(
                request,
                ResponseCode.FILTER_DATA_NOT_LATEST,
                "the consumer's consumer filter data not latest",
            )
        return found, data

    def _process_pull(
        self,
        conn: Connection,
        request: RemotingCommand,
        serialize_type: int,
        *,
        allow_suspend: bool,
    ) -> RemotingCommand | None:
        h = Headers(request)
        group = h.opt_text("consumerGroup")
        topic = h.opt_text("topic")
        if group is None or topic is None:
            raise HeaderError("java.lang.NullPointerException")
        sys_flag = h.lenient_number("sysFlag")
        queue_id = h.lenient_number("queueId")
        queue_offset = h.lenient_number("queueOffset")
        max_msgs = h.lenient_number("maxMsgNums")
        has_suspend = bool(sys_flag & _PULL_SUSPEND)
        has_commit = bool(sys_flag & _PULL_COMMIT_OFFSET)
        suspend_ms = h.lenient_number("suspendTimeoutMillis") if has_suspend else 0

        cfg = self.ctx.topics.get(topic)
        if cfg is None:
            log.error("the topic %s does not exist, consumer: %s", topic, conn.remote_addr)
            return make_response(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please! {FAQ_SUFFIX}",
            )
        if not cfg.perm & PERM_READ:
            return make_response(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic}] pulling message is forbidden",
            )
        if queue_id < 0 or queue_id >= cfg.read_queue_nums:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{cfg.read_queue_nums}] consumer:[{_java_addr(conn)}]",
            )
        found = self._pull_subscription(request, h, group, topic, sys_flag)
        if isinstance(found, RemotingCommand):
            return found
        sub, filter_data = found
        if (
            sub.expression_type is not ExpressionType.TAG
            and not self.ctx.settings.enable_property_filter
        ):
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by "
                + sub.expression_type.value,
            )
        if sub.expression_type is ExpressionType.TAG:
            tag_filter, rec_filter = _tag_filter(sub), None
        else:
            tag_filter = None
            rec_filter = None if filter_data is None else filter_data.record_filter
        result = self.ctx.store.get_messages(
            topic,
            queue_id,
            queue_offset,
            max(0, min(max_msgs, self.ctx.settings.max_pull_msgs)),
            max_total_bytes=self.ctx.settings.max_pull_bytes,
            tag_filter=tag_filter,
            record_filter=rec_filter,
        )
        status = str(getattr(result.status, "name", result.status))
        if status in _EMPTY_QUEUE_STATUSES:
            code = (
                ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
            )
        else:
            code = _PULL_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        answer: RemotingCommand | None = None
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
            self.holds.hold(
                HeldPull(
                    conn=conn,
                    request=request,
                    serialize_type=serialize_type,
                    topic=topic,
                    queue_id=queue_id,
                    offset=queue_offset,
                    timeout=suspend_ms / 1000.0,
                    # Without a filter every arrival matches (no scan needed to know).
                    has_match=_arrival_judge(
                        self.ctx.store, topic, queue_id, tag_filter, rec_filter
                    ),
                )
            )
        else:
            answer = make_response(
                request,
                code,
                status,
                fields={
                    "suggestWhichBrokerId": _MASTER_ID_TEXT,
                    "nextBeginOffset": str(result.next_begin_offset),
                    "minOffset": str(result.min_offset),
                    "maxOffset": str(result.max_offset),
                },
                body=b"".join(result.records) if code == ResponseCode.SUCCESS else b"",
            )
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning(
                "PULL_OFFSET_MOVED: topic=%s group=%s requestOffset=%d newOffset=%d",
                topic,
                group,
                queue_offset,
                result.next_begin_offset,
            )
        if allow_suspend and has_commit:
            self.ctx.store.consumer_offsets.commit_offset(
                group, topic, queue_id, h.lenient_number("commitOffset")
            )
        return answer

    def _tags_codes(self, topic: str, queue_id: int, start: int, end: int) -> list[int] | None:
        """The tags codes of consume-queue entries [start, end); None if one is unreadable."""
        cq = self.ctx.store.consume_queue(topic, queue_id)
        if cq is None:
            return None
        codes: list[int] = []
        for index in range(start, end):
            entry = cq.entry(index)
            if entry is None:
                return None
            codes.append(entry[2])
        return codes

    def _max_offset(self, topic: str, queue_id: int) -> int:
        return int(self.ctx.store.max_offset(topic, queue_id))

    def _answer_held_pull(self, pull: HeldPull) -> None:
        try:
            response = self._process_pull(
                pull.conn, pull.request, pull.serialize_type, allow_suspend=False
            )
        except HeaderError as exc:
            response = make_response(pull.request, ResponseCode.SYSTEM_ERROR, exc.remark)
        except Exception as exc:
            # A held pull is answered too, even when answering it fails.
            log.warning("answering held pull of %s failed: %r", pull.topic, exc)
            response = make_response(
                pull.request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
            )
        if response is not None:
            pull.conn.respond(pull.request, response, pull.serialize_type)


@functools.lru_cache(maxsize=1024)
def build_broker_subscription(
    topic: str, expression: str | None, expression_type: str | None
) -> SubscriptionData | None:
    """FilterAPI.build as the broker runs it on a pull's subscription; None when it fails.

    Unlike the client's builder it never rejects a tag expression: ``"||"`` gives
    an empty tag set that matches nothing, as on Apache.
    """
    if expression_type is None or expression_type == ExpressionType.TAG.value:
        if expression is None or expression.strip() in ("", SUB_ALL):
            return SubscriptionData(topic=topic, sub_string=SUB_ALL)
        tags = [t.strip() for t in expression.split("||")]
        tags = [t for t in tags if t]
        return SubscriptionData(
            topic=topic,
            sub_string=expression,
            tags_set=frozenset(tags),
            code_set=frozenset(java_string_hash(t) for t in tags),
        )
    if not expression:
        return None
    try:
        etype = ExpressionType(expression_type)
    except ValueError:
        return None
    return SubscriptionData(topic=topic, sub_string=expression, expression_type=etype)


def _arrival_judge(
    store: Any,
    topic: str,
    queue_id: int,
    tag_filter: Callable[[int], bool] | None,
    rec_filter: Callable[[bytes], bool] | None,
) -> Callable[[int, int], bool] | None:
    """How a held pull judges an arriving entry; None when every arrival matches."""
    if rec_filter is None:
        return None if tag_filter is None else _arrival_match(tag_filter)

    def has_match(queue_offset: int, tags_code: int) -> bool:
        # A SQL92 filter needs the record's properties (isMatchedByCommitLog).
        result = store.get_messages(topic, queue_id, queue_offset, 1, record_filter=rec_filter)
        return str(getattr(result.status, "name", result.status)) == "FOUND"

    return has_match


@functools.lru_cache(maxsize=1024)
def _arrival_match(tag_filter: Callable[[int], bool]) -> Callable[[int, int], bool]:
    """A held pull's judge of an arriving entry, one per filter so pulls share verdicts."""

    def has_match(queue_offset: int, tags_code: int) -> bool:
        return tag_filter(tags_code)

    return has_match


def _tag_filter(sub: SubscriptionData) -> Callable[[int], bool] | None:
    """Which consume queue tag codes a pull accepts; None for all (ExpressionMessageFilter)."""
    if sub.sub_string == SUB_ALL or sub.class_filter_mode:
        return None
    return sub.code_set.__contains__
