"""ListenerInvoker.invoke as a third-party consume service sees it (rmqk.spi.consume).

A listener's exception is logged unless the caller reports it itself, and a listener
that takes ``(messages, context)`` is not called with None for the context.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rmqk.engine.listener import ListenerInvoker
from rmqk.model import MessageQueue
from rmqk.model.errors import ClientError
from rmqk.model.message import MessageExt

MQ = MessageQueue("T", "broker-a", 0)
MSGS = [MessageExt(topic="T", body=b"x", queue_offset=0)]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("is_async", [False, True])
async def test_an_exception_is_logged_unless_the_caller_reports_it(
    is_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(msgs: list[MessageExt]) -> None:
        raise ValueError("bad body")

    async def fail_async(msgs: list[MessageExt]) -> None:
        raise ValueError("bad body")

    invoker = ListenerInvoker(fail_async if is_async else fail, "g", 2)
    outcome, _ = await invoker.invoke(MQ, MSGS, None, report=False)
    assert isinstance(outcome.exception, ValueError)
    assert _warnings(caplog) == []
    outcome, _ = await invoker.invoke(MQ, MSGS, None)
    assert isinstance(outcome.exception, ValueError)
    (line,) = _warnings(caplog)
    assert "of group g raised ValueError on MessageQueue [topic=T" in line


async def test_a_listener_taking_a_context_is_not_called_without_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[Any] = []

    async def deliver(msgs: list[MessageExt], context: Any) -> None:
        calls.append(context.queue)

    invoker = ListenerInvoker(deliver, "g", 2)
    outcome, _ = await invoker.invoke(MQ, MSGS, None)
    assert calls == []
    assert isinstance(outcome.exception, ClientError)
    assert "takes (messages, context), but the consume service called it with no context" in str(
        outcome.exception
    )
    assert any("raised ClientError" in line for line in _warnings(caplog))

    class Context:
        queue = MQ

    outcome, _ = await invoker.invoke(MQ, MSGS, Context())
    assert outcome.exception is None and calls == [MQ]


async def test_a_listener_without_a_context_still_gets_none() -> None:
    seen: list[list[MessageExt]] = []
    invoker = ListenerInvoker(lambda msgs: seen.append(msgs), "g", 1)
    outcome, _ = await invoker.invoke(MQ, MSGS, None)
    assert outcome.exception is None and seen == [MSGS]
