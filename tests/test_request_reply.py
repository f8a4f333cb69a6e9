"""Request-reply (Java's DefaultMQProducer.request) over real TCP against the embedded broker.

The requester's ``request`` sends the message and waits; a responder consumes it
and answers with ``create_reply_message`` sent by an ordinary ``send``, which goes
as SEND_REPLY_MESSAGE_V2; the broker pushes it (PUSH_REPLY_MESSAGE_TO_CLIENT) to
the requester's connection. Without any one of those parts no reply arrives and
the request times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_support import create_topic, max_offsets, push_consumer

import rmqk
from rmqk.engine.producer import AsyncProducer, select_by_hash
from rmqk.engine.request_reply import create_reply_message
from rmqk.engine.sync import Producer
from rmqk.model import SendStatus
from rmqk.model.errors import BrokerError, ClientError, RequestTimeoutError, SendFailedError
from rmqk.model.message import Message, MessageExt, MessageProperty

pytestmark = pytest.mark.timeout(90)

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class Responder:
    """A push consumer of the request topic that answers every request it consumes."""

    def __init__(self, broker: Any, topic: str) -> None:
        self.consumer = push_consumer(broker, "g-responder")
        self.producer = AsyncProducer("p-responder", namesrv_addr=broker.namesrv_addr)
        self.requests: list[MessageExt] = []
        self.reply_results: list[Any] = []
        self.consumer.subscribe(topic)
        self.consumer.register_listener(self._answer)

    async def _answer(self, msgs: list[MessageExt]) -> None:
        for msg in msgs:
            self.requests.append(msg)
            reply = create_reply_message(msg, b"re:" + msg.body)
            self.reply_results.append(await self.producer.send(reply))

    async def start(self) -> None:
        await self.producer.start()
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.shutdown()
        await self.producer.shutdown()


@pytest.fixture
async def responder(broker: Any) -> AsyncIterator[Responder]:
    await create_topic(broker, "Req", 4)
    r = Responder(broker, "Req")
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


async def test_async_request_returns_the_reply_pushed_by_the_broker(
    broker: Any, responder: Responder
) -> None:
    async with AsyncProducer("p-requester", namesrv_addr=broker.namesrv_addr) as p:
        msg = Message("Req", b"ping")
        reply = await p.request(msg, timeout=30)
        # The request carries what Java's prepareSendRequest adds.
        correlation_id = msg.properties[MessageProperty.CORRELATION_ID]
        assert msg.properties[MessageProperty.MESSAGE_REPLY_TO_CLIENT] == p.client.client_id
        assert msg.properties[MessageProperty.MESSAGE_TTL] == "30000"
        assert len(p.client.reply_futures) == 0
    assert reply.body == b"re:ping"
    assert reply.topic == REPLY_TOPIC
    # ReplyMessageRequestHeader's hosts, "ip:port" as a 4.9.8 broker writes them.
    assert reply.store_host == broker.broker_addr
    assert re.fullmatch(r"127\.0\.0\.1:\d+", reply.born_host)
    assert reply.queue_id == 0 and reply.store_timestamp > 0 and reply.born_timestamp > 0
    props = reply.properties
    assert props[MessageProperty.CORRELATION_ID] == correlation_id
    assert props[MessageProperty.MESSAGE_TYPE] == "reply"
    assert props[MessageProperty.MESSAGE_TTL] == "30000"
    # Stamped by the broker's push and by the client's receipt.
    assert int(props[MessageProperty.PUSH_REPLY_TIME]) > 0
    assert int(props[MessageProperty.REPLY_MESSAGE_ARRIVE_TIME]) > 0
    # The request consumed by the responder carried the broker's cluster.
    consumed = responder.requests[0]
    assert consumed.properties[MessageProperty.CLUSTER] == "DefaultCluster"
    assert consumed.properties[MessageProperty.CORRELATION_ID] == correlation_id
    # The reply was pushed (SUCCESS) and then stored in the reply topic, as Apache's default.
    assert responder.reply_results[0].status is SendStatus.SEND_OK
    stored = await max_offsets(broker.namesrv_addr, broker.broker_addr, REPLY_TOPIC, 1)
    assert sum(stored.values()) == 1


async def test_request_to_a_queue_and_through_a_selector(
    broker: Any, responder: Responder
) -> None:
    async with AsyncProducer("p-requester-q", namesrv_addr=broker.namesrv_addr) as p:
        queues = await p.queues_for("Req")
        reply = await p.request(Message("Req", b"to-q2"), 30, queue=queues[2])
        assert reply.body == b"re:to-q2"
        reply = await p.request(
            Message("Req", b"by-key"), 30, selector=select_by_hash, arg="key-7"
        )
        assert reply.body == b"re:by-key"
        expected = select_by_hash(queues, Message("Req", b"x"), "key-7")
    by_body = {m.body: m.queue_id for m in responder.requests}
    assert by_body[b"to-q2"] == 2
    assert by_body[b"by-key"] == expected.queue_id


async def test_no_reply_in_time_raises_a_timeout_naming_the_correlation_id(broker: Any) -> None:
    await create_topic(broker, "NoOneAnswers", 1)
    async with AsyncProducer("p-requester-t", namesrv_addr=broker.namesrv_addr) as p:
        msg = Message("NoOneAnswers", b"hello?")
        with pytest.raises(RequestTimeoutError, match="wait reply message timeout") as info:
            await p.request(msg, timeout=0.5)
        correlation_id = msg.properties[MessageProperty.CORRELATION_ID]
        assert info.value.correlation_id == correlation_id
        assert correlation_id in str(info.value)
        assert len(p.client.reply_futures) == 0


async def test_bad_request_arguments_are_refused(broker: Any) -> None:
    async with AsyncProducer("p-requester-bad", namesrv_addr=broker.namesrv_addr) as p:
        queues = await p.queues_for("TBW102")
        with pytest.raises(ClientError, match="not both"):
            await p.request(Message("X", b"x"), 1, queue=queues[0], selector=select_by_hash)
        with pytest.raises(ClientError, match="needs selector"):
            await p.request(Message("X", b"x"), 1, arg="k")
        with pytest.raises(ClientError, match="timeout must be > 0"):
            await p.request(Message("X", b"x"), 0)
        with pytest.raises(ClientError, match="not both"):
            await p.send(Message("X", b"x"), queue=queues[0], selector=select_by_hash)


def test_create_reply_message_needs_a_consumed_request() -> None:
    with pytest.raises(ClientError, match=r"property\[CLUSTER\] is null"):
        create_reply_message(Message("T", b"x"), b"y")
    request = Message(
        "T",
        b"x",
        properties={
            "CLUSTER": "C1",
            "CORRELATION_ID": "cid",
            "REPLY_TO_CLIENT": "1.2.3.4@9",
            "TTL": "3000",
            "KEYS": "not-copied",
        },
    )
    reply = rmqk.create_reply_message(request, b"answer")
    assert reply.topic == "C1_REPLY_TOPIC"
    assert reply.body == b"answer"
    assert reply.properties == {
        "MSG_TYPE": "reply",
        "CORRELATION_ID": "cid",
        "REPLY_TO_CLIENT": "1.2.3.4@9",
        "TTL": "3000",
    }


async def test_a_reply_nobody_waits_for_is_dropped_with_a_warning_and_counted(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await create_topic(broker, "Req2", 1)
    async with (
        AsyncProducer("p-requester-late", namesrv_addr=broker.namesrv_addr) as requester,
        AsyncProducer("p-replier-late", namesrv_addr=broker.namesrv_addr) as replier,
    ):
        # A request whose reply comes too late: the requester has given up.
        msg = Message("Req2", b"slow")
        with pytest.raises(RequestTimeoutError):
            await requester.request(msg, timeout=0.3)
        late = Message(
            "Req2", b"", properties={**msg.properties, MessageProperty.CLUSTER: "DefaultCluster"}
        )
        with caplog.at_level(logging.WARNING, logger="rmqk.engine.request_reply"):
            result = await replier.send(create_reply_message(late, b"too late"))
            assert result.status is SendStatus.SEND_OK  # the requester took the push
            for _ in range(100):
                if requester.client.reply_futures.unmatched_total:
                    break
                await asyncio.sleep(0.02)
        assert requester.client.reply_futures.unmatched_total == 1
        correlation_id = msg.properties[MessageProperty.CORRELATION_ID]
        assert any(
            "not matched any request" in r.getMessage() and correlation_id in r.getMessage()
            for r in caplog.records
        )

        # A reply to a client the broker has no connection of: refused with Apache's
        # remark (SYSTEM_ERROR, which a synchronous send retries, as Java's does).
        gone = Message(
            "Req2",
            b"",
            properties={
                MessageProperty.CLUSTER: "DefaultCluster",
                MessageProperty.CORRELATION_ID: "c-1",
                MessageProperty.MESSAGE_REPLY_TO_CLIENT: "10.9.9.9@gone",
            },
        )
        refused = re.escape("channel of <10.9.9.9@gone> not found")
        with pytest.raises(SendFailedError, match=refused) as info:
            await replier.send(create_reply_message(gone, b"lost"))
        assert info.value.response_code == 1
        assert isinstance(info.value.__cause__, BrokerError)


_RESPONDER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from rmqk.engine.consumer import AsyncPushConsumer
    from rmqk.engine.producer import AsyncProducer
    from rmqk import create_reply_message

    async def main(namesrv):
        producer = AsyncProducer("p-remote-responder", namesrv_addr=namesrv)
        consumer = AsyncPushConsumer(
            "g-remote-responder", namesrv_addr=namesrv,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(sys.argv[2])

        @consumer.register_listener
        async def answer(msgs):
            for m in msgs:
                await producer.send(create_reply_message(m, b"remote:" + m.body))

        await producer.start()
        await consumer.start()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await consumer.shutdown()
        await producer.shutdown()

    asyncio.run(main(sys.argv[1]))
    """
)


@contextlib.contextmanager
def remote_responder(broker_thread: Any, topic: str) -> Iterator[None]:
    """An async responder of ``topic`` in another process, answering b"remote:" + body."""
    asyncio.run(create_topic(broker_thread, topic, 2))
    proc = subprocess.Popen(
        [sys.executable, "-c", _RESPONDER_SCRIPT, broker_thread.namesrv_addr, topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        yield
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sync_requester_and_async_responder_in_another_process(broker_thread: Any) -> None:
    with (
        remote_responder(broker_thread, "ReqX"),
        Producer("p-sync-requester", namesrv_addr=broker_thread.namesrv_addr) as p,
    ):
        first = p.request(Message("ReqX", b"one"), timeout=30)
        second = p.request(Message("ReqX", b"two"), 30, selector=select_by_hash, arg="k")
    assert first.body == b"remote:one"
    assert second.body == b"remote:two"
    assert first.topic == second.topic == REPLY_TOPIC


def test_the_migration_guide_request_example_runs(broker_thread: Any) -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "migration-from-java.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)
    (block,) = [b for b in blocks if ".request(" in b]
    code = block.replace("127.0.0.1:9876", broker_thread.namesrv_addr)
    out = io.StringIO()
    with remote_responder(broker_thread, "Rpc"), contextlib.redirect_stdout(out):
        exec(compile(code, "migration-from-java.md", "exec"), {})
    assert out.getvalue().strip() == "b'remote:ping'"


async def test_broker_takes_the_v1_reply_header_too(broker: Any) -> None:
    """SEND_REPLY_MESSAGE (324) carries SendMessageRequestHeader's long names, checked
    for its @CFNotNull fields as Apache's decoder does."""
    from engine_support import admin_transport

    from rmqk.model.message import format_properties
    from rmqk.wire.protocol import RemotingCommand, RequestCode

    fields: dict[str, object] = {
        "producerGroup": "p-v1",
        "topic": REPLY_TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 0,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": format_properties(
            {"MSG_TYPE": "reply", "CORRELATION_ID": "c", "REPLY_TO_CLIENT": "10.1.1.1@v1"}
        ),
    }
    transport = await admin_transport(broker.namesrv_addr)
    try:
        cmd = RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE, fields, body=b"r")
        answer = await transport.invoke(broker.broker_addr, cmd, 5000)
        assert answer.code == 1
        assert answer.remark == "push reply message fail, channel of <10.1.1.1@v1> not found."
        del fields["flag"]
        cmd = RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE, fields, body=b"r")
        answer = await transport.invoke(broker.broker_addr, cmd, 5000)
        assert answer.code == 1 and "flag" in (answer.remark or "")
    finally:
        await transport.close()


async def test_a_compressed_reply_arrives_inflated(broker: Any, responder: Responder) -> None:
    # Over compress_msg_body_over_howmuch the responder's producer deflates the reply; the
    # broker pushes it with the compressed flag and the requester inflates it.
    body = b"0123456789" * 2000
    async with AsyncProducer("p-requester-big", namesrv_addr=broker.namesrv_addr) as p:
        reply = await p.request(Message("Req", body), timeout=30)
    assert reply.sys_flag & 0x1
    assert reply.body == b"re:" + body
