"""One range reader (issue 26, step 4): every pull outside the consumers goes through
``rmqk.engine.reader.RangeReader``, so transport plugins and filter hooks apply to it.

A third-party plugin, installed as a distribution of its own (a ``.dist-info`` with an
``rmqk`` entry point in a temp dir on the path), registers a ``recording`` transport,
the ``tcp`` transport recording each pull in a file its ``record`` option names, and an
``rmqk_filter_message`` hook that drops messages tagged ``cancelled``. The reader, the
trace lookup and the Spark source (its executors included, which find the plugin
only through its entry point) are run with it against the embedded broker.
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = textwrap.dedent(
    '''
    """A recording transport and a filter hook, for tests."""

    from __future__ import annotations

    import json
    import os
    from typing import Any

    import attrs

    from rmqk import hookimpl
    from rmqk.spi.factory import PluginFactory
    from rmqk.spi.options import OptionSpec, OptionType

    # Set by the factory: the filter hook has no options of its own.
    _record: list[str] = []


    def _write(line: dict[str, Any]) -> None:
        if _record:
            with open(_record[-1], "a") as f:
                f.write(json.dumps({**line, "pid": os.getpid()}) + "\\n")


    class Recording:
        def __init__(self, inner: Any, client_id: str) -> None:
            self._inner = inner
            self._client_id = client_id

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        async def pull_message(self, addr: str, request: Any, timeout_ms: int) -> Any:
            result = await self._inner.pull_message(addr, request, timeout_ms)
            _write(
                {
                    "pull": request.queue_offset,
                    "queue": request.queue_id,
                    "group": request.consumer_group,
                    "found": len(result.messages),
                    "client": self._client_id,
                }
            )
            return result


    def create(config: Any, options: Any) -> Recording:
        from rmqk.plugins.remoting import create_tcp_transport

        _record.append(options["record"] or os.environ.get("RMQK_RECORDING_FILE", ""))
        inner = create_tcp_transport(attrs.evolve(config, options={}), config.hook)
        return Recording(inner, config.client_id)


    @hookimpl
    def rmqk_register_transports(register: Any) -> None:
        register(
            PluginFactory(
                "recording",
                create,
                options=[
                    OptionSpec(
                        name="record",
                        value_type=OptionType.STR,
                        doc="file to record pulls in",
                        default="",
                    )
                ],
            )
        )


    @hookimpl
    def rmqk_filter_message(context: Any) -> None:
        dropped = [m for m in context.messages if m.tags == "cancelled"]
        context.messages[:] = [m for m in context.messages if m.tags != "cancelled"]
        _write({"filtered": len(dropped), "group": context.consumer_group})
    '''
)


def install_plugin(where: Path) -> Path:
    """The plugin as an installed distribution in ``where`` (to put on the path)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "rmqk_recording_plugin.py").write_text(PLUGIN)
    info = where / "rmqk_recording_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rmqk-recording-plugin\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text("[rmqk]\nrecording = rmqk_recording_plugin\n")
    return where


@pytest.fixture
def recording_plugin(tmp_path: Path) -> Iterator[Path]:
    """The plugin installed and loaded in this process; the record file's path."""
    from rmqk.pluginmanager import get_plugin_manager, registries, reset_plugin_manager

    site = install_plugin(tmp_path / "site")
    sys.path.insert(0, str(site))
    reset_plugin_manager()
    try:
        assert "recording" in registries().transports
        assert get_plugin_manager().hook.rmqk_filter_message.get_hookimpls()
        yield tmp_path / "record.jsonl"
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("rmqk_recording_plugin", None)
        reset_plugin_manager()


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- one module builds pull requests ---------------------------------------------------------


def _python_files() -> Iterator[Path]:
    for folder in ("kernel", "plugins", "bench", "examples"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _names_pull_message(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "PULL_MESSAGE"


def test_one_module_builds_pull_requests() -> None:
    """The header is built in rmqk.engine.pull only; the tcp transport alone encodes it."""
    builders: list[str] = []
    encoders: list[str] = []
    for path in _python_files():
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if not isinstance(node, ast.Call):
                continue
            name = _called_name(node)
            if name == "PullMessageRequest":
                builders.append(f"{where}:{node.lineno}")
            # RemotingCommand(RequestCode.PULL_MESSAGE, ...) or RemotingCommand.request(...).
            if name in ("RemotingCommand", "request") and any(
                _names_pull_message(a) for a in node.args[:1]
            ):
                encoders.append(f"{where}:{node.lineno}")
    assert [b.rpartition(":")[0] for b in builders] == ["kernel/engine/pull.py"], builders
    assert [e.rpartition(":")[0] for e in encoders] == ["plugins/remoting/consumer_calls.py"], (
        encoders
    )


# -- the reader ------------------------------------------------------------------------------


async def _orders(namesrv: str, count: int) -> Any:
    from rmqk.plugins.spark.demo import produce_orders

    return await produce_orders(namesrv, count, topic="Orders")


async def test_the_reader_uses_the_clients_transport_and_the_filter_hooks(
    broker: Any, recording_plugin: Path
) -> None:
    from rmqk.engine.reader import RangeReader, ReaderSettings
    from rmqk.model import MessageQueue

    await broker.create_topic("Orders", queues=2)
    produced = await _orders(broker.namesrv_addr, 300)
    settings = ReaderSettings(
        namesrv_addrs=[broker.namesrv_addr],
        group="reader-test",
        transport="recording",
        transport_options={"record": str(recording_plugin)},
    )
    async with RangeReader.open(settings) as reader:
        queues = await reader.queues("Orders")
        assert queues == [MessageQueue("Orders", broker.broker_name, q) for q in (0, 1)]
        mq = queues[0]
        end = await reader.max_offset(mq)
        assert await reader.min_offset(mq) == 0 and end > 40
        msgs = [m async for batch in reader.read(mq, 5, end - 3) for m in batch]
    offsets = [m.queue_offset for m in msgs]
    assert offsets == sorted(offsets) and min(offsets) >= 5 and max(offsets) < end - 3
    assert msgs and not [m for m in msgs if m.tags == "cancelled"]
    lines = records(recording_plugin)
    pulls = [r for r in lines if "pull" in r]
    filtered = sum(r["filtered"] for r in lines if "filtered" in r)
    assert pulls[0]["pull"] == 5 and {r["group"] for r in pulls} == {"reader-test"}
    # Every offset of the range was pulled; the hook removed the cancelled ones.
    assert sum(r["found"] for r in pulls) == end - 8 == len(msgs) + filtered
    assert filtered > 0 and dict(produced.per_tag)["cancelled"] >= filtered


async def test_the_trace_lookup_scans_through_the_reader(
    broker: Any, recording_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that cannot query by key has its trace queues read with the chosen transport."""
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.message import Message
    from rmqk.plugins.trace.lookup import find_trace_messages
    from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

    await broker.create_topic("Looked", queues=1)
    async with AsyncProducer(
        "look-pg", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True
    ) as producer:
        sent = await producer.send(Message("Looked", b"x"))
    original = broker.processors.handle

    async def handle(conn: Any, request: RemotingCommand, st: int) -> Any:
        if request.code == RequestCode.QUERY_MESSAGE:
            return RemotingCommand.response_to(
                request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no index"
            )
        return await original(conn, request, st)

    broker.processors.handle = handle
    # The lookup passes no transport options: the plugin's record file comes from its variable.
    monkeypatch.setenv("RMQK_RECORDING_FILE", str(recording_plugin))
    found = await find_trace_messages(
        [broker.namesrv_addr], "RMQ_SYS_TRACE_TOPIC", sent.msg_id, transport="recording"
    )
    assert [m.keys for m in found] and all(sent.msg_id in (m.keys or "") for m in found)
    pulls = [r for r in records(recording_plugin) if "pull" in r]
    assert pulls and {r["group"] for r in pulls} == {"rmqk_trace_reader"}


# -- the Spark source ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from rmqk.plugins.spark.session import get_session, stop_session

    session = get_session(conf={"spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    stop_session()


def _read_with_plugin(
    spark: Any, namesrv: str, recording_plugin: Path, columns: tuple[str, ...], **options: str
) -> list[Any]:
    """A batch read of Orders through the recording transport, its executors (separate
    Python processes) loading the plugin through its entry point."""
    from rmqk.plugins.spark.source import register

    environment = spark.sparkContext.environment
    saved = dict(environment)
    # The data source is pickled with the environment its Python workers run in.
    environment["PYTHONPATH"] = str(recording_plugin.parent / "site")
    register(spark)
    try:
        reader = (
            spark.read.format("rocketmq")
            .option("namesrv", namesrv)
            .option("topics", "Orders")
            .option("transport", "recording")
            .option("transportOptions", json.dumps({"record": str(recording_plugin)}))
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        return list(reader.load().select(*columns).collect())
    finally:
        environment.clear()
        environment.update(saved)
        register(spark)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_spark_source_uses_the_transport_plugin_and_filter_hooks(
    spark: Any, broker_thread: Any, recording_plugin: Path
) -> None:
    """The executors, separate Python processes, load the plugin through its entry point."""
    import os

    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=2))
    produced = asyncio.run(_orders(broker_thread.namesrv_addr, 400))
    cancelled = dict(produced.per_tag)["cancelled"]
    assert cancelled > 0
    rows = _read_with_plugin(
        spark, broker_thread.namesrv_addr, recording_plugin, ("tags", "msg_id")
    )
    assert len(rows) == 400 - cancelled
    assert "cancelled" not in {r.tags for r in rows}
    assert {r.msg_id for r in rows} < set(produced.msg_ids)
    lines = records(recording_plugin)
    executors = [r for r in lines if r["pid"] != os.getpid()]
    assert sum(r["found"] for r in executors if "pull" in r) == 400
    assert sum(r["filtered"] for r in executors if "filtered" in r) == cancelled
    assert {r["group"] for r in executors} == {"rmqk-spark-source"}


def test_the_spark_source_refuses_an_unknown_transport_and_bad_transport_options(
    recording_plugin: Path,
) -> None:
    from rmqk.model.errors import ConfigError
    from rmqk.plugins.spark.source import SourceOptions

    base = {"namesrv": "127.0.0.1:9876", "topics": "Orders"}
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse({**base, "transport": "carrier-pigeon"}, streaming=False)
    (problem,) = info.value.problems
    assert problem.key == "transport" and "unknown transport 'carrier-pigeon'" in problem.message
    assert "registered: " in problem.message and "recording" in problem.message
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse({**base, "transportOptions": "[1]"}, streaming=False)
    assert [p.key for p in info.value.problems] == ["transportOptions"]
    assert "must be a JSON object" in info.value.problems[0].message
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse(
            {**base, "transport": "recording", "transportOptions": '{"colour": "red"}'},
            streaming=False,
        )
    assert "transport 'recording'" in str(info.value) and "colour" in str(info.value)
    parsed = SourceOptions.parse(
        {**base, "Transport": "recording", "transportoptions": '{"record": "r"}', "useTLS": "true"},
        streaming=False,
    )
    settings = parsed.reader().settings
    # TLS reaches the reader with the rest of the source's client options.
    assert settings.client_options is not None
    assert (
        settings.transport,
        dict(settings.transport_options),
        settings.client_options.use_tls,
    ) == (
        "recording",
        {"record": "r"},
        True,
    )


async def test_offsets_gone_by_retention_raise_or_are_skipped_with_a_warning(
    broker_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from rmqk.engine.producer import AsyncProducer
    from rmqk.engine.reader import OffsetsGoneError, RangeReader, ReaderSettings
    from rmqk.model.message import Message

    every_hour = ";".join(str(h) for h in range(24))
    broker = await broker_factory(
        segment_size=16 * 1024,
        max_message_size=8192,
        file_reserved_time=0.0,
        delete_when=every_hour,
        clean_resource_interval=0.05,
    )
    await broker.create_topic("Old", queues=1)
    async with AsyncProducer("old-pg", namesrv_addr=broker.namesrv_addr) as producer:
        for i in range(120):
            await producer.send(Message("Old", b"%06d" % i + b"z" * 400))
    # Retention deletes every segment but the active one; then the queue's start is fixed.
    for _ in range(200):
        if len(broker.store.commit_log.segments) == 1:
            break
        await asyncio.sleep(0.05)
    gone = broker.store.min_offset("Old", 0)
    assert gone > 0
    settings = ReaderSettings(namesrv_addrs=[broker.namesrv_addr], group="old-reader")
    async with RangeReader.open(settings) as reader:
        (mq,) = await reader.queues("Old")
        end = await reader.max_offset(mq)
        with pytest.raises(OffsetsGoneError) as info:
            [m async for batch in reader.read(mq, 0, end) for m in batch]
        assert (info.value.gap.first, info.value.gap.end, info.value.gap.deleted) == (0, gone, True)
        assert f"offsets 0..{gone - 1} of " in str(info.value) and "deleted by retention" in str(
            info.value
        )
        assert reader.skipped_gaps == 0
        with caplog.at_level(logging.WARNING, "rmqk.engine.reader"):
            got = [m async for batch in reader.read(mq, 0, end, skip_gaps=True) for m in batch]
    assert [m.queue_offset for m in got] == list(range(gone, end))
    assert (reader.skipped_gaps, reader.skipped_offsets) == (1, gone)
    (warning,) = [r for r in caplog.records if r.name == "rmqk.engine.reader"]
    assert warning.levelno == logging.WARNING and "skipping them (group old-reader)" in (
        warning.getMessage()
    )


async def test_the_reader_applies_every_client_option_it_takes(
    broker: Any, recording_plugin: Path
) -> None:
    """Client id parts, the API timeout, hook_plugins and unit_mode reach the reader's
    client and pulls; a client option a reader has no use for is refused, with why."""
    from rmqk import ClientOptions
    from rmqk.engine.reader import READER_REFUSES, RangeReader, ReaderSettings
    from rmqk.model.errors import ConfigError
    from rmqk.spi.client_options import CLIENT_OPTIONS

    await broker.create_topic("Orders", queues=1)
    produced = await _orders(broker.namesrv_addr, 120)
    cancelled = dict(produced.per_tag)["cancelled"]
    options = ClientOptions(
        instance_name="etl",
        unit_name="u1",
        client_ip="10.1.2.3",
        mq_client_api_timeout=4321,
        hook_plugins=[],  # the recording plugin's filter hook does not apply
    )
    settings = ReaderSettings(
        namesrv_addrs=[broker.namesrv_addr],
        group="reader-options",
        transport="recording",
        transport_options={"record": str(recording_plugin)},
        client_options=options,
    )
    async with RangeReader.open(settings) as reader:
        assert reader.client.config.request_timeout_ms == 4321
        (mq,) = await reader.queues("Orders")
        msgs = [m async for batch in reader.read(mq, 0, 120) for m in batch]
    assert len(msgs) == 120 and cancelled > 0  # nothing filtered: hook_plugins = []
    clients = {r["client"] for r in records(recording_plugin) if "pull" in r}
    (client,) = clients
    assert client.startswith("10.1.2.3@etl#") and client.endswith("@u1")
    # Every client option either applies, as above and as consumers' do, or is refused.
    refused = {
        "namesrv_addr": "127.0.0.1:1",
        "namespace": "ns1",
        "access_channel": "CLOUD",
        "enable_msg_trace": True,
        "customized_trace_topic": "T",
        "client_callback_executor_threads": 3,
        "poll_name_server_interval": 10_000,
        "heartbeat_broker_interval": 10_000,
    }
    assert set(refused) == set(READER_REFUSES) <= {spec.name for spec in CLIENT_OPTIONS}
    for name, value in refused.items():
        with pytest.raises(ConfigError) as info:
            ReaderSettings([broker.namesrv_addr], client_options=ClientOptions(**{name: value}))
        (problem,) = info.value.problems
        assert problem.key == name and READER_REFUSES[name] in problem.message


def test_the_spark_source_takes_every_client_option_by_its_camel_case_name(
    recording_plugin: Path,
) -> None:
    """Generated from CLIENT_OPTIONS: a client option added to the kernel is a Spark
    option too, or refused by the reader with why; bad values name the Spark option."""
    from rmqk.engine.reader import READER_REFUSES
    from rmqk.model.errors import ConfigError
    from rmqk.plugins.spark.options import source_client_specs, spark_name
    from rmqk.plugins.spark.source import SourceOptions
    from rmqk.spi.client_options import CLIENT_OPTIONS

    names = {spec.name: spark_name(spec.name) for spec in CLIENT_OPTIONS}
    assert set(source_client_specs()) == set(names.values()) - {"namesrvAddr", "namespace"}
    assert names["mq_client_api_timeout"] == "mqClientApiTimeout"
    base = {"namesrv": "127.0.0.1:9876", "topics": "Orders"}
    parsed = SourceOptions.parse(
        {**base, "instanceName": "etl", "clientIP": "10.1.2.3", "unitName": "u1",
         "mqClientApiTimeout": "4000", "vipChannelEnabled": "true", "unitMode": "true",
         "hookPlugins": "recording"},
        streaming=False,
    )  # fmt: skip
    client = parsed.reader().settings.client_options
    assert client is not None
    assert (client.instance_name, client.client_ip, client.unit_name) == ("etl", "10.1.2.3", "u1")
    assert (client.mq_client_api_timeout, client.vip_channel_enabled, client.unit_mode) == (
        4000,
        True,
        True,
    )
    assert client.hook_plugins == ("recording",)
    # Unset, the API timeout is pullTimeoutMs, as every request's was before.
    unset = SourceOptions.parse({**base, "pullTimeoutMs": "7000"}, streaming=False)
    assert unset.client.mq_client_api_timeout == 7000
    for key, value, message in [
        ("mqClientApiTimeout", "0", "mqClientApiTimeout"),
        ("enableMsgTrace", "true", READER_REFUSES["enable_msg_trace"]),
        ("heartbeatBrokerInterval", "1000", READER_REFUSES["heartbeat_broker_interval"]),
        ("hookPlugins", "recording,nope", "no plugin is named 'nope'"),
        ("tlsKeyFile", "/dev/null", "tlsKeyFile is set but useTls is false"),
    ]:
        with pytest.raises(ConfigError) as info:
            SourceOptions.parse({**base, key: value}, streaming=False)
        (problem,) = info.value.problems
        assert problem.key == key and message in problem.message, (key, str(info.value))


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_spark_source_applies_its_client_options_on_the_executors(
    spark: Any, broker_thread: Any, recording_plugin: Path
) -> None:
    """instanceName, unitName and clientIP name the executors' clients; hookPlugins = ""
    leaves the installed filter hook out of the source's pulls."""
    import os

    broker_thread.call(broker_thread.broker.create_topic("Orders", queues=2))
    produced = asyncio.run(_orders(broker_thread.namesrv_addr, 200))
    rows = _read_with_plugin(
        spark,
        broker_thread.namesrv_addr,
        recording_plugin,
        ("msg_id",),
        instanceName="etl",
        unitName="u1",
        clientIP="10.1.2.3",
        hookPlugins="",
    )
    assert sorted(r.msg_id for r in rows) == sorted(produced.msg_ids)  # none filtered
    executors = [r for r in records(recording_plugin) if r["pid"] != os.getpid() and "pull" in r]
    assert executors and not [r for r in records(recording_plugin) if "filtered" in r]
    assert {r["client"].split("#")[0] for r in executors} == {"10.1.2.3@etl"}
    assert {r["client"].rsplit("@", 1)[1] for r in executors} == {"u1"}
