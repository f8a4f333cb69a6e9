"""``spark.readStream.format("rocketmq")`` and ``spark.read.format("rocketmq")``.

A Python data source (PySpark 4.0+). The driver plans one input partition per
queue with new messages (or more, with ``minPartitions``), from the brokers' min and max
offsets; executors pull their ranges straight from the brokers. Offsets live in
Spark's checkpoint as ``{"<topic>@<broker>@<queueId>": next_offset}``; the source
never commits to a consumer group, so it neither needs one nor disturbs one.

Options (names are case-insensitive):

=========================  ==========================================================
``namesrv``                name server(s), ``;`` or ``,`` separated (``nameserver``
                           and ``nameServer`` are accepted too); required
``topics``                 comma-separated topics (``topic`` is accepted too); required
``startingOffsets``        ``earliest``, ``latest`` (streaming default), a timestamp
                           (ms or ISO 8601) or JSON per queue; for a new query only
``endingOffsets``          batch reads: ``latest`` (default), a timestamp or JSON per queue;
                           ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
                           take JSON per queue of timestamps (ms) instead
``maxMessagesPerTrigger``  at most this many offsets per micro-batch, shared fairly
                           (Kafka's ``maxOffsetsPerTrigger`` is accepted too)
``minPartitions``          split queue ranges into at least this many input partitions
``subExpression``          tag filter such as ``TagA || TagB`` (default ``*``), or an SQL92
                           filter with ``expressionType`` ``SQL92``
``expressionType``         ``TAG`` (default) or ``SQL92``
``failOnDataLoss``         fail when planned offsets are gone, or a queue's offsets
                           went backwards (default true); false reads such a queue
                           afresh from its first offset, with a WARNING
``pullTimeoutMs``          timeout of each broker request (default 10000)
``consumerGroup``          group named in pull requests (default rmqk-spark-source)
``namespace``              a client namespace: topics, JSON offset keys and the group
                           are ``<namespace>%<name>`` on the brokers (and in the
                           checkpoint); the ``topic`` column holds the names without it
``transport``              the registered transport plugin (default ``tcp``)
``transportOptions``       its options, a JSON object
``useTls``, ``tls*``       TLS to name servers and brokers (default false)
``accessKey``              its own ACL account, with ``secretKey`` (default: the process's)
=========================  ==========================================================

A queue whose max offset on the broker is below the offset the checkpoint
recorded went backwards (a broker rebuilt with an empty store, a topic deleted
and created again; issue 25): its new messages would be skipped until the queue
grew past the old offset. ``latestOffset`` raises :class:`DataLossError` naming
the queue and both offsets, or with ``failOnDataLoss=false`` ends the queue's
batch at its new max offset, which ``partitions`` reads from offset 0 (an end
below the start means exactly that, so a replayed batch plans the same range).

JSON offsets are flat (``{"Orders@broker-a@0": 42}``) or nested
(``{"Orders": {"broker-a": {"0": 42}}}``); -2 is a queue's earliest, -1 its latest.

On PySpark 4.2+ the limit is admission control (``getDefaultReadLimit`` gives
``ReadMaxRows``) and ``trigger(availableNow=True)`` reads everything there is
in batches of at most the limit. PySpark 4.0 and 4.1 call ``latestOffset()``
without the start offset and have no admission control for Python sources:
the limit counts from the end of this reader's previous batch, the first
batch after a query (re)starts is not limited, and ``availableNow`` / ``once``
triggers run a single batch (of at most the limit, so leave
``maxMessagesPerTrigger`` unset for those there); after a failure that single
batch is the interrupted one, replayed, and the next run goes on from there.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from rmqk import ReaderSettings
from rmqk.model import SubscriptionData, build_subscription
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.model.names import check_expression
from rmqk.model.namespace import effective_namespace, wrap
from rmqk.plugins.spark.columns import messages_to_arrow, spark_schema
from rmqk.plugins.spark.offsets import (
    OffsetSpec,
    cap_offsets,
    parse_offset_key,
    parse_offset_spec,
    parse_timestamp_spec,
    split_ranges,
)
from rmqk.plugins.spark.options import SourceOptionTable, source_client_specs
from rmqk.plugins.spark.pull import BrokerReader, DataLossError, QueueInfo
from rmqk.spi.client_options import ClientOptions
from rmqk.spi.options import OptionType, Where, convert_values, parse_options
from rmqk.spi.registry import PluginChoice, check_hook_plugins, check_plugin_names, registries

# PySpark 4.2+ has admission control (read limits) and Trigger.AvailableNow for
# Python sources; 4.0 and 4.1 have neither.
_ReadAllAvailable: Any = None
_ReadMaxRows: Any = None
_MIXINS: tuple[type, ...] = ()
try:
    from pyspark.sql.streaming import datasource as _streaming_datasource
except ImportError:  # pragma: no cover - PySpark 4.0
    pass
else:
    _ReadAllAvailable = getattr(_streaming_datasource, "ReadAllAvailable", None)
    _ReadMaxRows = getattr(_streaming_datasource, "ReadMaxRows", None)
    _available_now = getattr(_streaming_datasource, "SupportsTriggerAvailableNow", None)
    if _available_now is not None:
        _MIXINS = (_available_now,)

__all__ = ["QueueRange", "RocketMQDataSource", "SourceOptions", "register"]

log = logging.getLogger("rmqk.plugins.spark.source")

# Rows per Arrow batch handed to Spark from one partition.
ARROW_BATCH_ROWS = 8192

# Each client option under its Spark name (camelCase), generated from CLIENT_OPTIONS.
_CLIENT_SPECS = source_client_specs()
_CLIENT_ATTRS = {name: spec.attr for name, spec in _CLIENT_SPECS.items()}

_ALIASES = {
    "namesrv": "namesrv",
    "nameserver": "namesrv",
    "namesrvaddr": "namesrv",
    "topics": "topics",
    "topic": "topics",
    "startingoffsets": "startingOffsets",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsets": "endingOffsets",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "maxmessagespertrigger": "maxMessagesPerTrigger",
    # Kafka's name for it, so a Kafka reader's options carry over.
    "maxoffsetspertrigger": "maxMessagesPerTrigger",
    "minpartitions": "minPartitions",
    "subexpression": "subExpression",
    "expressiontype": "expressionType",
    "failondataloss": "failOnDataLoss",
    "pulltimeoutms": "pullTimeoutMs",
    "consumergroup": "consumerGroup",
    "namespace": "namespace",
    "transport": "transport",
    "transportoptions": "transportOptions",
    # Spark lower-cases option names: clientIP, clientIp and clientip are one option.
    **{name.lower(): name for name in _CLIENT_SPECS},
}


def _problem(key: str, message: str) -> ConfigProblem:
    return ConfigProblem("<spark options>", "rocketmq", key, message)


@attrs.frozen
class SourceOptions:
    namesrv: tuple[str, ...]
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_messages_per_trigger: int | None = None
    min_partitions: int | None = None
    sub_expression: str = "*"
    expression_type: str = "TAG"
    fail_on_data_loss: bool = True
    pull_timeout_ms: int = 10_000
    consumer_group: str = "rmqk-spark-source"
    # Topics, offset keys and the group above are wire names, wrapped in this namespace.
    namespace: str | None = None
    # How the source connects and signs (TLS files, its own account).
    client: ClientOptions = attrs.field(factory=ClientOptions)
    transport: str = "tcp"
    transport_options: Mapping[str, Any] = attrs.field(factory=dict, hash=False)

    @classmethod
    def parse(cls, options: Mapping[str, Any], streaming: bool) -> SourceOptions:
        # Spark option names are case-insensitive; each spelling maps to its declared key.
        given: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        clashes: list[ConfigProblem] = []
        for k, v in options.items():
            if v is None:
                continue
            key = _ALIASES.get(str(k).lower().replace("_", ""), str(k))
            if key in spelled and spelled[key].lower() != str(k).lower():
                clashes.append(
                    _problem(key, f"is given twice, as {spelled[key]} and as {k}; give one")
                )
            spelled[key] = str(k)
            given[key] = v
        if not str(given.get("subExpression", "*")).strip():
            del given["subExpression"]  # Spark passes "" for an option set but left empty
        client_given = {k: given.pop(k) for k in list(given) if k in _CLIENT_SPECS}
        table, problems = parse_options(
            SourceOptionTable, given, Where("<spark options>", "rocketmq"), text=True
        )
        problems[:0] = clashes
        starting = _offsets(
            problems,
            given,
            "startingOffsets",
            table.starting_offsets,
            table.starting_offsets_by_timestamp,
            "latest" if streaming else "earliest",
        )
        ending = _offsets(
            problems,
            given,
            "endingOffsets",
            table.ending_offsets,
            table.ending_offsets_by_timestamp,
            "latest",
        )
        for key in ("endingOffsets", "endingOffsetsByTimestamp"):
            if streaming and key in given:
                problems.append(_problem(key, "is for batch reads (spark.read) only"))
        if "maxMessagesPerTrigger" in given and not streaming:
            problems.append(
                _problem(spelled["maxMessagesPerTrigger"], "is for streaming reads only")
            )
        if table.expression_type == "SQL92" and "subExpression" not in given:
            problems.append(
                _problem("subExpression", "is required with expressionType SQL92, e.g. a > 5")
            )
        else:
            # The rule of every subscription API (rmqk.model.names.check_expression).
            expression_problem = check_expression(table.sub_expression, table.expression_type)
            if expression_problem:
                problems.append(_problem("subExpression", expression_problem))
        client = _client_options(client_given, table, problems)
        problems.extend(_transport_problems(table, "transport" in given))
        if problems:
            raise ConfigError(problems)
        assert starting is not None and ending is not None
        ns = effective_namespace(table.namespace, table.namesrv)
        return cls(
            namesrv=table.namesrv,
            topics=tuple(wrap(ns, t) for t in table.topics),
            starting=_wire_spec(ns, starting),
            ending=_wire_spec(ns, ending),
            max_messages_per_trigger=table.max_messages_per_trigger,
            min_partitions=table.min_partitions,
            sub_expression=table.sub_expression.strip(),
            expression_type=table.expression_type,
            fail_on_data_loss=table.fail_on_data_loss,
            pull_timeout_ms=table.pull_timeout_ms,
            consumer_group=wrap(ns, table.consumer_group),
            namespace=ns,
            client=client,
            transport=table.transport,
            transport_options=dict(table.transport_options),
        )

    def subscription(self, topic: str) -> SubscriptionData:
        """What each pull of ``topic`` (a wire name) carries for the broker to filter by."""
        return build_subscription(topic, self.sub_expression, self.expression_type)

    def reader(self) -> BrokerReader:
        return BrokerReader(
            ReaderSettings(
                namesrv_addrs=self.namesrv,
                group=self.consumer_group,
                transport=self.transport,
                transport_options=self.transport_options,
                namespace=self.namespace,
                timeout_ms=self.pull_timeout_ms,
                instance_name="rmqk-spark",
                client_options=self.client,
            )
        )


def _client_options(
    given: Mapping[str, Any], table: SourceOptionTable, problems: list[ConfigProblem]
) -> ClientOptions:
    """The source's client options (rmqk.ClientOptions) from their Spark spellings, each
    problem naming the Spark option; ``mqClientApiTimeout`` defaults to ``pullTimeoutMs``,
    the timeout of every broker request before client options existed here."""
    where = Where("<spark options>", "rocketmq")
    text = {
        # Spark hands text: a list is comma-separated ("" is the empty list).
        k: [p.strip() for p in v.split(",") if p.strip()]
        if _CLIENT_SPECS[k].value_type is OptionType.STR_LIST and isinstance(v, str)
        else v
        for k, v in given.items()
    }
    values, found = convert_values(_CLIENT_SPECS, text, where, text=True)
    problems.extend(found)
    if found:
        return ClientOptions()
    kwargs = {_CLIENT_ATTRS[k]: v for k, v in values.items()}
    kwargs.setdefault("mq_client_api_timeout", table.pull_timeout_ms)
    back = {attr: name for name, attr in _CLIENT_ATTRS.items()}
    try:
        client = ClientOptions(**kwargs)
        # What a range reader refuses (an option it has no use for), said now, and
        # hook plugins this process does not have.
        ReaderSettings(table.namesrv or ("127.0.0.1:9876",), client_options=client)
        check_hook_plugins(client.hook_plugins, "rocketmq")
    except ConfigError as exc:
        problems.extend(
            _problem(back.get(p.key or "", p.key or ""), _spark_names(p.message, back))
            for p in exc.problems
        )
        return ClientOptions()
    return client


def _spark_names(message: str, back: Mapping[str, str]) -> str:
    """``message`` with the client options it names under their Spark names."""
    for attr, name in sorted(back.items(), key=lambda kv: -len(kv[0])):
        message = re.sub(rf"\b{attr}\b", name, message)
    return message


def _offsets(
    problems: list[ConfigProblem],
    given: Mapping[str, Any],
    option: str,
    text: str | None,
    by_timestamp: str | None,
    default: str,
) -> OffsetSpec | None:
    """``<option>`` or ``<option>ByTimestamp`` parsed (not both), its problems added."""
    try:
        if by_timestamp is None:
            return parse_offset_spec(text, option, default)
        if option in given:
            problems.append(
                _problem(f"{option}ByTimestamp", f"is given with {option}; give one of them")
            )
            return None
        return parse_timestamp_spec(by_timestamp, f"{option}ByTimestamp", default)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


def _transport_problems(table: SourceOptionTable, explicit: bool) -> list[ConfigProblem]:
    """An unregistered transport, or transportOptions it does not declare or refuses."""
    where = Where("<spark options>", "rocketmq")
    choice = PluginChoice("transport", table.transport, "transport")
    problems = check_plugin_names([choice], where, explicit={"transport"} if explicit else ())
    if problems:
        return problems
    # Checked as the kernel checks every plugin's options table.
    return registries().transports.option_problems(
        table.transport,
        table.transport_options,
        Where("<spark options>", "rocketmq transportOptions"),
    )


def _wire_spec(namespace: str | None, spec: OffsetSpec) -> OffsetSpec:
    """``spec`` with the topics of its per-queue offsets wrapped in ``namespace``."""
    if not namespace or not spec.specific:
        return spec
    specific = tuple(
        (attrs.evolve(key, topic=wrap(namespace, key.topic)), offset)
        for key, offset in spec.specific
    )
    return attrs.evolve(spec, specific=specific)


class QueueRange(InputPartition):
    """Offsets ``start`` (included) to ``end`` (excluded) of one queue."""

    def __init__(self, topic: str, broker: str, queue_id: int, addr: str, start: int, end: int):
        super().__init__(f"{topic}@{broker}@{queue_id}:{start}-{end}")
        self.topic = topic
        self.broker = broker
        self.queue_id = queue_id
        self.addr = addr
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"QueueRange({self.topic}@{self.broker}@{self.queue_id} [{self.start}, {self.end}))"


def _plan(
    queues: Sequence[QueueInfo],
    start: Mapping[str, Any],
    end: Mapping[str, Any],
    min_partitions: int | None = None,
) -> list[QueueRange]:
    ranges: list[tuple[str, int, int]] = []
    for key in sorted(end):
        if key not in start:
            continue  # a queue that just appeared: this batch only records its start
        s, e = int(start[key]), int(end[key])
        if e < s:
            # Its offsets went backwards (failOnDataLoss=false): the new queue from its start.
            s = 0
        if e <= s:
            continue
        ranges.append((key, s, e))
    if min_partitions is not None:
        ranges = split_ranges(ranges, min_partitions)
    addrs = {str(q.key): q.addr for q in queues}
    out = []
    for key, s, e in ranges:
        qk = parse_offset_key(key)
        addr = addrs.get(key)
        if addr is None:
            raise ConfigError(
                f"queue {key} has offsets to read but is no longer in the topic's route"
            )
        out.append(QueueRange(qk.topic, qk.broker, qk.queue_id, addr, s, e))
    return out


def _read_range(options: SourceOptions, partition: QueueRange) -> Iterator[Any]:
    """Pull a partition's range and yield Arrow record batches (runs on an executor)."""
    from rmqk.plugins.spark.offsets import QueueKey

    info = QueueInfo(
        QueueKey(partition.topic, partition.broker, partition.queue_id), partition.addr
    )
    with asyncio.Runner() as runner:
        reader = options.reader()
        runner.run(reader.__aenter__())
        try:
            pulls = reader.pull_range(
                info,
                partition.start,
                partition.end,
                options.subscription(partition.topic),
                fail_on_data_loss=options.fail_on_data_loss,
            )
            pending: list[Any] = []
            count = 0
            while True:
                try:
                    msgs: list[Any] = runner.run(anext(pulls))  # type: ignore[arg-type]
                except StopAsyncIteration:
                    break
                pending.extend(msgs)
                count += len(msgs)
                if count >= ARROW_BATCH_ROWS:
                    yield messages_to_arrow([(None, pending)])
                    pending, count = [], 0
            if pending:
                yield messages_to_arrow([(None, pending)])
        finally:
            runner.run(reader.__aexit__(None, None, None))


class _Driver:
    """The driver side's broker access: one event loop and client, made on first use."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._runner: asyncio.Runner | None = None
        self._reader: BrokerReader | None = None
        self.queues: list[QueueInfo] = []
        self._checked = False

    def __getstate__(self) -> dict[str, Any]:
        # Loops, sockets and locks do not pickle; the copy makes its own on first use.
        return {
            "options": self.options,
            "_runner": None,
            "_reader": None,
            "queues": [],
            "_checked": self._checked,
        }

    def run(self, make: Any) -> Any:
        if self._runner is None:
            self._runner = asyncio.Runner()
        if self._reader is None:
            reader = self.options.reader()
            self._runner.run(reader.__aenter__())
            self._reader = reader
        try:
            return self._runner.run(make(self._reader))
        except Exception:
            self.close()  # reconnect next time
            raise

    def refresh_queues(self) -> list[QueueInfo]:
        self.queues = self.run(lambda r: r.queues(self.options.topics))
        if self.options.expression_type != "TAG" and not self._checked:
            # Ask a broker once, on the driver, as a consumer does at start: a refusal
            # (a syntax error, a broker without enablePropertyFilter) fails the query
            # here with the broker's reason; a pull alone with an expression the broker
            # cannot parse is logged there and answered anyway.
            for topic in self.options.topics:
                sub = self.options.subscription(topic)
                self.run(lambda r, sub=sub: r.check_subscription(sub))
            self._checked = True
        return self.queues

    def close(self) -> None:
        runner, reader = self._runner, self._reader
        self._runner = self._reader = None
        if runner is not None:
            try:
                if reader is not None:
                    runner.run(reader.__aexit__(None, None, None))
            finally:
                runner.close()


class RocketMQStreamReader(DataSourceStreamReader, *_MIXINS):  # type: ignore[misc]
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.driver = _Driver(options)
        self._latest: dict[str, int] | None = None
        self._last_end: dict[str, int] | None = None
        self._target: dict[str, int] | None = None
        # Queues read afresh because their offsets went backwards (failOnDataLoss=false).
        self.offsets_resets = 0

    def initialOffset(self) -> dict[str, int]:
        queues = self.driver.refresh_queues()
        offsets: dict[str, int] = self.driver.run(
            lambda r: r.resolve(self.options.starting, queues)
        )
        log.info("rocketmq source starts at %s (%s)", offsets, self.options.starting.describe())
        # PySpark 4.0/4.1 then asks latestOffset() without a start: this is it.
        self._last_end = dict(offsets)
        return offsets

    def _available(self) -> dict[str, int]:
        queues = self.driver.refresh_queues()
        latest: dict[str, int] = self.driver.run(lambda r: r.max_offsets(queues))
        self._latest = latest
        return latest

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, int]:
        latest = self._available()
        target = self._target if self._target is not None else latest
        if start is None:  # PySpark 4.0/4.1
            start = self._last_end
        if start is None:
            end = dict(target)
        else:
            begin = {k: int(v) for k, v in start.items()}
            new_queues = [k for k in target if k not in begin]
            end = {k: max(int(target.get(k, v)), v) for k, v in begin.items()}
            if new_queues:
                # A queue that appeared since: record where it starts; the next batch reads it.
                firsts = self.driver.run(
                    lambda r: r.resolve(
                        OffsetSpec("earliest"),
                        [q for q in self.driver.queues if str(q.key) in new_queues],
                    )
                )
                end.update(firsts)
            max_rows = self._max_rows(limit)
            if max_rows is not None:
                end = cap_offsets(begin, end, max_rows)
            end.update(self._gone_backwards(begin, latest))
        self._last_end = end
        return end

    def _gone_backwards(
        self, begin: Mapping[str, int], latest: Mapping[str, int]
    ) -> dict[str, int]:
        """Queues whose max offset is below the checkpoint's: fail, or their new end.

        With failOnDataLoss=false the end is the queue's new max offset, below the
        start: :func:`_plan` reads such a queue from offset 0.
        """
        ends: dict[str, int] = {}
        for key, recorded in sorted(begin.items()):
            current = latest.get(key)
            if current is None or current >= recorded:
                continue
            qk = parse_offset_key(key)
            message = (
                f"the offsets of topic {qk.topic}, broker {qk.broker}, queue {qk.queue_id} went "
                f"backwards: the checkpoint recorded offset {recorded}, the queue's max offset "
                f"on the broker is now {current} (a broker rebuilt with an empty store, or the "
                "topic deleted and created again)"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    message + "; its new messages would be skipped. Set failOnDataLoss=false "
                    "to read the queue afresh from its first offset"
                )
            log.warning("%s; failOnDataLoss=false: reading the queue afresh from offset 0", message)
            self.offsets_resets += 1
            ends[key] = current
        return ends

    def _max_rows(self, limit: Any) -> int | None:
        if limit is None:
            return self.options.max_messages_per_trigger
        if _ReadMaxRows is not None and isinstance(limit, _ReadMaxRows):
            return int(limit.max_rows)
        return None

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_messages_per_trigger is not None and _ReadMaxRows is not None:
            return _ReadMaxRows(self.options.max_messages_per_trigger)
        if _ReadAllAvailable is not None:
            return _ReadAllAvailable()
        return super().getDefaultReadLimit()

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[QueueRange]:
        self._last_end = {k: int(v) for k, v in end.items()}
        queues = self.driver.queues or self.driver.refresh_queues()
        if any(k not in {str(q.key) for q in queues} for k in end):
            queues = self.driver.refresh_queues()
        return _plan(queues, start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange), partition
        return _read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("rocketmq source: Spark has processed up to %s", end)

    def stop(self) -> None:
        self.driver.close()


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[QueueRange]:
        driver = _Driver(self.options)
        try:
            queues = driver.refresh_queues()
            start = driver.run(lambda r: r.resolve(self.options.starting, queues))
            end = driver.run(lambda r: r.resolve(self.options.ending, queues))
        finally:
            driver.close()
        return _plan(queues, start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange), partition
        return _read_range(self.options, partition)


class RocketMQDataSource(DataSource):
    """The ``rocketmq`` format: rows with the Spark sink's columns."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> Any:
        return spark_schema()

    def _check_schema(self, schema: Any) -> None:
        expected = spark_schema()
        if schema is not None and schema != expected:
            raise ConfigError(
                "the rocketmq source has a fixed schema; do not pass .schema(...): "
                f"{expected.simpleString()}"
            )

    def reader(self, schema: Any) -> RocketMQBatchReader:
        self._check_schema(schema)
        return RocketMQBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> RocketMQStreamReader:
        self._check_schema(schema)
        return RocketMQStreamReader(SourceOptions.parse(self.options, streaming=True))


def register(spark: Any) -> None:
    """Make ``format("rocketmq")`` available on ``spark`` (once per session is enough)."""
    spark.dataSource.register(RocketMQDataSource)
