"""The written contract between the push consumer and a consume service plugin.

A consume service drains what the push consumer pulled into the user's listener
and acknowledges it. It is registered through the ``rmqk_register_consume_services``
hook as an :class:`rmqk.spi.factory.PluginFactory`, built as ``factory(host, options)``
like every kind of plugin:

* ``host`` (the kind's context) is a :class:`ConsumeHost`, everything the service may use of the
  consumer: the listener (with the consume hooks around it), acknowledgement and
  offsets, sending back for redelivery, statistics, broker locks and the
  consumer's options. A service needs nothing else, and reaches nothing else.
* ``options`` are the consumer's ``consume_service_options`` table, checked by
  the kernel against the options the registration declares and resolved. A
  service that declares none takes no options: any key given is an error, so no
  option is accepted and then ignored.

The factory returns a :class:`ConsumeService`. docs/tutorial-consume-service.md
writes one from this contract alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs

from rmqk.model import MessageModel, MessageQueue
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.spi.contexts import ConsumeMessageContext
from rmqk.spi.transport import ConsumeMessageDirectlyResult

__all__ = [
    "JAVA_INT_MAX",
    "REBALANCE_LOCK_INTERVAL_MS",
    "CallLane",
    "ConsumeConcurrentlyContext",
    "ConsumeHost",
    "ConsumeListener",
    "ConsumeOrderlyContext",
    "ConsumeService",
    "ConsumeStats",
    "DeferredAck",
    "ListenerOutcome",
    "QueueView",
]


JAVA_INT_MAX = 2**31 - 1
# rocketmq.client.rebalance.lockInterval: how often orderly consumers renew their locks.
REBALANCE_LOCK_INTERVAL_MS = 20_000


@attrs.define
class ConsumeConcurrentlyContext:
    """Handed to concurrent listeners; they may set ``ack_index`` and the retry delay."""

    queue: MessageQueue
    ack_index: int = JAVA_INT_MAX
    delay_level_when_next_consume: int = 0


@attrs.define
class ConsumeOrderlyContext:
    queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


class DeferredAck(asyncio.Future[Any]):
    """What an async listener returns to acknowledge its batch later: :meth:`ack` (the answer
    it would have returned) or :meth:`fail` (what it would have raised) on the loop, first
    call wins; then the batch is done as if answered at once. Cancelled: a failure; at stop,
    cancelled after await_termination_millis_when_shutdown, never acknowledged, delivered
    again. Only ``ConsumeHost.deliver`` handles it. The contract: docs/hooks.md."""

    def ack(self, status: Any = None) -> None:
        if not self.done():
            self.set_result(status)

    def fail(self, exc: BaseException) -> None:
        if not self.done():
            self.set_exception(exc)


class ListenerOutcome:
    """What one listener call produced.

    A plain slotted class, not attrs: one is made per listener call on the hot path.
    """

    __slots__ = ("duration_ms", "exception", "status")

    def __init__(self, status: Any, exception: BaseException | None, duration_ms: float) -> None:
        self.status = status  # the listener's return value (None, an enum member or its name)
        self.exception = exception
        self.duration_ms = duration_ms

    def __repr__(self) -> str:
        return (
            f"ListenerOutcome(status={self.status!r}, exception={self.exception!r}, "
            f"duration_ms={self.duration_ms:.3f})"
        )


class QueueView(Protocol):
    """What a consume service may do with one queue's process queue.

    The messages pulled for a queue wait here, keyed by queue offset, until they
    are acknowledged. Two ways of consuming them exist side by side:

    * concurrent: consume the batches handed to ``submit`` in any order and
      acknowledge each through :meth:`ConsumeHost.acknowledge`; the committed
      offset is then the lowest offset still held.
    * in order: ``take_messages`` from the head, then ``commit`` (and
      :meth:`ConsumeHost.update_offset` with its result) or
      ``make_messages_to_consume_again``.
    """

    #: Set when the queue went to another member or is being reset; stop consuming it.
    dropped: bool
    #: Messages held (pulled, not yet acknowledged).
    msg_count: int
    #: The broker's backlog behind the newest pulled message (Java's msgAccCnt): what the
    #: concurrent service's pool adjusts to.
    msg_acc_cnt: int
    #: True while this client holds the queue's lock on the broker (orderly, clustering).
    locked: bool
    #: queue offset -> epoch ms the listener call of that message began (for expiry).
    consume_started: dict[int, int]
    #: Held around an orderly listener call; the rebalance takes it before unlocking.
    consume_lock: asyncio.Lock | None

    def is_dropped(self) -> bool: ...

    def is_lock_expired(self, now_ms: int | None = None) -> bool: ...

    def head_messages(self, limit: int) -> list[MessageExt]:
        """Up to ``limit`` held messages from the lowest offset, left in place."""

    def first_offset(self) -> int | None: ...

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` messages from the head into the consuming set.

        Returns ``[]`` when none are left and then ends the queue's drain: the
        next pulled batch reaches ``submit`` with ``dispatch_to_consume`` True.
        """

    def commit(self) -> int:
        """Forget the consuming set; the next offset to consume, or -1 if it was empty."""

    def make_messages_to_consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """Put taken messages back at the head, to be taken again first."""

    def rollback(self) -> None:
        """Put the whole consuming set back at the head."""


class CallLane(Protocol):
    """Calls ``(token, queue, msgs, context)`` of a sync listener run by its pool threads,
    outcomes to ``settle([(token, outcome)])`` in bulk on the loop (None: ``on_start(token)``,
    run in the pool as a slow call begins, said skip). How: rmqk.engine.lane."""

    def running(self) -> int: ...  # calls begun whose outcome is not settled yet

    def put(self, calls: Sequence[tuple[Any, MessageQueue, list[MessageExt], Any]]) -> bool:
        """Queue calls; False (none queued) while consume hooks are on: use ``deliver``."""

    def take_back(self) -> list[Any]:
        """Remove the calls not begun; their tokens (at stop)."""

    def settle_now(self) -> None: ...


class ConsumeListener(Protocol):
    """The consumer's listener; a service consumes through :attr:`ConsumeHost.deliver`."""

    #: True for an ``async def`` listener (it runs on the loop, else on its thread pool).
    is_async: bool
    #: True when the listener takes ``(messages, context)`` rather than ``(messages)``.
    wants_context: bool

    def resize_pool(self, size: int) -> int | None:
        """Set the sync listener's thread pool size (at least 1); None (no-op) if async."""

    def lane(
        self, settle: Callable[[list[Any]], None], on_start: Callable[[Any], bool] | None = None
    ) -> CallLane:
        """A sync listener's pool as a :class:`CallLane` (ClientError if async)."""

    async def cancel_deferred(self) -> int:
        """Cancel the unanswered :class:`DeferredAck` (at stop); ``settled`` has run after."""

    async def invoke(
        self,
        queue: MessageQueue,
        msgs: Sequence[MessageExt],
        context: Any,
        hooks: bool = True,
        detach: bool = False,
        report: bool = True,
    ) -> tuple[ListenerOutcome, ConsumeMessageContext | None]:
        """One call, ``hooks=False, report=False``: CONSUME_MESSAGE_DIRECTLY (no hooks in Java)."""

    def report_failure(self, exc: BaseException, queue: MessageQueue | None = None) -> None:
        """Log a listener's exception: each type once with its traceback, repeats counted."""


class ConsumeStats(Protocol):
    """The consume figures the broker's admin tools read (consumeRT, OK and failed TPS)."""

    def consume_rt(self, topic: str, ms: float) -> None: ...

    def add_consume_rt(self, topic: str, total_ms: float, calls: int) -> None: ...

    def consume_ok(self, topic: str, n: int) -> None: ...

    def consume_failed(self, topic: str, n: int) -> None: ...


class ConsumeHost(Protocol):
    """Everything of the push consumer a consume service may use."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def options(self) -> ConsumerOptions:
        """The consumer's options (batch size, thread counts, consume timeout, ...)."""

    @property
    def retry_topic(self) -> str:
        """``%RETRY%<group>``: messages sent back come again from this topic."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the consumer runs on; every method here is called on it."""

    @property
    def listener(self) -> ConsumeListener: ...

    @property
    def deliver(self) -> Callable[..., Awaitable[ListenerOutcome | None]]:
        """``await deliver(queue, msgs, context, settled=None, token=None)``: the one way to
        consume a batch, the client's consume hooks around the listener (ListenerInvoker.
        deliver). A DeferredAck is awaited unless ``settled``: None, ``settled(token, o)`` later.
        """

    @property
    def stats(self) -> ConsumeStats: ...

    def process_queues(self) -> list[tuple[MessageQueue, QueueView]]:
        """The queues held now, with their process queues (a snapshot)."""

    def acknowledge(self, mq: MessageQueue, pq: QueueView, msgs: Sequence[MessageExt]) -> int:
        """Remove consumed messages and move the queue's offset up to the lowest still held.

        Returns that offset, or -1 when nothing was held. A dropped queue's offset
        is left alone.
        """

    def update_offset(self, mq: MessageQueue, pq: QueueView, offset: int) -> None:
        """Set the queue's consume offset (after ``pq.commit()``); -1 or a dropped queue: no-op."""

    async def send_message_back(
        self, msg: MessageExt, delay_level: int, broker_name: str | None
    ) -> None:
        """Have the broker deliver ``msg`` again later (or to the DLQ past max reconsume times).

        ``delay_level`` 0 lets the broker choose by reconsume times; -1 sends it
        to the DLQ at once. Raises when neither the broker nor re-publishing
        took it.
        """

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Show messages pulled from the retry topic under their original topic."""

    def max_reconsume_times(self) -> int: ...

    async def lock(self, mq: MessageQueue) -> bool:
        """Lock one queue on its broker for this client; True when held."""

    async def lock_all(self) -> None:
        """Lock (renew) every held queue on its broker."""

    async def unlock_all(self, oneway: bool) -> None: ...


class ConsumeService(Protocol):
    """What the push consumer drives; built by ``factory(host, options)``."""

    #: True when queues must be locked on the broker and pulled only while locked.
    orderly: bool

    async def start(self) -> None: ...

    async def shutdown(self, await_termination_ms: int) -> None:
        """Stop; wait up to ``await_termination_ms`` for consumes in flight, then cancel them.

        Acknowledge what finished before returning: the consumer persists the
        offsets right after.
        """

    def submit(
        self,
        msgs: list[MessageExt],
        pq: QueueView,
        mq: MessageQueue,
        dispatch_to_consume: bool,
    ) -> None:
        """A freshly pulled batch, already held in ``pq``; must not block the event loop.

        ``dispatch_to_consume`` is True when ``pq`` had no drain running (the
        ``take_messages`` edge).
        """

    async def consume_message_directly(
        self, msg: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY from the admin tools: one listener call, no hooks."""
