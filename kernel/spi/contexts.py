"""Objects handed to event hooks.

The contexts are mutable on purpose: Java's FilterMessageHook edits the message
list in place and ConsumeMessageHook reads the status that the listener call
filled in. The consumer ``rmqk_queues_changed`` receives is seen through the
read-only :class:`ConsumerView`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from rmqk.model import MessageModel, MessageQueue, SendResult, ServiceState, SubscriptionData
from rmqk.model.message import MessageExt
from rmqk.spi.client_options import ClientOptions

__all__ = [
    "ClientContext",
    "ClientRole",
    "ConsumeMessageContext",
    "ConsumerView",
    "FilterMessageContext",
    "SendMessageContext",
]


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


@attrs.define
class SendMessageContext:
    """What ``rmqk_send_message_before``/``_after`` see around one send attempt (SendMessageHook).

    One context per attempt, as Java's sendKernelImpl makes one: a retried send
    shows each broker it tried. Names are the wire's (with the namespace);
    ``body_length`` is the body as sent (compressed when it was). ``msg_type`` is
    Java's MessageType name (``Normal_Msg``, ``Trans_Msg_Half``, ``Delay_Msg``).
    ``send_result`` (None for a oneway send) or ``exception`` is filled in before
    the ``after`` hook runs. ``props`` carries what a ``before`` implementation
    wants its ``after`` to see.
    """

    producer_group: str
    topic: str
    properties: dict[str, str]
    body_length: int
    queue: MessageQueue
    broker_addr: str
    mode: str
    msg_type: str = "Normal_Msg"
    namespace: str | None = None
    send_result: SendResult | None = None
    exception: BaseException | None = None
    props: dict[str, Any] = attrs.field(factory=dict)


class ClientRole(enum.Enum):
    PUSH_CONSUMER = "push_consumer"
    LITE_PULL_CONSUMER = "lite_pull_consumer"
    PRODUCER = "producer"


@attrs.frozen
class ClientContext:
    """A consumer or producer that started or is shutting down (``rmqk_client_*`` hooks).

    ``group`` is the wire group (with the namespace); ``options`` the client's
    resolved options (:class:`rmqk.options.ConsumerOptions` for both consumers,
    :class:`rmqk.options.producer.ProducerOptions` for a producer), where a
    plugin reads the settings it acts on (``enable_msg_trace``). ``client`` is the
    consumer or producer itself, to tell clients apart, not to drive them. The
    transport fields and ``client_options`` let a plugin open connections the way
    the client does.
    """

    role: ClientRole
    group: str
    namespace: str | None
    namesrv_addrs: tuple[str, ...]
    options: Any
    client: object = attrs.field(eq=False, repr=False)
    transport: str = "tcp"
    transport_options: Mapping[str, Any] = attrs.field(factory=dict)
    use_tls: bool = False
    # The client's ClientOptions (TLS files, its own account, channels), so a plugin
    # that opens connections for this client (the trace plugin's producer) opens them
    # as this client does. Secrets in it never show in its repr.
    client_options: ClientOptions | None = None
