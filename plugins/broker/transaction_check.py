"""The transaction check (TransactionalMessageServiceImpl.check and its service).

Every ``transaction_check_interval`` the broker walks the half queue from the
check's progress offset. A half message settled by an op message is skipped; one
younger than ``transaction_timeout`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``)
ends the walk; any other is put back at the end of the half queue with its
``TRANSACTION_CHECK_TIMES`` raised and the group's producers are asked about the
new copy with a oneway CHECK_TRANSACTION_STATE. A message checked
``transaction_check_max`` times, or older than the commit log's retention, is
moved to TRANS_CHECK_MAX_TIME_TOPIC and never delivered. The numbers and the order
of these decisions are Apache 4.9.8's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import attrs

from rmqk.model.message import MessageExt, MessageProperty
from rmqk.plugins.broker.clients import ClientManager
from rmqk.plugins.broker.commands import make_request
from rmqk.plugins.broker.transactions import (
    HALF_TOPIC,
    OP_TOPIC,
    REMOVE_TAG,
    PulledMessages,
    TransactionalMessageBridge,
)
from rmqk.wire.message_codec import encode_stored_message, java_properties_string
from rmqk.wire.protocol import RequestCode

__all__ = ["TransactionCheckService", "TransactionSettings"]

log = logging.getLogger("rmqk.broker.transaction")

TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
_MAX_PROCESS_TIME_MS = 60_000
_MAX_RETRY_WHEN_HALF_NULL = 1
_OP_PULL_BATCH = 32


@attrs.frozen
class TransactionSettings:
    """BrokerConfig's transaction settings, in seconds as the embedded broker's options."""

    transaction_timeout: float = 6.0
    transaction_check_max: int = 15
    transaction_check_interval: float = 60.0

    def __attrs_post_init__(self) -> None:
        if self.transaction_timeout < 0:
            raise ValueError(f"transaction_timeout must be >= 0, got {self.transaction_timeout}")
        if self.transaction_check_max < 1:
            raise ValueError(
                f"transaction_check_max must be >= 1, got {self.transaction_check_max}"
            )
        if self.transaction_check_interval <= 0:
            raise ValueError(
                f"transaction_check_interval must be > 0, got {self.transaction_check_interval}"
            )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _long(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        log.error("GetLong error: %r", text)
        return -1


class TransactionCheckService:
    """Runs the check on the broker's event loop (TransactionalMessageCheckService)."""

    def __init__(
        self,
        bridge: TransactionalMessageBridge,
        clients: ClientManager,
        settings: TransactionSettings,
        file_reserved_hours: float = 72.0,
    ) -> None:
        self.bridge = bridge
        self.clients = clients
        self.settings = settings
        self.file_reserved_ms = file_reserved_hours * 3600 * 1000
        self.checks_sent = 0
        self.discarded = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="rmqk-transaction-check"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        log.info("Start transaction check service")
        while True:
            await asyncio.sleep(self.settings.transaction_check_interval)
            begin = _now_ms()
            try:
                self.check()
            except Exception:
                log.exception("Check error")
            log.debug("transaction check took %d ms", _now_ms() - begin)

    # -- the check -------------------------------------------------------------------

    def check(self) -> None:
        timeout = int(self.settings.transaction_timeout * 1000)
        check_max = self.settings.transaction_check_max
        for queue_id in self.bridge.half_queue_ids():
            self._check_queue(queue_id, timeout, check_max)

    def _check_queue(self, queue_id: int, timeout: int, check_max: int) -> None:
        bridge = self.bridge
        start = _now_ms()
        half_offset = bridge.consume_offset(HALF_TOPIC, queue_id)
        op_offset = bridge.consume_offset(OP_TOPIC, queue_id)
        if half_offset < 0 or op_offset < 0:
            log.error("half queue %d: illegal offsets %d / %d, skipped",
                      queue_id, half_offset, op_offset)  # fmt: skip
            return
        done_op: list[int] = []
        removed: dict[int, int] = {}  # half queue offset -> op queue offset
        pulled = self._fill_op_remove_map(removed, queue_id, op_offset, half_offset, done_op)
        null_count = 1
        new_offset = i = half_offset
        while True:
            now = _now_ms()
            if now - start > _MAX_PROCESS_TIME_MS:
                log.info("half queue %d: process time reached %d ms", queue_id,
                         _MAX_PROCESS_TIME_MS)  # fmt: skip
                break
            if i in removed:
                done_op.append(removed.pop(i))
            else:
                got = bridge.pull(HALF_TOPIC, queue_id, i, 1)
                msg = got.messages[0] if got.messages else None
                if msg is None:
                    null_count += 1
                    if null_count - 1 > _MAX_RETRY_WHEN_HALF_NULL or got.status == "NO_NEW_MSG":
                        break
                    i = new_offset = got.next_begin_offset
                    continue
                if self._need_discard(msg, check_max) or self._need_skip(msg, now):
                    self._resolve_discard(msg)
                    i += 1
                    new_offset = i
                    continue
                if msg.store_timestamp >= start:
                    break  # stored after this check began: the next check sees it
                age = now - msg.born_timestamp
                immunity = timeout
                immunity_text = msg.properties.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
                if immunity_text is not None:
                    immunity = _long(immunity_text)
                    immunity = timeout if immunity == -1 else immunity * 1000
                    if age < immunity and self._check_prepare_queue_offset(removed, done_op, msg):
                        i += 1
                        new_offset = i
                        continue
                elif 0 <= age < immunity:
                    break  # too young; so is everything after it
                ops = pulled.messages
                need_check = (
                    (ops is None and age > immunity)
                    or (ops is not None and ops[-1].born_timestamp - start > timeout)
                    or age <= -1
                )
                if not need_check:
                    # Settlements may be further on in the op queue: read on first.
                    pulled = self._fill_op_remove_map(
                        removed, queue_id, pulled.next_begin_offset, half_offset, done_op
                    )
                    continue
                if not self._put_back(msg):
                    continue
                self._send_check(msg)
            i += 1
            new_offset = i
        if new_offset != half_offset:
            bridge.update_consume_offset(HALF_TOPIC, queue_id, new_offset)
        new_op = _next_op_offset(done_op, op_offset)
        if new_op != op_offset:
            bridge.update_consume_offset(OP_TOPIC, queue_id, new_op)

    def _fill_op_remove_map(
        self,
        removed: dict[int, int],
        queue_id: int,
        op_offset: int,
        min_half_offset: int,
        done_op: list[int],
    ) -> PulledMessages:
        pulled = self.bridge.pull(OP_TOPIC, queue_id, op_offset, _OP_PULL_BATCH)
        if pulled.status in ("OFFSET_ILLEGAL", "NO_MATCHED_MSG"):
            log.warning("op offset %d of queue %d is illegal (%s)", op_offset, queue_id,
                        pulled.status)  # fmt: skip
            self.bridge.update_consume_offset(OP_TOPIC, queue_id, pulled.next_begin_offset)
            return pulled
        for op in pulled.messages or ():
            half_offset = _long(op.body.decode("utf-8", "replace"))
            if op.tags != REMOVE_TAG:
                log.error("Found a illegal tag in op message at %d: %r", op.queue_offset, op.tags)
            elif half_offset < min_half_offset:
                done_op.append(op.queue_offset)
            else:
                removed[half_offset] = op.queue_offset
        return pulled

    def _check_prepare_queue_offset(
        self, removed: dict[int, int], done_op: list[int], msg: MessageExt
    ) -> bool:
        text = msg.properties.get(PREPARED_QUEUE_OFFSET)
        if text is None:
            return self._put_immunity_back(msg)
        offset = _long(text)
        if offset == -1:
            return False
        if offset in removed:
            done_op.append(removed.pop(offset))
            return True
        return self._put_immunity_back(msg)

    def _put_immunity_back(self, msg: MessageExt) -> bool:
        props = msg.properties
        props.setdefault(PREPARED_QUEUE_OFFSET, str(msg.queue_offset))
        return self.bridge.put_back_half(msg).ok

    def _need_discard(self, msg: MessageExt, check_max: int) -> bool:
        props = msg.properties
        text = props.get(TRANSACTION_CHECK_TIMES)
        times = 1
        if text is not None:
            times = _long(text)
            if times >= check_max:
                return True
            times += 1
        props[TRANSACTION_CHECK_TIMES] = str(times)
        return False

    def _need_skip(self, msg: MessageExt, now: int) -> bool:
        if now - msg.born_timestamp > self.file_reserved_ms:
            log.info("Half message exceed file reserved time, so skip it. messageId %s",
                     msg.msg_id)  # fmt: skip
            return True
        return False

    def _put_back(self, msg: MessageExt) -> bool:
        """putBackHalfMsgQueue: the check is about the new copy."""
        result = self.bridge.put_back_half(msg)
        if not result.ok:
            log.error("putting half message %s back failed: %s", msg.msg_id, result.error)
            return False
        msg.queue_offset = result.queue_offset
        msg.commit_log_offset = result.commit_log_offset
        return True

    def _resolve_discard(self, msg: MessageExt) -> None:
        log.error("half message %s (real topic %s) has been checked too many times, so "
                  "discard it by moving it to system topic TRANS_CHECK_MAX_TIME_TOPIC",
                  msg.msg_id, msg.properties.get(MessageProperty.REAL_TOPIC))  # fmt: skip
        self.discarded += 1
        if not self.bridge.put_discarded(msg):
            log.error("Put checked-too-many-time half message to TRANS_CHECK_MAX_TIME_TOPIC "
                      "failed, msgId=%s", msg.msg_id)  # fmt: skip

    def _send_check(self, msg: MessageExt) -> None:
        """AbstractTransactionalMessageCheckListener.sendCheckMessage."""
        props = msg.properties
        offset_msg_id = msg.offset_msg_id
        uniq = props.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        fields = {
            "tranStateTableOffset": msg.queue_offset,
            "commitLogOffset": msg.commit_log_offset,
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": offset_msg_id,
            "bname": self.bridge.ctx.settings.broker_name,
        }
        real_qid = props.get(MessageProperty.REAL_QUEUE_ID, "")
        body = encode_stored_message(
            topic=props.get(MessageProperty.REAL_TOPIC) or msg.topic,
            body=msg.body,
            flag=msg.flag,
            queue_id=int(real_qid) if real_qid.isdigit() else msg.queue_id,
            queue_offset=msg.queue_offset,
            commit_log_offset=msg.commit_log_offset,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_timestamp=msg.store_timestamp,
            store_host=msg.store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
            properties_raw=java_properties_string(props),
        )
        group = props.get(MessageProperty.PRODUCER_GROUP)
        channel = self.clients.available_producer_channel(group)
        if channel is None:
            log.warning("Check transaction failed, channel is null. groupId=%s", group)
            return
        request = make_request(RequestCode.CHECK_TRANSACTION_STATE, fields, body=body)
        if channel.oneway(request):
            self.checks_sent += 1
        else:
            log.error("Check transaction failed because invoke producer exception. group=%s, "
                      "msgId=%s", group, offset_msg_id)  # fmt: skip


def _next_op_offset(done: list[int], old: int) -> int:
    """calculateOpOffset: the op queue's progress moves over a contiguous settled run."""
    offset = old
    for value in sorted(done):
        if value != offset:
            break
        offset += 1
    return offset
