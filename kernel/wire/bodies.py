"""The JSON bodies of remoting commands, as Java's fastjson writes and reads them.

fastjson writes bean fields in alphabetical order, leaves out null fields, writes
enums by name, and writes a map whose keys are beans (``Map<MessageQueue, Long>``)
with the key object itself in key position, and a map with integer keys with the
integer unquoted: neither is standard JSON. :func:`loads` reads all of that;
the ``encode_*`` functions write what a Java peer expects, and each body has a
``decode_*`` counterpart so a broker (or a test) can read what a client sends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rmqk.model import (
    ConsumeFromWhere,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from rmqk.model.errors import RemotingError
from rmqk.spi.transport import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    HeartbeatData,
    ProcessQueueInfo,
    ProducerData,
)
from rmqk.wire.javajson import (
    bean,
    java_double,
    java_string,
    object_key_map,
    utf16_key,
)

__all__ = [
    "BodyFormatError",
    "ObjectKey",
    "decode_consume_message_directly_result",
    "decode_consumer_id_list",
    "decode_consumer_running_info",
    "decode_consumer_status",
    "decode_heartbeat",
    "decode_lock_batch_request",
    "decode_lock_batch_response",
    "decode_reset_offset",
    "dumps",
    "encode_check_client",
    "encode_consume_message_directly_result",
    "encode_consumer_id_list",
    "encode_consumer_running_info",
    "encode_consumer_status",
    "encode_heartbeat",
    "encode_lock_batch_request",
    "encode_lock_batch_response",
    "encode_reset_offset",
    "loads",
    "message_queue_from_json",
    "message_queue_to_json",
    "subscription_json",
]


class BodyFormatError(RemotingError):
    """A command body that is not the JSON its request code calls for."""


class ObjectKey(tuple[tuple[Any, Any], ...]):
    """An object that fastjson wrote in the key position of a map, made hashable.

    Holds the object's (name, value) pairs sorted by name; ``dict(key)`` gives the
    object back.
    """

    __slots__ = ()


# ----------------------------------------------------------------------------- reading

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


class _LenientParser:
    """A recursive-descent JSON reader that also accepts fastjson's non-standard keys."""

    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> BodyFormatError:
        snippet = self.text[self.pos : self.pos + 30]
        return BodyFormatError(f"malformed JSON body at char {self.pos}: {message} ({snippet!r})")

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end of text")
        return self.text[self.pos]

    def document(self) -> Any:
        value = self.value()
        self.skip_ws()
        if self.pos != len(self.text):
            raise self.fail("extra text after the JSON value")
        return value

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch == '"':
            return self.string()
        for word, result in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return result
        return self.number()

    def string(self) -> str:
        try:
            text, end = _scanstring(self.text, self.pos + 1, True)
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad string: {exc.msg}") from None
        self.pos = end
        return str(text)

    def number(self) -> int | float:
        m = _NUMBER.match(self.text, self.pos)
        if m is None:
            raise self.fail("expected a value")
        self.pos = m.end()
        if m.group(1) or m.group(2):
            return float(m.group(0))
        return int(m.group(0))

    def key(self) -> Any:
        ch = self.peek()
        if ch == '"':
            return self.string()
        if ch == "{":
            obj = self.obj()
            try:
                return ObjectKey(sorted(obj.items(), key=lambda kv: str(kv[0])))
            except TypeError:
                raise self.fail("an object used as a map key holds unhashable values") from None
        if ch == "-" or ch.isdigit():
            return self.number()
        raise self.fail("expected a map key")

    def obj(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            key = self.key()
            if self.peek() != ":":
                raise self.fail("expected ':'")
            self.pos += 1
            out[key] = self.value()
            if self.member_ends("}"):
                return out

    def array(self) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            if self.member_ends("]"):
                return out

    def member_ends(self, close: str) -> bool:
        """Step over the ',' or ``close`` after a member; True when it was ``close``."""
        ch = self.peek()
        self.pos += 1
        if ch == close:
            return True
        if ch != ",":
            self.pos -= 1
            raise self.fail(f"expected ',' or '{close}'")
        return False


def loads(body: bytes | bytearray | memoryview | str) -> Any:
    """Parse a JSON body, accepting fastjson's unquoted integer keys and object keys.

    Object keys become :class:`ObjectKey`, integer keys ints, quoted keys strings.
    Raises :class:`BodyFormatError` saying where the text went wrong.
    """
    if isinstance(body, str):
        text = body
    else:
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyFormatError(
                f"JSON body is not UTF-8 (byte {exc.start}: {exc.reason})"
            ) from None
    try:
        # Standard JSON is the common case and the C parser is much faster.
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return _LenientParser(text).document()
    except RecursionError:
        raise BodyFormatError("JSON body is nested too deeply") from None


def dumps(value: Any) -> str:
    """Compact JSON with keys in alphabetical order and non-ASCII text kept, as fastjson."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _encode(text: str) -> bytes:
    return text.encode("utf-8")


def _object(value: Any, what: str) -> Mapping[Any, Any]:
    if isinstance(value, ObjectKey):
        return dict(value)
    if not isinstance(value, dict):
        raise BodyFormatError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyFormatError(f"{what} must be a JSON array, got {type(value).__name__}")
    return value


def _body_field(body: bytes, what: str, name: str) -> tuple[Any, str]:
    """Field ``name`` of a body holding one JSON object, and the path errors name it by."""
    return _object(loads(body), what).get(name), f"{what}.{name}"


def _str(obj: Mapping[Any, Any], name: str, what: str, default: str | None = None) -> str:
    value = obj.get(name, default)
    if not isinstance(value, str):
        raise BodyFormatError(f"{what}: field {name!r} must be a string, got {value!r:.60}")
    return value


def _int(obj: Mapping[Any, Any], name: str, what: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyFormatError(f"{what}: field {name!r} must be an integer, got {value!r:.60}")
    return value


def _bool(obj: Mapping[Any, Any], name: str, what: str, default: bool) -> bool:
    value = obj.get(name, default)
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    if not isinstance(value, bool):
        raise BodyFormatError(f"{what}: field {name!r} must be a boolean, got {value!r:.60}")
    return value


# ----------------------------------------------------------------------------- message queues


def message_queue_to_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def message_queue_from_json(value: Any) -> MessageQueue:
    what = "MessageQueue"
    obj = _object(value, what)
    try:
        return MessageQueue(
            _str(obj, "topic", what), _str(obj, "brokerName", what), _int(obj, "queueId", what)
        )
    except ValueError as exc:
        if isinstance(exc, BodyFormatError):
            raise
        raise BodyFormatError(f"{what}: {exc}") from None


def _mq_set(mqs: Iterable[MessageQueue]) -> list[dict[str, Any]]:
    return [message_queue_to_json(mq) for mq in sorted(set(mqs))]


def _offset_map_text(offsets: Mapping[MessageQueue, int]) -> str:
    # fastjson's rendering of Map<MessageQueue, Long>: the key object in key position.
    items = (
        f"{dumps(message_queue_to_json(mq))}:{int(off)}" for mq, off in sorted(offsets.items())
    )
    return "{" + ",".join(items) + "}"


def _offset_map(value: Any, what: str) -> dict[MessageQueue, int]:
    if value is None:
        return {}
    out: dict[MessageQueue, int] = {}
    for key, offset in _object(value, what).items():
        if isinstance(key, str):
            # A standard-JSON writer can only put the key object in a string.
            key = loads(key)
        mq = message_queue_from_json(key)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise BodyFormatError(f"{what}: offset of {mq} must be an integer, got {offset!r:.60}")
        out[mq] = offset
    return out


# ----------------------------------------------------------------------------- heartbeat


def subscription_json(sub: SubscriptionData) -> dict[str, Any]:
    """SubscriptionData as Java's fastjson writes it (heartbeats, running info, admin views)."""
    return {
        "classFilterMode": sub.class_filter_mode,
        "codeSet": sorted(sub.code_set),
        "expressionType": sub.expression_type.value,
        "subString": sub.sub_string,
        "subVersion": sub.sub_version,
        "tagsSet": sorted(sub.tags_set),
        "topic": sub.topic,
    }


def _consumer_json(consumer: ConsumerData) -> dict[str, Any]:
    return {
        "consumeFromWhere": consumer.consume_from_where.value,
        "consumeType": consumer.consume_type.value,
        "groupName": consumer.group_name,
        "messageModel": consumer.message_model.value,
        "subscriptionDataSet": [subscription_json(s) for s in consumer.subscriptions],
        "unitMode": consumer.unit_mode,
    }


def encode_check_client(client_id: str, group: str, sub: SubscriptionData) -> bytes:
    """CHECK_CLIENT_CONFIG body: Java's CheckClientRequestBody."""
    return _encode(
        dumps({"clientId": client_id, "group": group, "subscriptionData": subscription_json(sub)})
    )


def encode_heartbeat(heartbeat: HeartbeatData) -> bytes:
    """HEART_BEAT body: Java's HeartbeatData."""
    return _encode(
        dumps(
            {
                "clientID": heartbeat.client_id,
                "consumerDataSet": [_consumer_json(c) for c in heartbeat.consumers],
                "producerDataSet": [{"groupName": p.group_name} for p in heartbeat.producers],
            }
        )
    )


def _enum(cls: Any, value: Any, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise BodyFormatError(f"{what}: unknown value {value!r:.60}; known: {known}") from None


def _subscription_from_json(value: Any) -> SubscriptionData:
    what = "SubscriptionData"
    obj = _object(value, what)
    tags = _list(obj.get("tagsSet"), f"{what}.tagsSet")
    codes = _list(obj.get("codeSet"), f"{what}.codeSet")
    try:
        return SubscriptionData(
            topic=_str(obj, "topic", what),
            sub_string=_str(obj, "subString", what, "*"),
            tags_set=frozenset(str(t) for t in tags),
            code_set=frozenset(int(c) for c in codes),
            sub_version=_int(obj, "subVersion", what, 0),
            expression_type=_enum(
                ExpressionType, obj.get("expressionType") or "TAG", f"{what}.expressionType"
            ),
            class_filter_mode=_bool(obj, "classFilterMode", what, False),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, BodyFormatError):
            raise
        raise BodyFormatError(f"{what}: {exc}") from None


def decode_heartbeat(body: bytes) -> HeartbeatData:
    """Read a HEART_BEAT body (the broker's side of :func:`encode_heartbeat`)."""
    what = "HeartbeatData"
    obj = _object(loads(body), what)
    consumers = []
    for raw in _list(obj.get("consumerDataSet"), f"{what}.consumerDataSet"):
        c = _object(raw, "ConsumerData")
        subscriptions = [
            _subscription_from_json(s)
            for s in _list(c.get("subscriptionDataSet"), "ConsumerData.subscriptionDataSet")
        ]
        consumers.append(
            ConsumerData(
                group_name=_str(c, "groupName", "ConsumerData"),
                consume_type=_enum(ConsumeType, c.get("consumeType"), "ConsumerData.consumeType"),
                message_model=_enum(
                    MessageModel, c.get("messageModel"), "ConsumerData.messageModel"
                ),
                consume_from_where=_enum(
                    ConsumeFromWhere, c.get("consumeFromWhere"), "ConsumerData.consumeFromWhere"
                ),
                subscriptions=subscriptions,
                unit_mode=_bool(c, "unitMode", "ConsumerData", False),
            )
        )
    producers = tuple(
        ProducerData(_str(_object(p, "ProducerData"), "groupName", "ProducerData"))
        for p in _list(obj.get("producerDataSet"), f"{what}.producerDataSet")
    )
    return HeartbeatData(
        client_id=_str(obj, "clientID", what),
        producers=producers,
        consumers=consumers,
    )


# ----------------------------------------------------------------------------- locks


def encode_lock_batch_request(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> bytes:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ body (Lock/UnlockBatchRequestBody)."""
    return _encode(dumps({"clientId": client_id, "consumerGroup": group, "mqSet": _mq_set(mqs)}))


def decode_lock_batch_request(body: bytes) -> tuple[str, str, set[MessageQueue]]:
    """(consumer group, client id, queues) of a lock or unlock request body."""
    what = "LockBatchRequestBody"
    obj = _object(loads(body), what)
    mqs = {message_queue_from_json(m) for m in _list(obj.get("mqSet"), f"{what}.mqSet")}
    return _str(obj, "consumerGroup", what), _str(obj, "clientId", what), mqs


def encode_lock_batch_response(locked: Iterable[MessageQueue]) -> bytes:
    return _encode(dumps({"lockOKMQSet": _mq_set(locked)}))


def decode_lock_batch_response(body: bytes) -> set[MessageQueue]:
    """The queues a LOCK_BATCH_MQ response says are locked (LockBatchResponseBody)."""
    locked = _list(*_body_field(body, "LockBatchResponseBody", "lockOKMQSet"))
    return {message_queue_from_json(m) for m in locked}


# ----------------------------------------------------------------------------- consumer list


def encode_consumer_id_list(ids: Iterable[str]) -> bytes:
    return _encode(dumps({"consumerIdList": list(ids)}))


def decode_consumer_id_list(body: bytes) -> list[str]:
    """GET_CONSUMER_LIST_BY_GROUP response body (GetConsumerListByGroupResponseBody)."""
    value, path = _body_field(body, "GetConsumerListByGroupResponseBody", "consumerIdList")
    ids = _list(value, path)
    if not all(isinstance(i, str) for i in ids):
        raise BodyFormatError(f"{path} must hold strings")
    return ids


# ---------------------------------------------------------------------- broker-pushed offsets


def encode_reset_offset(offsets: Mapping[MessageQueue, int]) -> bytes:
    """RESET_CONSUMER_CLIENT_OFFSET body (ResetOffsetBody)."""
    return _encode('{"offsetTable":' + _offset_map_text(offsets) + "}")


def decode_reset_offset(body: bytes) -> dict[MessageQueue, int]:
    return _offset_map(*_body_field(body, "ResetOffsetBody", "offsetTable"))


def encode_consumer_status(offsets: Mapping[MessageQueue, int]) -> bytes:
    """GET_CONSUMER_STATUS_FROM_CLIENT response body (GetConsumerStatusBody)."""
    return _encode('{"consumerTable":{},"messageQueueTable":' + _offset_map_text(offsets) + "}")


def decode_consumer_status(body: bytes) -> dict[MessageQueue, int]:
    return _offset_map(*_body_field(body, "GetConsumerStatusBody", "messageQueueTable"))


# ----------------------------------------------------------------------------- running info


def _mq_key(mq: MessageQueue) -> str:
    return bean(
        {
            "brokerName": java_string(mq.broker_name),
            "queueId": str(int(mq.queue_id)),
            "topic": java_string(mq.topic),
        }
    )


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _process_queue_info(info: ProcessQueueInfo) -> str:
    # Java's ProcessQueueInfo getters, one for each field.
    return bean(
        {
            "cachedMsgCount": str(int(info.cached_msg_count)),
            "cachedMsgMaxOffset": str(int(info.cached_msg_max_offset)),
            "cachedMsgMinOffset": str(int(info.cached_msg_min_offset)),
            "cachedMsgSizeInMiB": str(int(info.cached_msg_size_in_mib)),
            "commitOffset": str(int(info.commit_offset)),
            "droped": _bool_text(info.droped),
            "lastConsumeTimestamp": str(int(info.last_consume_timestamp)),
            "lastLockTimestamp": str(int(info.last_lock_timestamp)),
            "lastPullTimestamp": str(int(info.last_pull_timestamp)),
            "locked": _bool_text(info.locked),
            "transactionMsgCount": str(int(info.transaction_msg_count)),
            "transactionMsgMaxOffset": str(int(info.transaction_msg_max_offset)),
            "transactionMsgMinOffset": str(int(info.transaction_msg_min_offset)),
            "tryUnlockTimes": str(int(info.try_unlock_times)),
        }
    )


def _consume_status(status: ConsumeStatus) -> str:
    return bean(
        {
            "consumeFailedMsgs": str(int(status.consume_failed_msgs)),
            "consumeFailedTPS": java_double(status.consume_failed_tps),
            "consumeOKTPS": java_double(status.consume_ok_tps),
            "consumeRT": java_double(status.consume_rt),
            "pullRT": java_double(status.pull_rt),
            "pullTPS": java_double(status.pull_tps),
        }
    )


def _subscription_bean(sub: SubscriptionData) -> str:
    # SubscriptionData's serialized getters (filterClassSource is serialize=false). Its
    # sets are HashSets, whose order Java leaves to hashing: they are written sorted.
    return bean(
        {
            "classFilterMode": _bool_text(sub.class_filter_mode),
            "codeSet": "[" + ",".join(str(int(c)) for c in sorted(sub.code_set)) + "]",
            "expressionType": java_string(sub.expression_type.value),
            "subString": java_string(sub.sub_string),
            "subVersion": str(int(sub.sub_version)),
            "tagsSet": "[" + ",".join(java_string(t) for t in sorted(sub.tags_set)) + "]",
            "topic": java_string(sub.topic),
        }
    )


def encode_consumer_running_info(info: ConsumerRunningInfo) -> bytes:
    """GET_CONSUMER_RUNNING_INFO response body (ConsumerRunningInfo), as fastjson writes it.

    ``mqTable`` is a ``TreeMap<MessageQueue, ProcessQueueInfo>``: each key is the
    queue object itself, in MessageQueue order; writing it as a string is what made
    Apache's ``mqadmin consumerStatus`` fail with ``syntax error, expect {``.
    ``statusTable`` (a TreeMap) and ``subscriptionSet`` (a TreeSet ordered by
    ``topic@subString``) are in Java's order; ``properties`` is a Hashtable, whose
    order Java leaves to hashing: it is written sorted.
    """
    props = {k: java_string(v) for k, v in info.properties.items()}
    subs = sorted(info.subscriptions, key=lambda s: utf16_key(f"{s.topic}@{s.sub_string}"))
    text = bean(
        {
            "jstack": None if info.jstack is None else java_string(info.jstack),
            "mqTable": object_key_map(
                (_mq_key(mq), _process_queue_info(pq)) for mq, pq in sorted(info.mq_table.items())
            ),
            "properties": bean(props),
            "statusTable": bean(
                {topic: _consume_status(status) for topic, status in info.status_table.items()}
            ),
            "subscriptionSet": "[" + ",".join(_subscription_bean(s) for s in subs) + "]",
        }
    )
    return text.encode("utf-8", "replace")


def _running_info_queue(key: Any) -> MessageQueue:
    if isinstance(key, str):
        # rmqk before issue 27 wrote the key as "topic@broker@queueId".
        topic, broker, qid = key.rsplit("@", 2)
        return MessageQueue(topic, broker, int(qid))
    return message_queue_from_json(key)


def _double(obj: Mapping[Any, Any], name: str, what: str) -> float:
    value = obj.get(name)
    if value is None:
        return 0.0  # fastjson writes NaN and the infinities as null; Java reads 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BodyFormatError(f"{what}: field {name!r} must be a number, got {value!r:.60}")
    return float(value)


def decode_consumer_running_info(body: bytes) -> ConsumerRunningInfo:
    """Read a ConsumerRunningInfo body: Java's, rmqk's, or rmqk's older string-keyed one."""
    what = "ConsumerRunningInfo"
    obj = _object(loads(body), what)
    props = _object(obj.get("properties") or {}, f"{what}.properties")
    queues: dict[MessageQueue, ProcessQueueInfo] = {}
    for key, raw in _object(obj.get("mqTable") or {}, f"{what}.mqTable").items():
        try:
            mq = _running_info_queue(key)
        except ValueError as exc:
            raise BodyFormatError(f"{what}.mqTable: bad key {key!r:.60} ({exc})") from None
        pq = _object(raw, "ProcessQueueInfo")
        n = "ProcessQueueInfo"
        queues[mq] = ProcessQueueInfo(
            commit_offset=_int(pq, "commitOffset", n, 0),
            cached_msg_min_offset=_int(pq, "cachedMsgMinOffset", n, 0),
            cached_msg_max_offset=_int(pq, "cachedMsgMaxOffset", n, 0),
            cached_msg_count=_int(pq, "cachedMsgCount", n, 0),
            cached_msg_size_in_mib=_int(pq, "cachedMsgSizeInMiB", n, 0),
            transaction_msg_min_offset=_int(pq, "transactionMsgMinOffset", n, 0),
            transaction_msg_max_offset=_int(pq, "transactionMsgMaxOffset", n, 0),
            transaction_msg_count=_int(pq, "transactionMsgCount", n, 0),
            locked=_bool(pq, "locked", n, False),
            try_unlock_times=_int(pq, "tryUnlockTimes", n, 0),
            last_lock_timestamp=_int(pq, "lastLockTimestamp", n, 0),
            droped=_bool(pq, "droped", n, False),
            last_pull_timestamp=_int(pq, "lastPullTimestamp", n, 0),
            last_consume_timestamp=_int(pq, "lastConsumeTimestamp", n, 0),
        )
    status: dict[str, ConsumeStatus] = {}
    for topic, raw in _object(obj.get("statusTable") or {}, f"{what}.statusTable").items():
        cs = _object(raw, "ConsumeStatus")
        n = "ConsumeStatus"
        status[str(topic)] = ConsumeStatus(
            pull_rt=_double(cs, "pullRT", n),
            pull_tps=_double(cs, "pullTPS", n),
            consume_rt=_double(cs, "consumeRT", n),
            consume_ok_tps=_double(cs, "consumeOKTPS", n),
            consume_failed_tps=_double(cs, "consumeFailedTPS", n),
            consume_failed_msgs=_int(cs, "consumeFailedMsgs", n, 0),
        )
    jstack = obj.get("jstack")
    return ConsumerRunningInfo(
        properties={str(k): str(v) for k, v in props.items()},
        subscriptions=tuple(
            _subscription_from_json(s)
            for s in _list(obj.get("subscriptionSet"), f"{what}.subscriptionSet")
        ),
        mq_table=queues,
        status_table=status,
        jstack=jstack if isinstance(jstack, str) else None,
    )


# ----------------------------------------------------------------------------- consume directly


def encode_consume_message_directly_result(result: ConsumeMessageDirectlyResult) -> bytes:
    """CONSUME_MESSAGE_DIRECTLY response body (ConsumeMessageDirectlyResult), as fastjson.

    The remark is often a stack trace: its control characters are escaped as fastjson
    escapes them.
    """
    text = bean(
        {
            "autoCommit": _bool_text(result.auto_commit),
            "consumeResult": java_string(result.consume_result),
            "order": _bool_text(result.order),
            "remark": None if result.remark is None else java_string(result.remark),
            "spentTimeMills": str(int(result.spent_time_mills)),
        }
    )
    return text.encode("utf-8", "replace")


def decode_consume_message_directly_result(body: bytes) -> ConsumeMessageDirectlyResult:
    what = "ConsumeMessageDirectlyResult"
    obj = _object(loads(body), what)
    remark = obj.get("remark")
    return ConsumeMessageDirectlyResult(
        order=_bool(obj, "order", what, False),
        auto_commit=_bool(obj, "autoCommit", what, True),
        consume_result=_str(obj, "consumeResult", what),
        remark=remark if isinstance(remark, str) else None,
        spent_time_mills=_int(obj, "spentTimeMills", what, 0),
    )
