"""Objects handed to event hooks.

The contexts are mutable on purpose: Java's FilterMessageHook edits the message
list in place and ConsumeMessageHook reads the status that the listener call
filled in. The consumer ``rmqk_queues_changed`` receives is seen through the
read-only :class:`ConsumerView`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import attrs

from rmqk.message import MessageExt
from rmqk.model import MessageModel, MessageQueue, ServiceState, SubscriptionData

__all__ = ["ConsumeMessageContext", "ConsumerView", "FilterMessageContext"]


@runtime_checkable
class ConsumerView(Protocol):
    """What a plugin may read of a push or lite pull consumer (``rmqk_queues_changed``).

    Read-only: a plugin that changed these would desynchronise the consumer from
    what it reported to the brokers. Keep the consumer itself only to identify it
    (the ``prometheus`` plugin tracks consumers by identity and group).
    """

    @property
    def group(self) -> str: ...

    @property
    def client_id(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def state(self) -> ServiceState: ...


@attrs.define
class FilterMessageContext:
    """What ``rmqk_filter_message`` sees for one FOUND pull response.

    ``messages`` may be edited in place; what is left goes to the process queue.
    Messages removed here are treated as consumed (their offsets still advance).
    """

    consumer_group: str
    queue: MessageQueue
    messages: list[MessageExt]
    subscription: SubscriptionData | None = None
    unit_mode: bool = False
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class ConsumeMessageContext:
    """What ``rmqk_consume_message_before``/``_after`` see around one listener call.

    ``status`` (the listener's answer as a string, e.g. ``CONSUME_SUCCESS``),
    ``success``, ``duration_ms`` and ``exception`` are filled in before the
    ``after`` hook runs; ``return_type`` is Java's ConsumeReturnType
    (SUCCESS, FAILED, EXCEPTION, RETURNNULL, TIME_OUT).
    """

    consumer_group: str
    queue: MessageQueue
    messages: list[MessageExt]
    status: str | None = None
    success: bool = False
    return_type: str | None = None
    duration_ms: float = 0.0
    exception: BaseException | None = None
    props: dict[str, str] = attrs.field(factory=dict)
