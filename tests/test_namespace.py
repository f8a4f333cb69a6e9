"""Namespaces as Apache RocketMQ 4.9.8's NamespaceUtil applies them.

The tables are written from NamespaceUtil, TopicValidator, MixAll and
NameServerAddressUtils of the 4.9.8 tag; the end-to-end tests run producers and
consumers over TCP against the embedded broker and look at what the broker holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rmqk.engine.consumer import AsyncPushConsumer
from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer
from rmqk.engine.producer import AsyncProducer, select_by_hash
from rmqk.model import MessageQueue
from rmqk.model.errors import ConfigError
from rmqk.model.message import Message, MessageExt
from rmqk.model.namespace import (
    check_namespace,
    effective_namespace,
    is_system_resource,
    namespace_from_endpoint,
    namespace_of,
    unwrap,
    unwrap_queue,
    wrap,
    wrap_and_retry,
    wrap_queue,
)
from rmqk.wire.protocol import RequestCode, ResponseCode

# (namespace, resource, wrapNamespace(namespace, resource))
WRAP_TABLE = [
    ("ns1", "Topic", "ns1%Topic"),
    ("ns1", "GID_A", "ns1%GID_A"),
    ("ns1", "%RETRY%GID_A", "%RETRY%ns1%GID_A"),
    ("ns1", "%DLQ%GID_A", "%DLQ%ns1%GID_A"),
    # Already wrapped in this namespace: unchanged, so wrapping twice is harmless.
    ("ns1", "ns1%Topic", "ns1%Topic"),
    ("ns1", "%RETRY%ns1%GID_A", "%RETRY%ns1%GID_A"),
    ("ns1", "%DLQ%ns1%GID_A", "%DLQ%ns1%GID_A"),
    # Wrapped in another namespace: wrapped again (Java checks only its own prefix).
    ("ns1", "ns2%Topic", "ns1%ns2%Topic"),
    ("ns1", "%RETRY%ns2%G", "%RETRY%ns1%ns2%G"),
    # A prefix that is not followed by the separator is not the namespace.
    ("ns1", "ns1Topic", "ns1%ns1Topic"),
    # System topics (TopicValidator.SYSTEM_TOPIC_SET and the rmq_sys_ prefix).
    ("ns1", "TBW102", "TBW102"),
    ("ns1", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
    ("ns1", "BenchmarkTest", "BenchmarkTest"),
    ("ns1", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"),
    ("ns1", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
    ("ns1", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"),
    ("ns1", "TRANS_CHECK_MAX_TIME_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"),
    ("ns1", "SELF_TEST_TOPIC", "SELF_TEST_TOPIC"),
    ("ns1", "OFFSET_MOVED_EVENT", "OFFSET_MOVED_EVENT"),
    ("ns1", "rmq_sys_anything", "rmq_sys_anything"),
    # System groups (MixAll.isSysConsumerGroup: the CID_RMQ_SYS_ prefix) ...
    ("ns1", "CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS"),
    # ... but not the other MixAll group constants, nor a system name behind %RETRY%.
    ("ns1", "TOOLS_CONSUMER", "ns1%TOOLS_CONSUMER"),
    ("ns1", "CLIENT_INNER_PRODUCER", "ns1%CLIENT_INNER_PRODUCER"),
    ("ns1", "%RETRY%CID_RMQ_SYS_TRANS", "%RETRY%ns1%CID_RMQ_SYS_TRANS"),
    # A case-sensitive set: lower-case look-alikes are user topics.
    ("ns1", "tbw102", "ns1%tbw102"),
    # No namespace, or nothing to wrap.
    (None, "Topic", "Topic"),
    ("", "Topic", "Topic"),
    ("ns1", "", ""),
]

# (namespace, resource, withoutNamespace(resource, namespace))
UNWRAP_TABLE = [
    ("ns1", "ns1%Topic", "Topic"),
    ("ns1", "%RETRY%ns1%GID_A", "%RETRY%GID_A"),
    ("ns1", "%DLQ%ns1%GID_A", "%DLQ%GID_A"),
    # Names of another namespace or of none pass through.
    ("ns1", "ns2%Topic", "ns2%Topic"),
    ("ns1", "%RETRY%ns2%GID", "%RETRY%ns2%GID"),
    ("ns1", "Topic", "Topic"),
    ("ns1", "%RETRY%GID_A", "%RETRY%GID_A"),
    ("ns1", "TBW102", "TBW102"),
    ("ns1", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
    # Only one level comes off (Java cuts at the first separator).
    ("ns1", "ns1%ns2%Topic", "ns2%Topic"),
    (None, "ns1%Topic", "ns1%Topic"),
    ("", "ns1%Topic", "ns1%Topic"),
    ("ns1", "", ""),
]


@pytest.mark.parametrize(("namespace", "resource", "wire"), WRAP_TABLE)
def test_wrap_follows_java(namespace: str | None, resource: str, wire: str) -> None:
    assert wrap(namespace, resource) == wire
    # Wrapping is idempotent for every name of the table.
    assert wrap(namespace, wire) == wire


@pytest.mark.parametrize(("namespace", "wire", "user"), UNWRAP_TABLE)
def test_unwrap_follows_java(namespace: str | None, wire: str, user: str) -> None:
    assert unwrap(namespace, wire) == user


@pytest.mark.parametrize(
    ("namespace", "resource"),
    [
        (ns, r)
        for ns, r, _ in WRAP_TABLE
        if ns and r and not r.startswith(("ns1%", "%RETRY%ns1%", "%DLQ%ns1%"))
    ]
    + [("ns1", "%DLQ%GID_A"), ("MQ_INST_1_x", "Orders")],
)
def test_unwrap_inverts_wrap(namespace: str, resource: str) -> None:
    assert unwrap(namespace, wrap(namespace, resource)) == resource


def test_retry_topic_and_system_resources() -> None:
    assert wrap_and_retry("ns1", "GID_A") == "%RETRY%ns1%GID_A"
    assert wrap_and_retry(None, "GID_A") == "%RETRY%GID_A"
    assert wrap_and_retry("ns1", "ns1%GID_A") == "%RETRY%ns1%GID_A"
    assert is_system_resource("SCHEDULE_TOPIC_XXXX")
    assert is_system_resource("CID_RMQ_SYS_X")
    assert not is_system_resource("%RETRY%CID_RMQ_SYS_X")
    assert not is_system_resource("")


@pytest.mark.parametrize(
    ("resource", "namespace"),
    [
        ("ns1%Topic", "ns1"),
        ("%RETRY%ns1%G", "ns1"),
        ("%DLQ%ns1%G", "ns1"),
        ("Topic", ""),
        ("%RETRY%G", ""),
        ("%Topic", ""),  # index 0 is not a namespace (Java: index > 0)
        ("TBW102", ""),
        ("", ""),
    ],
)
def test_namespace_of(resource: str, namespace: str) -> None:
    assert namespace_of(resource) == namespace


def test_queues_keep_broker_and_id() -> None:
    mq = MessageQueue("Orders", "broker-a", 3)
    wire = wrap_queue("ns1", mq)
    assert wire == MessageQueue("ns1%Orders", "broker-a", 3)
    assert unwrap_queue("ns1", wire) == mq
    assert wrap_queue(None, mq) is mq
    assert unwrap_queue("ns2", wire) == wire


@pytest.mark.parametrize(
    ("addr", "namespace"),
    [
        ("MQ_INST_123_abc.mq.aliyuncs.com:80", "MQ_INST_123_abc"),
        ("http://MQ_INST_123_abc.mq.aliyuncs.com:80", "MQ_INST_123_abc"),
        ("https://MQ_INST_1_x.host:9876", "MQ_INST_1_x"),
        ("127.0.0.1:9876", None),
        ("MQ_INST_123.host:80", None),  # needs <a>_<b>
        ("MQ_INST_1_x:9876", None),  # needs a '.' after the id
        ("", None),
    ],
)
def test_namespace_from_instance_endpoint(addr: str, namespace: str | None) -> None:
    assert namespace_from_endpoint(addr) == namespace


def test_effective_namespace() -> None:
    endpoint = ["MQ_INST_1_x.host:80"]
    assert effective_namespace("ns1", endpoint) == "ns1"
    assert effective_namespace(None, endpoint) == "MQ_INST_1_x"
    # Java's setNamespace(""): explicitly none, no fallback to the endpoint.
    assert effective_namespace("", endpoint) is None
    assert effective_namespace(None, ["127.0.0.1:9876"]) is None


@pytest.mark.parametrize("bad", ["ns 1", "ns%1", "ns.1", "ns/1", "名字", "ns\n"])
def test_illegal_namespaces_are_named(bad: str) -> None:
    problem = check_namespace(bad)
    assert problem is not None
    assert repr(bad) in problem


@pytest.mark.parametrize("good", [None, "", "ns1", "MQ_INST_1_x", "a-b|c_d"])
def test_legal_namespaces(good: str | None) -> None:
    assert check_namespace(good) is None


@pytest.mark.parametrize("bad", ["ns 1", "ns%1", "ns.1"])
def test_illegal_namespace_refused_at_construction(bad: str) -> None:
    for make in (
        lambda: AsyncPushConsumer("g", namesrv_addr="127.0.0.1:9876", namespace=bad),
        lambda: AsyncLitePullConsumer("g", namesrv_addr="127.0.0.1:9876", namespace=bad),
        lambda: AsyncProducer("p", namesrv_addr="127.0.0.1:9876", namespace=bad),
    ):
        with pytest.raises(ConfigError) as info:
            make()
        assert "namespace" in str(info.value)
        assert repr(bad) in str(info.value)


def test_wrapped_group_too_long_is_refused() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        AsyncPushConsumer("g" * 250, namesrv_addr="127.0.0.1:9876", namespace="ns12345")


def test_consumers_and_producer_name_their_group_on_the_wire() -> None:
    push = AsyncPushConsumer("G", namesrv_addr="127.0.0.1:9876", namespace="ns1")
    assert (push.group, push.retry_topic) == ("ns1%G", "%RETRY%ns1%G")
    lite = AsyncLitePullConsumer("G", namesrv_addr="127.0.0.1:9876", namespace="ns1")
    assert lite.group == "ns1%G"
    assert AsyncProducer("P", namesrv_addr="127.0.0.1:9876", namespace="ns1").group == "ns1%P"
    endpoint = AsyncPushConsumer("G", namesrv_addr="MQ_INST_1_x.localhost:9876")
    assert endpoint.group == "MQ_INST_1_x%G"
    plain = AsyncPushConsumer("G", namesrv_addr="127.0.0.1:9876")
    assert (plain.group, plain.retry_topic) == ("G", "%RETRY%G")


# -- over TCP, against the embedded broker ---------------------------------------------------

Factory = Callable[..., Awaitable[Any]]


async def _wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def _push(group: str, broker: Any, **options: Any) -> AsyncPushConsumer:
    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    return AsyncPushConsumer(group, namesrv_addr=broker.namesrv_addr, **options)


async def _topics(broker: Any) -> list[str]:
    from rmqk.plugins.admin.admin_client import AdminClient

    async with AdminClient(broker.namesrv_addr) as admin:
        return await admin.topic_names()


async def _connections(broker: Any, group: str) -> int:
    """GET_CONSUMER_CONNECTION_LIST's answer code for ``group``."""
    from rmqk.plugins.admin.admin_client import AdminClient

    async with AdminClient(broker.namesrv_addr) as admin:
        response = await admin.invoke(
            broker.broker_addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}
        )
        return int(response.code)


@pytest.mark.timeout(90)
async def test_namespaced_producer_and_consumer_exchange_messages(broker: Any) -> None:
    received: list[MessageExt] = []
    rebalances: list[tuple[str, frozenset[MessageQueue], list[MessageQueue]]] = []
    consumer = _push("GID_orders", broker, namespace="ns1")
    consumer.subscribe("Orders", "*")
    consumer.register_listener(lambda msgs: received.extend(msgs))
    consumer.register_rebalance_listener(lambda t, a, d: rebalances.append((t, a, d)))
    async with AsyncProducer("PID_orders", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        msg = Message("Orders", b"hello", tags="TagA")
        result = await p.send(msg)
        # The user's message keeps its name; the result names the user's topic.
        assert msg.topic == "Orders"
        assert result.queue.topic == "Orders"
        assert [q.topic for q in await p.queues_for("Orders")] == ["Orders"] * 4
        chosen = await p.send(Message("Orders", b"second"), selector=select_by_hash, arg="k")
        assert chosen.queue.topic == "Orders"
        batch = await p.send_batch([Message("Orders", b"third"), Message("Orders", b"fourth")])
        assert batch.queue.topic == "Orders"
        await consumer.start()
        try:
            await _wait_for(lambda: len(received) >= 4)
            assert {m.topic for m in received} == {"Orders"}
            assert sorted(m.body for m in received) == [b"fourth", b"hello", b"second", b"third"]
            first = next(m for m in received if m.body == b"hello")
            assert first.properties["INSTANCE_ID"] == "ns1"
            await _wait_for(lambda: any(t == "Orders" for t, _, _ in rebalances))
            for topic, all_queues, assigned in rebalances:
                assert not topic.startswith("ns1%")
                assert {q.topic for q in all_queues} | {q.topic for q in assigned} <= {
                    topic
                }
            # What the broker holds: the wrapped topic, retry topic and group.
            topics = await _topics(broker)
            assert "ns1%Orders" in topics
            assert "%RETRY%ns1%GID_orders" in topics
            assert "Orders" not in topics
            assert "%RETRY%GID_orders" not in topics
            assert await _connections(broker, "ns1%GID_orders") == ResponseCode.SUCCESS
            assert await _connections(broker, "GID_orders") == ResponseCode.CONSUMER_NOT_ONLINE
            # Offsets are committed under the wrapped group and topic.
            await consumer.persist_consumer_offset()
            from rmqk.plugins.admin.admin_client import AdminClient

            async with AdminClient(broker.namesrv_addr) as admin:
                rows = await admin.consumer_progress("ns1%GID_orders", "ns1%Orders")
            assert sum(r.consumer_offset for r in rows) == 4
        finally:
            await consumer.shutdown()


def _collect_into(out: list[bytes]) -> Callable[[list[MessageExt]], None]:
    def listener(msgs: list[MessageExt]) -> None:
        out.extend(m.body for m in msgs)

    return listener


@pytest.mark.timeout(90)
async def test_consumers_of_no_or_another_namespace_see_nothing(broker: Any) -> None:
    async with AsyncProducer("PID_x", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        await p.send(Message("Shared", b"for ns1"))
    async with AsyncProducer("PID_y", namesrv_addr=broker.namesrv_addr) as p:
        await p.send(Message("Shared", b"bare"))
    seen: dict[str, list[bytes]] = {"ns1": [], "none": [], "ns2": []}
    consumers = []
    for key, ns in (("ns1", "ns1"), ("none", None), ("ns2", "ns2")):
        c = _push("GID_shared", broker, namespace=ns, instance_name=f"i-{key}")
        c.subscribe("Shared", "*")
        c.register_listener(_collect_into(seen[key]))
        consumers.append(c)
    for c in consumers:
        await c.start()
    try:
        await _wait_for(lambda: bool(seen["ns1"]) and bool(seen["none"]))
        await asyncio.sleep(1.0)
        assert seen["ns1"] == [b"for ns1"]
        assert seen["none"] == [b"bare"]
        assert seen["ns2"] == []  # ns2%Shared has no messages
        # One group per namespace on the broker; ns2's knows no broker of ns2%Shared yet.
        for group in ("ns1%GID_shared", "GID_shared"):
            assert await _connections(broker, group) == ResponseCode.SUCCESS
        assert "ns2%Shared" not in await _topics(broker)
    finally:
        for c in consumers:
            await c.shutdown()


@pytest.mark.timeout(120)
async def test_failing_listener_retries_then_dead_letters_under_the_namespace(
    broker_factory: Factory,
) -> None:
    broker = await broker_factory(delay_levels=" ".join(["50ms"] * 18))
    attempts: list[tuple[str, int]] = []
    origins: list[str | None] = []

    def fail(msgs: list[MessageExt]) -> None:
        attempts.extend((m.topic, m.reconsume_times) for m in msgs)
        origins.extend(m.properties.get("RETRY_TOPIC") for m in msgs)
        raise RuntimeError("always")

    consumer = _push("GID_dlq", broker, namespace="ns1", max_reconsume_times=2)
    consumer.subscribe("Work", "*")
    consumer.register_listener(fail)
    async with AsyncProducer("PID_dlq", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        await p.send(Message("Work", b"poison"))
    await consumer.start()
    try:
        # The first delivery and two retries, each shown under the user's topic.
        await _wait_for(lambda: len(attempts) >= 3, timeout=60)
        assert attempts[:3] == [("Work", 0), ("Work", 1), ("Work", 2)]
        # The send-back named the wire topic, so the broker recorded it as the origin.
        assert origins[:3] == [None, "ns1%Work", "ns1%Work"]

        async def dlq_exists() -> bool:
            return "%DLQ%ns1%GID_dlq" in await _topics(broker)

        for _ in range(400):
            if await dlq_exists():
                break
            await asyncio.sleep(0.05)
        topics = await _topics(broker)
        assert "%DLQ%ns1%GID_dlq" in topics
        assert "%RETRY%ns1%GID_dlq" in topics
        assert not any(t in topics for t in ("%DLQ%GID_dlq", "%RETRY%GID_dlq", "Work"))
    finally:
        await consumer.shutdown()


@pytest.mark.timeout(90)
async def test_lite_pull_consumer_in_a_namespace(broker: Any) -> None:
    async with AsyncProducer("PID_lite", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        for i in range(3):
            await p.send(Message("Lite", f"m{i}".encode()))
    changes: list[tuple[str, list[MessageQueue]]] = []
    lite = AsyncLitePullConsumer(
        "GID_lite",
        namesrv_addr=broker.namesrv_addr,
        namespace="ns1",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        auto_commit=False,
    )
    lite.subscribe("Lite", "*")
    lite.register_rebalance_listener(lambda t, a, d: changes.append((t, list(d))))
    await lite.start()
    try:
        got: list[MessageExt] = []
        for _ in range(40):
            got.extend(await lite.poll(500))
            if len(got) >= 3:
                break
        assert sorted(m.body for m in got) == [b"m0", b"m1", b"m2"]
        assert {m.topic for m in got} == {"Lite"}
        assigned = lite.assignment()
        assert assigned and {q.topic for q in assigned} == {"Lite"}
        assert changes and all(t == "Lite" for t, _ in changes)
        queues = await lite.fetch_message_queues("Lite")
        assert {q.topic for q in queues} == {"Lite"}
        mq = next(q for q in assigned if q.queue_id == got[0].queue_id)
        await lite.commit({mq: got[0].queue_offset + 1})
        assert await lite.committed(mq) == got[0].queue_offset + 1
        lite.pause([mq])
        assert lite.paused() == frozenset({mq})
        lite.resume([mq])
        await lite.seek(mq, 0)
        assert await lite.position(mq) == 0
        assert "ns1%Lite" in await _topics(broker)
        assert await _connections(broker, "ns1%GID_lite") == ResponseCode.SUCCESS
    finally:
        await lite.close()


@pytest.mark.timeout(90)
async def test_broadcast_offsets_file_is_under_the_wrapped_group(
    broker: Any, tmp_path: Path
) -> None:
    async with AsyncProducer("PID_bc", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        await p.send(Message("Bcast", b"x"))
    received: list[MessageExt] = []
    consumer = _push(
        "GID_bc",
        broker,
        namespace="ns1",
        message_model="BROADCASTING",
        instance_name="bc",
        offset_store_options={"dir": str(tmp_path)},
    )
    consumer.subscribe("Bcast", "*")
    consumer.register_listener(lambda msgs: received.extend(msgs))
    await consumer.start()
    try:
        await _wait_for(lambda: bool(received))
        await consumer.persist_consumer_offset()
    finally:
        await consumer.shutdown()
    files = list(tmp_path.rglob("offsets.json"))
    assert len(files) == 1
    assert files[0].parent.name == "ns1%GID_bc"
    assert "ns1%Bcast" in files[0].read_text()


def test_spark_source_reads_a_namespace(broker_thread: Any) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from rmqk.plugins.spark.source import RocketMQStreamReader, SourceOptions

    async def produce() -> None:
        addr = broker_thread.namesrv_addr
        async with AsyncProducer("PID_spark", namesrv_addr=addr, namespace="ns1") as p:
            for i in range(5):
                await p.send(Message("Orders", f"o{i}".encode()))
        async with AsyncProducer("PID_spark", namesrv_addr=addr) as p:
            await p.send(Message("Orders", b"bare"))

    asyncio.run(produce())
    given = {"namesrv": broker_thread.namesrv_addr, "topics": "Orders", "Namespace": "ns1"}
    opts = SourceOptions.parse({**given, "startingOffsets": "earliest"}, streaming=True)
    assert (opts.topics, opts.consumer_group) == (("ns1%Orders",), "ns1%rmqk-spark-source")
    pinned = SourceOptions.parse({**given, "startingOffsets": '{"Orders@broker-a@0": 3}'}, True)
    assert [str(k) for k, _ in pinned.starting.specific] == ["ns1%Orders@broker-a@0"]
    reader = RocketMQStreamReader(opts)
    try:
        start = reader.initialOffset()
        assert start and all(key.startswith("ns1%Orders@") for key in start)
        end = reader.latestOffset()
        rows = [
            r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()
        ]
        assert sorted(r["body"] for r in rows) == [b"o0", b"o1", b"o2", b"o3", b"o4"]
        assert {r["topic"] for r in rows} == {"Orders"}
    finally:
        reader.stop()
    with pytest.raises(ConfigError, match="namespace"):
        SourceOptions.parse({**given, "namespace": "ns 1"}, streaming=True)


# -- the command line ----------------------------------------------------------------------


def _cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    from rmqk.app.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(120)
def test_run_status_and_admin_with_a_namespace(
    broker_thread: Any, tmp_path: Path, capsys: Any
) -> None:
    import json
    import signal
    import time

    from cli_support import start_rmqk

    addr = broker_thread.namesrv_addr
    create = ("admin", "topic", "create", "Orders", "-n", addr, "--namespace", "ns1")
    code, out, _ = _cli(capsys, *create)
    assert code == 0 and "ns1%Orders" in out

    async def produce() -> None:
        async with AsyncProducer("PID_cli", namesrv_addr=addr, namespace="ns1") as p:
            for i in range(3):
                await p.send(Message("Orders", f"c{i}".encode()))

    asyncio.run(produce())
    out_file = tmp_path / "out.jsonl"
    config = tmp_path / "ns.toml"
    config.write_text(
        f"""
[consumers.orders]
group = "GID_cli"
namespace = "ns1"
namesrv_addr = "{addr}"
subscription = {{ Orders = "*" }}
consume_from_where = "CONSUME_FROM_FIRST_OFFSET"
sink = "jsonl"
sink_options = {{ path = "{out_file}" }}
"""
    )
    proc = start_rmqk("run", str(config))
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if out_file.exists() and len(out_file.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        rows = [json.loads(line) for line in out_file.read_text().splitlines()]
        assert len(rows) == 3
        assert {r["topic"] for r in rows} == {"Orders"}
        code, out, _ = _cli(capsys, "status", str(config), "--json")
        (status,) = json.loads(out)
        assert status["group"] == "ns1%GID_cli"
        assert {q["topic"] for q in status["queues"]} == {"ns1%Orders"}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0

    code, out, _ = _cli(
        capsys, "status", "--namesrv", addr, "--group", "GID_cli", "--namespace", "ns1",
        "--topic", "Orders", "--json",
    )
    (status,) = json.loads(out)
    assert (status["group"], status["lag"]) == ("ns1%GID_cli", 0)
    assert sum(q["consumer_offset"] for q in status["queues"]) == 3

    code, out, _ = _cli(
        capsys, "admin", "consumer", "progress", "GID_cli", "--topic", "Orders", "-n", addr,
        "--namespace", "ns1", "--json",
    )
    assert code == 0
    report = json.loads(out)
    assert report["group"] == "ns1%GID_cli" and report["diffTotal"] == 0
    assert {q["topic"] for q in report["queues"]} == {"ns1%Orders"}
    # Without the namespace the bare group has no offsets of its own: refused, as mqadmin does.
    code, out, err = _cli(capsys, "admin", "consumer", "progress", "GID_cli", "-n", addr, "--json")
    assert code == 1 and "'GID_cli' is not online and has no offsets" in err, (out, err)

    listing = ("admin", "topic", "list", "-n", addr, "--namespace", "ns1", "--json")
    code, out, _ = _cli(capsys, *listing)
    listed = {t["topic"] for t in json.loads(out)}
    assert listed == {"ns1%Orders", "%RETRY%ns1%GID_cli"}

    for argv in (
        ("admin", "topic", "list", "-n", addr, "--namespace", "ns 1"),
        ("status", "--namesrv", addr, "--group", "g", "--namespace", "ns%1"),
    ):
        code, _, err = _cli(capsys, *argv)
        assert code != 0 and "--namespace" in err


@pytest.mark.timeout(90)
async def test_send_back_fallback_republishes_to_the_wrapped_retry_topic(
    broker_factory: Factory,
) -> None:
    broker = await broker_factory(delay_levels=" ".join(["50ms"] * 18))
    received: list[MessageExt] = []
    consumer = _push("GID_fb", broker, namespace="ns1")
    consumer.subscribe("Work", "*")
    consumer.register_listener(lambda msgs: received.extend(msgs))
    async with AsyncProducer("PID_fb", namesrv_addr=broker.namesrv_addr, namespace="ns1") as p:
        await p.send(Message("Work", b"again"))
    await consumer.start()
    try:
        await _wait_for(lambda: bool(received))
        msg = received[0]

        async def refuse(*args: Any, **kwargs: Any) -> None:
            raise ConnectionError("broker refuses send-back")

        consumer.client.transport.consumer_send_msg_back = refuse  # type: ignore[method-assign]
        # The retry topic must be routable first (the broker registers it with the name
        # server a moment after the heartbeat that created it).
        for _ in range(200):
            if "%RETRY%ns1%GID_fb" in await _topics(broker):
                break
            await asyncio.sleep(0.05)
        await consumer.send_message_back(msg, 0, None)
        assert msg.topic == "Work"  # the listener's message keeps the user's name
        await _wait_for(lambda: len(received) >= 2)
        retried = received[1]
        assert (retried.topic, retried.body, retried.reconsume_times) == ("Work", b"again", 1)
        assert retried.properties["RETRY_TOPIC"] == "ns1%Work"
        assert consumer.client.inner_producer.group == "CLIENT_INNER_PRODUCER"
    finally:
        await consumer.shutdown()


@pytest.mark.timeout(120)
def test_produce_command_with_a_namespace(broker_thread: Any, capsys: Any) -> None:
    addr = broker_thread.namesrv_addr
    code, out, _ = _cli(
        capsys, "produce", "--namesrv", addr, "--topic", "Cmd", "--count", "4",
        "--namespace", "ns1",
    )
    assert code == 0 and "sent 4 messages to Cmd" in out
    code, out, _ = _cli(capsys, "admin", "topic", "list", "-n", addr)
    assert code == 0
    assert "ns1%Cmd" in out
    assert not any(line.split()[:1] == ["Cmd"] for line in out.splitlines())
