"""Transactional messages over real TCP: half messages, END_TRANSACTION, the broker's check.

Consumers must see exactly the committed messages: never a half message, never a
rolled-back one, and a message whose producer died is settled by asking another
producer of the same group.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from engine_support import admin_transport, create_topic, max_offsets, push_consumer, wait_for

from rmqk.engine.transaction import AsyncTransactionProducer, LocalTransactionState
from rmqk.model.message import Message, MessageExt, decode_offset_msg_id
from rmqk.plugins.broker import EmbeddedBroker
from rmqk.plugins.broker.transactions import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

pytestmark = pytest.mark.timeout(90)

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
# Checks within a second, so the check paths run in a test's time.
FAST = {"transaction_timeout": 0.3, "transaction_check_interval": 0.2}


class Collector:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.messages: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt]) -> None:
        self.messages.extend(msgs)
        self.bodies.extend(m.body for m in msgs)


async def _consume(broker: Any, group: str, topic: str) -> tuple[Any, Collector]:
    seen = Collector()
    consumer = push_consumer(broker, group)
    consumer.subscribe(topic, "*")
    consumer.register_listener(seen)
    await consumer.start()
    return consumer, seen


async def _total(broker: Any, topic: str) -> int:
    return sum((await max_offsets(broker.namesrv_addr, broker.broker_addr, topic, 4)).values())


def tx_producer(
    broker: Any, group: str, answer: LocalTransactionState, check: Any = None
) -> AsyncTransactionProducer:
    """A transaction producer whose local transactions answer ``answer``; so do its checks
    unless ``check`` is given."""
    return AsyncTransactionProducer(
        group,
        namesrv_addr=broker.namesrv_addr,
        execute_local_transaction=lambda m, a: answer,
        check_local_transaction=check or (lambda m: answer),
    )


async def test_commit_rollback_and_unknown_then_check(broker_factory: Any) -> None:
    broker = await broker_factory(**FAST)
    await create_topic(broker, "TxOrders", 4)
    decided = {b"commit": COMMIT, b"rollback": ROLLBACK, b"later": UNKNOW, b"raises": None}
    checked: list[bytes] = []

    async def execute(msg: Message, arg: Any) -> LocalTransactionState:
        assert arg == "arg"
        assert msg.properties["TRAN_MSG"] == "true" and msg.properties["PGROUP"] == "tx-g"
        state = decided[msg.body]
        if state is None:
            raise RuntimeError("the local transaction broke")
        return state

    def check(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg.body)
        assert msg.topic == "TxOrders"  # the real topic, not the half topic
        return COMMIT if msg.body == b"later" else ROLLBACK

    producer = AsyncTransactionProducer(
        "tx-g",
        namesrv_addr=broker.namesrv_addr,
        execute_local_transaction=execute,
        check_local_transaction=check,
    )
    await producer.start()
    consumer, seen = await _consume(broker, "tx-consumer", "TxOrders")
    try:
        results = {}
        for body in decided:
            results[body] = await producer.send_message_in_transaction(
                Message("TxOrders", body), "arg"
            )
        assert results[b"commit"].local_transaction_state is COMMIT
        assert results[b"rollback"].local_transaction_state is ROLLBACK
        assert results[b"later"].local_transaction_state is UNKNOW
        assert results[b"raises"].local_transaction_state is UNKNOW  # as Java
        await wait_for(lambda: b"later" in seen.bodies, 20, "the checked commit")
        await wait_for(lambda: b"raises" in checked, 20, "the raising one's check")
        await asyncio.sleep(1.0)  # room for anything that should not come
        assert sorted(seen.bodies) == [b"commit", b"later"]
        assert await _total(broker, "TxOrders") == 2
        delivered = {m.body: m for m in seen.messages}
        assert delivered[b"commit"].msg_id == results[b"commit"].msg_id
        assert delivered[b"commit"].properties["REAL_TOPIC"] == "TxOrders"  # as Apache stores it
        # The half messages and their settlements are ordinary records, Apache's layout.
        store = broker.store
        assert store.max_offset(HALF_TOPIC, 0) >= 4
        assert store.max_offset(OP_TOPIC, 0) >= 3
    finally:
        await consumer.shutdown()
        await producer.shutdown()


async def test_sync_facade_runs_the_local_transaction_in_the_calling_thread(
    broker_thread: Any,
) -> None:
    import threading

    from rmqk import TransactionProducer

    threads: list[str] = []

    def execute(msg: Message, arg: Any) -> LocalTransactionState:
        threads.append(threading.current_thread().name)
        return COMMIT

    def run() -> Any:
        with TransactionProducer(
            "tx-sync",
            namesrv_addr=broker_thread.namesrv_addr,
            execute_local_transaction=execute,
            check_local_transaction=lambda msg: COMMIT,
        ) as producer:
            return producer.send_message_in_transaction(Message("TxSync", b"x"))

    result = await asyncio.to_thread(run)
    assert result.local_transaction_state is COMMIT
    assert threads and threads[0] != "rmqk-loop"


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from rmqk import LocalTransactionState, Message, TransactionProducer

    def execute(msg, arg):
        print("HALF", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    producer = TransactionProducer(
        "tx-kill", namesrv_addr=sys.argv[1],
        execute_local_transaction=execute,
        check_local_transaction=lambda m: LocalTransactionState.UNKNOW,
    )
    producer.start()
    producer.send_message_in_transaction(Message("TxKill", b"orphan"))
    """
)


async def test_producer_killed_between_half_and_commit_is_settled_by_another(
    broker_factory: Any, tmp_path: Path
) -> None:
    broker = await broker_factory(**FAST)
    await create_topic(broker, "TxKill", 4)
    consumer, seen = await _consume(broker, "tx-kill-consumer", "TxKill")
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _CHILD, broker.namesrv_addr],
        capture_output=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert b"HALF" in child.stdout
    await asyncio.sleep(1.0)
    assert seen.bodies == []  # a half message is never delivered
    asked: list[bytes] = []

    def check(msg: MessageExt) -> LocalTransactionState:
        asked.append(msg.body)
        return COMMIT

    async with tx_producer(broker, "tx-kill", COMMIT, check):
        await wait_for(lambda: seen.bodies == [b"orphan"], 20, "the orphan's commit")
    await asyncio.sleep(0.5)
    assert seen.bodies == [b"orphan"]
    assert asked[:1] == [b"orphan"]
    await consumer.shutdown()


async def test_broker_restart_between_half_and_commit(broker_factory: Any, tmp_path: Path) -> None:
    data = tmp_path / "restarted"
    first = await broker_factory(data_dir=data, **FAST)
    await create_topic(first, "TxRestart", 4)
    async with tx_producer(first, "tx-restart", UNKNOW) as producer:
        result = await producer.send_message_in_transaction(Message("TxRestart", b"survivor"))
    assert result.local_transaction_state is UNKNOW
    await first.stop()

    second = await broker_factory(data_dir=data, **FAST)
    consumer, seen = await _consume(second, "tx-restart-consumer", "TxRestart")
    async with tx_producer(second, "tx-restart", COMMIT):
        await wait_for(lambda: seen.bodies == [b"survivor"], 20, "the commit after restart")
    await asyncio.sleep(0.5)
    assert seen.bodies == [b"survivor"]
    await consumer.shutdown()


async def _end_transaction(broker: Any, **fields: Any) -> RemotingCommand:
    transport = await admin_transport(broker.namesrv_addr)
    try:
        base: dict[str, Any] = {
            "producerGroup": "tx-bad",
            "tranStateTableOffset": 0,
            "commitOrRollback": 8,
            "fromTransactionCheck": False,
            "msgId": "0" * 32,
        }
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, {**base, **fields})
        return await transport.invoke(broker.broker_addr, request)
    finally:
        await transport.close()


async def test_end_transaction_for_unknown_or_ordinary_offsets_is_refused(broker: Any) -> None:
    await create_topic(broker, "TxBad", 4)
    answer = await _end_transaction(broker, commitLogOffset=10_000_000)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "Find prepared transaction message failed"

    from rmqk.engine.producer import AsyncProducer

    async with AsyncProducer("tx-plain", namesrv_addr=broker.namesrv_addr) as plain:
        sent = await plain.send(Message("TxBad", b"plain"))
    _, offset = decode_offset_msg_id(sent.offset_msg_id)
    answer = await _end_transaction(broker, commitLogOffset=offset)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "not a half message" in (answer.remark or "")
    answer = await _end_transaction(broker, commitLogOffset=offset, commitOrRollback=3)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "commitOrRollback field wrong"
    assert await _total(broker, "TxBad") == 1  # nothing committed twice or made up


async def test_wrong_group_or_offset_cannot_commit_a_half_message(broker: Any) -> None:
    await create_topic(broker, "TxWrong", 4)
    async with tx_producer(broker, "tx-owner", UNKNOW) as producer:
        result = await producer.send_message_in_transaction(Message("TxWrong", b"held"))
    _, offset = decode_offset_msg_id(result.offset_msg_id)
    answer = await _end_transaction(
        broker, commitLogOffset=offset, tranStateTableOffset=result.queue_offset
    )
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    answer = await _end_transaction(
        broker,
        producerGroup="tx-owner",
        commitLogOffset=offset,
        tranStateTableOffset=result.queue_offset + 5,
    )
    assert answer.remark == "The transaction state table offset wrong"
    assert await _total(broker, "TxWrong") == 0


async def test_unanswered_checks_discard_the_message_after_the_maximum(
    broker_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broker = await broker_factory(transaction_check_max=2, **FAST)
    await create_topic(broker, "TxSilent", 4)
    consumer, seen = await _consume(broker, "tx-silent-consumer", "TxSilent")
    checks: list[int] = []

    async def never_answers(msg: MessageExt) -> LocalTransactionState:
        checks.append(1)
        await asyncio.sleep(3600)  # the check times out: no END_TRANSACTION ever comes
        return COMMIT

    caplog.set_level(logging.ERROR, logger="rmqk.broker.transaction")
    async with tx_producer(broker, "tx-silent", UNKNOW, never_answers) as producer:
        await producer.send_message_in_transaction(Message("TxSilent", b"limbo"))
        await wait_for(
            lambda: broker.store.max_offset(CHECK_MAX_TIME_TOPIC, 0) == 1, 20, "the discard"
        )
        # transaction_check_max checks, then no more
        assert broker.processors.transaction_check.checks_sent == 2
        assert 1 <= len(checks) <= 2
    assert "checked too many times" in caplog.text
    await asyncio.sleep(0.5)
    assert seen.bodies == []
    assert await _total(broker, "TxSilent") == 0
    await consumer.shutdown()


def test_broker_options_are_checked(tmp_path: Path) -> None:
    from rmqk.model.errors import RmqkError

    with pytest.raises(RmqkError, match="transaction_check_max"):
        EmbeddedBroker(tmp_path, transaction_check_max=0)
    with pytest.raises(RmqkError, match="transaction_check_interval"):
        EmbeddedBroker(tmp_path, transaction_check_interval=0)


async def test_reject_transaction_message_refuses_half_messages(broker_factory: Any) -> None:
    broker = await broker_factory(reject_transaction_message=True)
    await create_topic(broker, "TxRefused", 4)
    from rmqk.model.errors import ClientError

    async with tx_producer(broker, "tx-refused", COMMIT) as producer:
        with pytest.raises(ClientError, match="sending transaction message is forbidden"):
            await producer.send_message_in_transaction(Message("TxRefused", b"no"))


_DOCS = Path(__file__).resolve().parent.parent / "docs"


def _transaction_example(page: str) -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", (_DOCS / page).read_text(), re.M | re.S)
    found = [b for b in blocks if "transaction" in b]
    assert len(found) == 1, f"{page} should hold one transactions example"
    return found[0]


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("concepts.md", "COMMIT_MESSAGE"),
        ("operations.md", "transactions checked every 10.0 s"),
        ("migration-from-java.md", "ROLLBACK_MESSAGE"),
    ],
)
def test_docs_examples_run(broker_thread: Any, tmp_path: Path, page: str, expected: str) -> None:
    code = _transaction_example(page).replace("127.0.0.1:9876", broker_thread.namesrv_addr)
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
