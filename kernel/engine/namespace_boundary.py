"""Where a client's namespace is applied: at its public methods (Java's withNamespace calls).

The user names topics and groups without the namespace; the wire carries them with
it (:mod:`rmqk.model.namespace`). The consumers unwrap what they hand back (a
rebalance listener's queues); the producer wraps what it sends and unwraps its
send results.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs

from rmqk.model import MessageQueue, SendResult
from rmqk.model.message import Message, MessageProperty
from rmqk.model.namespace import unwrap, unwrap_queue, wrap, wrap_queue

__all__ = [
    "Selector",
    "send_in",
    "unwrapping_rebalance_listener",
    "user_send_result",
    "wire_message",
    "wire_target",
]


def unwrapping_rebalance_listener(
    namespace: str | None, listener: Callable[..., Any]
) -> Callable[..., Any]:
    """``listener(topic, all_queues, assigned)`` called with the user's names."""
    if not namespace:
        return listener

    def unwrapped(
        topic: str, mq_all: Iterable[MessageQueue], assigned: Iterable[MessageQueue]
    ) -> Any:
        return listener(
            unwrap(namespace, topic),
            frozenset(unwrap_queue(namespace, q) for q in mq_all),
            [unwrap_queue(namespace, q) for q in assigned],
        )

    return unwrapped


# -- the producer's boundary (DefaultMQProducer's withNamespace calls) ------------------

Selector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def wire_message(namespace: str | None, msg: Message) -> Message:
    """A copy of ``msg`` under its wire topic, with the INSTANCE_ID property Java adds.

    The caller's message keeps its topic, as Java restores it after the send.
    """
    if not namespace or not isinstance(msg, Message):
        return msg
    props = {**msg.properties, MessageProperty.INSTANCE_ID: namespace}
    return Message(wrap(namespace, msg.topic), msg.body, flag=msg.flag, properties=props)


def wire_target(
    namespace: str | None, queue: MessageQueue | None, selector: Selector | None
) -> tuple[MessageQueue | None, Selector | None]:
    """A send's chosen queue, or its queue selector, in wire names."""
    if not namespace:
        return queue, selector
    if queue is not None:
        queue = wrap_queue(namespace, queue)
    if selector is None:
        return queue, None
    chosen_by = selector

    def select(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        # sendSelectImpl: the selector sees the user's names, its choice goes on the wire.
        user_msg = Message(
            unwrap(namespace, msg.topic), msg.body, flag=msg.flag, properties=msg.properties
        )
        user_queues = [unwrap_queue(namespace, q) for q in queues]
        return wrap_queue(namespace, chosen_by(user_queues, user_msg, arg))

    return queue, select


def user_send_result(namespace: str | None, result: SendResult) -> SendResult:
    """The result with its queue under the user's topic (processSendResponse)."""
    if not namespace:
        return result
    return attrs.evolve(result, queue=unwrap_queue(namespace, result.queue))


async def send_in(
    namespace: str | None,
    send: Callable[..., Awaitable[SendResult]],
    msg: Message,
    queue: MessageQueue | None,
    selector: Selector | None,
    arg: Any,
    timeout_ms: int | None,
) -> SendResult:
    """Run a producer's ``send`` with wire (namespaced) names; the caller gets its own back."""
    queue, selector = wire_target(namespace, queue, selector)
    result = await send(
        wire_message(namespace, msg),
        queue=queue,
        selector=selector,
        arg=arg,
        timeout_ms=timeout_ms,
    )
    return user_send_result(namespace, result)
