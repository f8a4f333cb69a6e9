"""consumeMessageDirectly on both consume services: the result text for each listener answer.

No broker: a stub host's listener returns a set outcome, and the test checks the
result a console would be shown and what the call asked of the host.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rmqk.engine.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    ListenerOutcome,
)
from rmqk.model import ConsumeOrderlyStatus, ConsumeStatus, MessageQueue
from rmqk.model.message import MessageExt
from rmqk.options import ConsumerOptions
from rmqk.plugins.consume.concurrent import ConcurrentConsumeService
from rmqk.plugins.consume.orderly import OrderlyConsumeService
from rmqk.spi.transport import ConsumeMessageDirectlyResult


class Listener:
    def __init__(self, outcome: ListenerOutcome) -> None:
        self.outcome = outcome
        self.calls: list[tuple[MessageQueue, list[MessageExt], Any, bool]] = []

    async def invoke(
        self,
        queue: MessageQueue,
        msgs: list[MessageExt],
        context: Any,
        hooks: bool = True,
        report: bool = True,
    ) -> tuple[ListenerOutcome, None]:
        assert not report  # the exception goes back to the asker, not to the log
        self.calls.append((queue, msgs, context, hooks))
        return self.outcome, None


def _host(outcome: ListenerOutcome) -> Any:
    reset: list[list[MessageExt]] = []
    return SimpleNamespace(
        options=ConsumerOptions(),
        retry_topic="%RETRY%g",
        group="g",
        listener=Listener(outcome),
        reset_retry_topic=reset.append,
        reset=reset,
    )


def _message() -> MessageExt:
    return MessageExt(topic="T", body=b"x", queue_id=3, broker_name="broker-b")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, "CR_SUCCESS"),
        (ConsumeStatus.CONSUME_SUCCESS, "CR_SUCCESS"),
        ("RECONSUME_LATER", "CR_LATER"),
        (False, "CR_LATER"),
        (42, "CR_RETURN_NULL"),
    ],
)
async def test_each_answer_reads_as_its_result(status: Any, expected: str) -> None:
    host = _host(ListenerOutcome(status, None, 12.7))
    msg = _message()
    result = await ConcurrentConsumeService(host, {}).consume_message_directly(msg, "broker-a")
    assert result == ConsumeMessageDirectlyResult(
        order=False, auto_commit=True, consume_result=expected, remark=None, spent_time_mills=12
    )
    ((queue, msgs, context, hooks),) = host.listener.calls
    assert queue == MessageQueue("T", "broker-a", 3)
    assert msgs == [msg] and host.reset == [[msg]]
    assert isinstance(context, ConsumeConcurrentlyContext) and hooks is False


async def test_a_raising_listener_is_reported_with_its_exception() -> None:
    host = _host(ListenerOutcome(None, ValueError("bad body"), 1.0))
    result = await ConcurrentConsumeService(host, {}).consume_message_directly(_message(), None)
    assert result.consume_result == "CR_THROW_EXCEPTION"
    assert result.remark == "ValueError: bad body"
    ((queue, _, _, _),) = host.listener.calls
    assert queue == MessageQueue("T", "broker-b", 3)  # the message's own broker


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, "CR_SUCCESS"),
        (ConsumeOrderlyStatus.SUCCESS, "CR_SUCCESS"),
        ("COMMIT", "CR_COMMIT"),
        (ConsumeOrderlyStatus.ROLLBACK, "CR_ROLLBACK"),
        (False, "CR_LATER"),
        ("SUSPEND_CURRENT_QUEUE_A_MOMENT", "CR_LATER"),
        # A concurrent status means nothing to the orderly service.
        ("CONSUME_SUCCESS", "CR_RETURN_NULL"),
    ],
)
async def test_each_orderly_answer_reads_as_its_result(status: Any, expected: str) -> None:
    host = _host(ListenerOutcome(status, None, 3.2))
    msg = _message()
    result = await OrderlyConsumeService(host, {}).consume_message_directly(msg, None)
    assert result == ConsumeMessageDirectlyResult(
        order=True, auto_commit=True, consume_result=expected, remark=None, spent_time_mills=3
    )
    ((queue, msgs, context, hooks),) = host.listener.calls
    assert queue == MessageQueue("T", "broker-b", 3)
    assert msgs == [msg] and host.reset == [[msg]]
    assert isinstance(context, ConsumeOrderlyContext) and hooks is False


async def test_a_raising_orderly_listener_is_reported_with_its_exception() -> None:
    host = _host(ListenerOutcome(ConsumeOrderlyStatus.COMMIT, KeyError("k"), 1.0))
    result = await OrderlyConsumeService(host, {}).consume_message_directly(_message(), "a")
    assert (result.consume_result, result.remark, result.order) == (
        "CR_THROW_EXCEPTION",
        "KeyError: 'k'",
        True,
    )
