"""Transactional messages, producer side (Java's TransactionMQProducer).

``send_message_in_transaction`` follows Apache 4.9.8's
``DefaultMQProducerImpl.sendMessageInTransaction``: the message goes out as a half
message (``TRAN_MSG=true`` and ``PGROUP``), which no consumer sees; the local
transaction listener runs only when the broker stored it (SEND_OK); its answer is
sent with a oneway END_TRANSACTION (commit, rollback or "not known yet"). A
listener that raises or returns None counts as UNKNOW, as in Java, and the broker
later asks the group with CHECK_TRANSACTION_STATE; :meth:`check_transaction_state`
answers with the check listener's verdict, again by a oneway END_TRANSACTION on the
connection the check came in on.

Listeners may be plain functions or coroutine functions. A plain function runs in
a worker thread of the asyncio producer (so it cannot stall the event loop); the
blocking facade runs the local transaction in the calling thread, as Java does.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import attrs

from rmqk.engine.producer import AUTO_CREATE_TOPIC_KEY, AsyncProducer, validate_message
from rmqk.model import MessageQueue, SendResult, SendStatus
from rmqk.model import namespace as nsutil
from rmqk.model.errors import ClientError
from rmqk.model.message import Message, MessageExt, MessageProperty, decode_offset_msg_id
from rmqk.spi.transport import CheckTransactionStateRequest
from rmqk.wire.protocol import RemotingCommand, RequestCode
from rmqk.wire.uniq_id import create_uniq_id

__all__ = [
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionSendResult",
    "end_transaction_fields",
    "resolve_state",
    "run_local_transaction",
]

log = logging.getLogger("rmqk.engine.transaction")

# MessageSysFlag's transaction types, as END_TRANSACTION's commitOrRollback carries them.
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
# MessageConst: what a sent half message's result may add to the message.
TRANSACTION_ID_PROPERTY = "__transactionId__"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Java's endTransactionOneway timeout when answering a check.
_CHECK_ANSWER_TIMEOUT_MS = 3000


class LocalTransactionState(enum.Enum):
    """What a transaction listener answers (Java's LocalTransactionState)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # sic: Java's name, kept so mixed-language logs read alike


_COMMIT_OR_ROLLBACK = {
    LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE,
}

StateAnswer = LocalTransactionState | None | Awaitable[LocalTransactionState | None]
ExecuteListener = Callable[[Message, Any], StateAnswer]
CheckListener = Callable[[MessageExt], StateAnswer]


class TransactionListener(Protocol):
    """Java's TransactionListener; either method may be ``async def``."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> StateAnswer: ...

    def check_local_transaction(self, msg: MessageExt) -> StateAnswer: ...


@attrs.frozen
class TransactionSendResult:
    """The half message's send result and what the local transaction answered."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None
    local_transaction_state: LocalTransactionState


def resolve_state(value: object) -> LocalTransactionState:
    """A listener's answer as a state: None counts as UNKNOW, as in Java."""
    if value is None:
        return LocalTransactionState.UNKNOW
    if isinstance(value, LocalTransactionState):
        return value
    raise ClientError(
        f"a transaction listener must return a LocalTransactionState or None, got {value!r}"
    )


def end_transaction_fields(
    *,
    producer_group: str,
    tran_state_table_offset: int,
    commit_log_offset: int,
    state: LocalTransactionState,
    from_transaction_check: bool,
    msg_id: str,
    transaction_id: str | None,
    broker_name: str | None,
) -> dict[str, object]:
    """EndTransactionRequestHeader's fields; None ones are left off as Java leaves them."""
    return {
        "producerGroup": producer_group,
        "tranStateTableOffset": tran_state_table_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": _COMMIT_OR_ROLLBACK[state],
        "fromTransactionCheck": from_transaction_check,
        "msgId": msg_id,
        "transactionId": transaction_id,
        "bname": broker_name,
    }


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class AsyncTransactionProducer(AsyncProducer):
    """A producer that sends half messages and settles them (TransactionMQProducer).

    Give the listeners as an object with ``execute_local_transaction(msg, arg)`` and
    ``check_local_transaction(msg)`` (``transaction_listener``, Java's shape), or as
    the two callables. Every other option is :class:`AsyncProducer`'s.
    """

    def __init__(
        self,
        group: str,
        *,
        transaction_listener: TransactionListener | None = None,
        execute_local_transaction: ExecuteListener | None = None,
        check_local_transaction: CheckListener | None = None,
        **options: Any,
    ) -> None:
        super().__init__(group, **options)
        if transaction_listener is not None:
            execute_local_transaction = (
                execute_local_transaction or transaction_listener.execute_local_transaction
            )
            check_local_transaction = (
                check_local_transaction or transaction_listener.check_local_transaction
            )
        self.execute_local_transaction = execute_local_transaction
        self.check_local_transaction = check_local_transaction
        self._checks: set[asyncio.Task[None]] = set()
        self._announced: set[str] = set()

    async def start(self, client: Any = None) -> None:
        await super().start(client)
        # Register the group with the brokers now, not at the first heartbeat (Java
        # finds them through TBW102's route within 30 s), so a restarted producer can
        # answer checks for its predecessor's transactions at once.
        await self.announce(AUTO_CREATE_TOPIC_KEY)

    async def announce(self, *topics: str) -> None:
        """Learn the brokers of ``topics`` and send them this client's heartbeat."""
        for topic in topics:
            try:
                await self.client.update_topic_route(nsutil.wrap(self.namespace, topic))
            except Exception as exc:
                log.debug("no route for %s yet: %s", topic, exc)
        await self.client.send_heartbeat_to_all_brokers()
        self._announced.update(self.client.broker_addr_table)

    async def shutdown(self) -> None:
        for task in list(self._checks):
            task.cancel()
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        await super().shutdown()

    # -- sendMessageInTransaction --------------------------------------------------

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, settle it."""
        result = await self.send_half_message(msg)
        state, error = LocalTransactionState.UNKNOW, None
        if result.status is SendStatus.SEND_OK:
            listener = self.require_execute_listener()
            try:
                state = resolve_state(await _call_off_loop(listener, msg, arg))
            except Exception as exc:
                log.info("executeLocalTransactionBranch exception: %s", _describe(exc))
                error = exc
        return await self.end_transaction(msg, result, state, error)

    def require_execute_listener(self) -> ExecuteListener:
        if self.execute_local_transaction is None:
            raise ClientError("tranExecutor is null")
        return self.execute_local_transaction

    async def send_half_message(self, msg: Message) -> SendResult:
        """The first step: mark ``msg`` as a half message of this group and send it."""
        self.require_execute_listener()
        props = msg.properties
        props.pop(MessageProperty.DELAY_TIME_LEVEL, None)  # a half message is never delayed
        validate_message(msg, self.max_message_size)
        props[MessageProperty.TRANSACTION_PREPARED] = "true"
        props[MessageProperty.PRODUCER_GROUP] = self.group
        # Set here rather than per attempt so the listener sees the transaction id.
        props.setdefault(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
        try:
            result = await self.send(msg)
        except Exception as exc:
            raise ClientError(f"send message Exception: {exc}") from exc
        if result.status is SendStatus.SEND_OK and result.transaction_id is not None:
            props[TRANSACTION_ID_PROPERTY] = result.transaction_id
        if result.queue.broker_name not in self._announced:
            self._announced.add(result.queue.broker_name)
            self._spawn(self.client.send_heartbeat_to_all_brokers())
        return result

    async def end_transaction(
        self,
        msg: Message,
        result: SendResult,
        state: LocalTransactionState,
        error: BaseException | None = None,
    ) -> TransactionSendResult:
        """The last step: tell the broker the local transaction's outcome (oneway)."""
        if result.status in (
            SendStatus.FLUSH_DISK_TIMEOUT,
            SendStatus.FLUSH_SLAVE_TIMEOUT,
            SendStatus.SLAVE_NOT_AVAILABLE,
        ):
            state = LocalTransactionState.ROLLBACK_MESSAGE
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            log.info("executeLocalTransactionBranch return %s for %s", state.value, result.msg_id)
        try:
            await self._end_transaction_oneway(result, state, error)
        except Exception as exc:
            log.warning(
                "local transaction execute %s, but end broker transaction failed: %s",
                state.value,
                exc,
            )
        return TransactionSendResult(
            status=result.status,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            queue=result.queue,
            queue_offset=result.queue_offset,
            transaction_id=result.transaction_id,
            local_transaction_state=state,
        )

    async def _end_transaction_oneway(
        self, result: SendResult, state: LocalTransactionState, error: BaseException | None
    ) -> None:
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        broker_name = result.queue.broker_name
        addr = self.client.find_broker_address_in_publish(broker_name)
        if addr is None:
            raise ClientError(f"The broker[{broker_name}] not exist")
        fields = end_transaction_fields(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            state=state,
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
            broker_name=broker_name,
        )
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields)
        if error is not None:
            request.remark = f"executeLocalTransactionBranch exception: {_describe(error)}"
        await self.client.transport.invoke_oneway(addr, request)

    # -- checkTransactionState -----------------------------------------------------

    def check_transaction_state(
        self, addr: str, msg: MessageExt, header: CheckTransactionStateRequest
    ) -> None:
        """The broker asks how a transaction ended; answered in the background."""
        if self.namespace:
            msg.topic = nsutil.unwrap(self.namespace, msg.topic)
        self._spawn(self._answer_check(addr, msg, header))

    async def _answer_check(
        self, addr: str, msg: MessageExt, header: CheckTransactionStateRequest
    ) -> None:
        listener = self.check_local_transaction
        if listener is None:
            log.warning("CheckTransactionState, pick transactionListener by group[%s] failed",
                        self.group)  # fmt: skip
            return
        state, error = LocalTransactionState.UNKNOW, None
        try:
            state = resolve_state(await _call_off_loop(listener, msg))
        except Exception as exc:
            log.error("Broker call checkTransactionState, but checkLocalTransactionState "
                      "exception: %s", _describe(exc))  # fmt: skip
            error = exc
        unique_key = msg.properties.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            log.warning("when broker check, client answers %s for %s", state.value, unique_key)
        fields = end_transaction_fields(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            state=state,
            from_transaction_check=True,
            msg_id=unique_key,
            transaction_id=header.transaction_id,
            broker_name=header.broker_name,
        )
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields)
        if error is not None:
            request.remark = f"checkLocalTransactionState Exception: {_describe(error)}"
        try:
            await self.client.transport.invoke_oneway(addr, request)
        except Exception as exc:
            log.error("endTransactionOneway to %s failed: %s", addr, exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._checks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._checks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction background task failed", exc_info=task.exception())


async def _call_off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """Await a coroutine listener; run a plain one in a worker thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    value = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(value):
        value = await value
    return value


def run_local_transaction(
    listener: ExecuteListener,
    msg: Message,
    arg: Any,
    run_coroutine: Callable[[Any], Any],
) -> tuple[LocalTransactionState, BaseException | None]:
    """The blocking facade's step two, in the calling thread (as Java runs it)."""
    try:
        value = listener(msg, arg)
        if inspect.isawaitable(value):
            value = run_coroutine(value)
        return resolve_state(value), None
    except Exception as exc:
        log.info("executeLocalTransactionBranch exception: %s", _describe(exc))
        return LocalTransactionState.UNKNOW, exc
