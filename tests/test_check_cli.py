"""`rmqk check` refuses what `rmqk run` refuses, and prints TOML it accepts back (issue 15)."""

from __future__ import annotations

import asyncio
import json
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from rmqk.app.cli import main
from rmqk.app.config import load_config
from rmqk.app.runtime import ComposedConsumer
from rmqk.model.errors import ClientError
from rmqk.options import OptionSpec, OptionType, PluginChoice, option, plugin_choices
from rmqk.pluginmanager import get_plugin_manager, registries, reset_plugin_manager
from rmqk.spi.hookspecs import hookimpl
from rmqk.spi.options import declared_options

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))

HEAD = '[consumers.orders]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:1"\nsubscription = { T = "*" }\n'


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "consumers.toml"
    path.write_text(HEAD + body)
    return path


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["check", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _skip_without_plugins(path: Path) -> None:
    config = load_config(path, check_plugins=False)
    regs = registries()
    choices = [c for spec in config.consumers for c in plugin_choices(spec.options)]
    choices += [PluginChoice("sink", s.sink, "sink") for s in config.consumers if s.sink]
    missing = sorted({f"{c.kind} {c.name}" for c in choices if c.name not in regs.by_kind(c.kind)})
    if missing:
        pytest.skip(f"{path.name} needs plugins that are not installed: {', '.join(missing)}")


# -- one validation path (#5) ----------------------------------------------------------

REFUSED = [
    ("no-sink", "", "[consumers.orders] sink: required key is missing"),
    (
        "python-function",
        'sink = "python"\nsink_options = { function = "no_such_module_x:f" }\n',
        "[consumers.orders.sink_options] function: python: cannot import module 'no_such_module_x'",
    ),
    (
        # One argument where the sink passes two: found at check, not per batch.
        "python-function-arity",
        'sink = "python"\nsink_options = { function = "textwrap:dedent" }\n',
        "[consumers.orders.sink_options] function: python: "
        "textwrap:dedent(text) cannot be called with (queue, messages)",
    ),
    (
        "sink-options",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl", bodyformat = "text" }\n',
        "[consumers.orders.sink_options] bodyformat: ",
    ),
    (
        "offset-store-options",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
        "offset_store_options = { timeout_ms = 0 }\n",
        "[consumers.orders.offset_store_options] timeout_ms: ",
    ),
    (
        "allocate-options",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
        'allocate_message_queue_strategy = "CONSISTENT_HASH"\n'
        "allocate_options = { virtual_node_count = -3 }\n",
        "[consumers.orders.allocate_options] virtual_node_count: ",
    ),
    (
        "consume-service-options",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
        "consume_service_options = { colour = 1 }\n",
        "[consumers.orders.consume_service_options] colour: ",
    ),
    (
        "transport-options",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\ntransport_options = { bogus = 1 }\n',
        "[consumers.orders.transport_options] bogus: transport 'tcp': unknown option; allowed: "
        "client_close_socket_if_timeout, vip_channel_enabled",
    ),
    (
        "transport-options-near-miss",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
        "transport_options = { vip_chanel_enabled = true }\n",
        "[consumers.orders.transport_options] vip_chanel_enabled: transport 'tcp': unknown option "
        "(did you mean 'vip_channel_enabled'?)",
    ),
    (
        "transport-options-value",
        'sink = "jsonl"\nsink_options = { path = "o.jsonl" }\n'
        'transport_options = { client_close_socket_if_timeout = "no" }\n',
        "[consumers.orders.transport_options] client_close_socket_if_timeout: transport 'tcp': ",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_check_refuses_what_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    path = _write(tmp_path, body)
    status, out, err = _check(capsys, str(path))
    assert status == 1 and out == ""
    assert err.startswith("rmqk: error: "), err
    assert f"{path}: {expected}" in err, err
    assert "Traceback" not in err
    # `rmqk run` stops on the same problem, before it connects anywhere.
    assert main(["run", str(path), "--no-summary"]) == 1
    assert f"{path}: {expected}" in capsys.readouterr().err


def test_check_without_pyspark_refuses_the_spark_sink(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    path = _write(tmp_path, f'sink = "spark"\nsink_options = {{ path = "{tmp_path}/out" }}\n')
    status, _, err = _check(capsys, str(path))
    assert status == 1
    assert f"{path}: [consumers.orders] sink: the spark plugin needs pyspark" in err


def test_check_reports_every_problem_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.toml"
    path.write_text(
        HEAD
        + 'sink = "python"\nsink_options = { function = "no_such_module_y:f" }\n'
        + "offset_store_options = { timeout_ms = 0 }\n\n"
        + '[consumers.refunds]\ngroup = "h"\nnamesrv_addr = "127.0.0.1:1"\n'
        + 'subscription = { R = "*" }\n'
    )
    status, _, err = _check(capsys, str(path))
    assert status == 1
    assert err.startswith("rmqk: error: 3 problems in config:\n"), err
    assert "[consumers.orders.sink_options] function" in err
    assert "[consumers.orders.offset_store_options] timeout_ms" in err
    assert "[consumers.refunds] sink: required key is missing" in err


class _StartFails:
    """A sink whose start fails as a third-party sink's may: not with a ConfigError."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.closed = False

    async def start(self) -> None:
        raise RuntimeError("cannot reach the warehouse")

    async def write(self, queue: Any, messages: Sequence[Any]) -> None:
        raise AssertionError("never started")

    async def close(self) -> None:
        self.closed = True


def _csv_factory(options: Mapping[str, Any]) -> Any:
    # docs/tutorial-sink.md's CsvSink reads its one required option this way.
    return options["path"]


class _Started(_StartFails):
    async def start(self) -> None:
        return None


def _strategy_factory(**options: Any) -> Any:
    return options["every"]  # a third-party factory's own lookup of a required option


class _BrokenSinks:
    @hookimpl
    def rmqk_register_sinks(self, register: Any) -> None:
        register("csv", _csv_factory)
        register("start-fails", _StartFails)
        register("started", _Started)

    @hookimpl
    def rmqk_register_allocation_strategies(self, register: Any) -> None:
        register("needs-every", _strategy_factory)


@pytest.fixture
def broken_sinks() -> Iterator[None]:
    # Registries are built once per manager: a fresh one, so they hold these sinks.
    reset_plugin_manager()
    get_plugin_manager().register(_BrokenSinks(), name="test-broken-sinks")
    try:
        yield
    finally:
        reset_plugin_manager()


def test_a_sink_factory_that_raises_is_named_by_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken_sinks: None
) -> None:
    path = _write(tmp_path, 'sink = "csv"\nsink_options = { file = "out.csv" }\n')
    expected = (
        f"rmqk: error: {path}: [consumers.orders] sink: "
        "the factory of sink \"csv\" raised KeyError: 'path'\n"
    )
    status, out, err = _check(capsys, str(path))
    assert (status, out, err) == (1, "", expected)
    assert main(["run", str(path), "--no-summary"]) == 1
    assert capsys.readouterr().err == expected


def test_any_other_factory_that_raises_is_named_under_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken_sinks: None
) -> None:
    path = _write(
        tmp_path,
        'sink = "started"\nallocate_message_queue_strategy = "needs-every"\n'
        "allocate_options = { evry = 2 }\n",
    )
    status, out, err = _check(capsys, str(path))
    assert (status, out) == (1, "")
    assert f"{path}" in err and "[consumers.orders]" in err, err
    assert "allocate_options" in err and "KeyError: 'every'" in err, err


def test_a_sink_start_that_raises_is_named_by_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken_sinks: None
) -> None:
    path = _write(tmp_path, 'sink = "start-fails"\n')
    assert _check(capsys, str(path))[0] == 0
    # The sink starts before the consumer connects (127.0.0.1:1 is never reached).
    assert main(["run", str(path), "--no-summary"]) == 1
    assert capsys.readouterr().err == (
        f"rmqk: error: {path}: [consumers.orders] sink: "
        'sink "start-fails" failed to start: RuntimeError: cannot reach the warehouse\n'
    )


def test_a_consumer_whose_start_is_refused_closes_its_started_sink(
    tmp_path: Path, broken_sinks: None
) -> None:
    path = _write(tmp_path, 'sink = "started"\n')
    composed = ComposedConsumer(load_config(path).consumers[0], str(path))

    async def refused() -> None:
        raise ClientError("the broker refused the subscription")

    composed.consumer.start = refused  # type: ignore[method-assign]
    with pytest.raises(ClientError):
        asyncio.run(composed.start())
    assert isinstance(composed.sink, _Started) and composed.sink.closed


# -- errors and output (#10) -------------------------------------------------------------


def test_check_error_has_the_documented_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[consumers.orders\n")
    status, _, err = _check(capsys, str(path))
    assert status == 1
    assert err.startswith(f"rmqk: error: {path}: top level: invalid TOML"), err


def _values(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": c["name"],
            "subscriptions": c["subscriptions"],
            "options": {k: v["value"] for k, v in c["options"].items()},
        }
        for c in doc["consumers"]
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_check_output_is_toml_that_check_accepts_back(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skip_without_plugins(path)
    status, text, err = _check(capsys, str(path))
    assert status == 0, err
    written = tmp_path / path.name
    written.write_text(text)
    tomllib.loads(text)  # raises on anything that is not TOML
    status, again, err = _check(capsys, "--json", str(written))
    assert status == 0, err
    status, original, err = _check(capsys, "--json", str(path))
    assert status == 0, err
    first, second = _values(json.loads(original)), _values(json.loads(again))
    # The default start timestamp is "30 minutes ago", now; the output fixes it.
    for a, b in zip(first, second, strict=True):
        a["options"].pop("consume_timestamp")
        b["options"].pop("consume_timestamp")
    assert first == second


async def test_transport_options_from_python_are_refused_as_from_a_file() -> None:
    # No config file, so no preflight: the tcp factory itself refuses what it would not read.
    from rmqk.engine.consumer import AsyncPushConsumer
    from rmqk.engine.producer import AsyncProducer
    from rmqk.model.errors import ConfigError

    consumer = AsyncPushConsumer(
        "g-transport", namesrv_addr="127.0.0.1:1", transport_options={"bogus": 1}
    )
    consumer.subscribe("T")
    consumer.register_listener(lambda msgs: None)
    with pytest.raises(ConfigError, match=r"\[transport_options\] bogus: transport 'tcp': unknown"):
        await consumer.start()
    producer = AsyncProducer(
        "p-transport",
        namesrv_addr="127.0.0.1:1",
        transport_options={"client_close_socket_if_timeout": "no"},
    )
    with pytest.raises(ConfigError, match="client_close_socket_if_timeout"):
        await producer.start()


def test_check_reports_five_mistakes_in_three_tables_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 26: sink and offset store option mistakes used to appear only once every
    # consumer-level problem was fixed, as the first table's problem stopped the check.
    path = tmp_path / "five.toml"
    head = 'namesrv_addr = "127.0.0.1:1"\nsubscription = { T = "*" }\nsink = "jsonl"\n'
    path.write_text(
        f'[consumers.a]\ngroup = "ga"\n{head}pull_batch_size = -5\n'
        'sink_options = { path = "a.jsonl", fsynk = true }\n\n'
        f'[consumers.b]\ngroup = "gb"\n{head}'
        'sink_options = { path = "b.jsonl", body_fromat = "text" }\n\n'
        f'[consumers.c]\ngroup = "gc"\n{head}message_model = "BROADCASTING"\n'
        'sink_options = { path = "c.jsonl", body_format = "xml" }\n'
        'offset_store_options = { direcotry = "d" }\n'
    )
    status, out, err = _check(capsys, str(path))
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        "rmqk: error: 5 problems in config:",
        f"  {path}: [consumers.a] pull_batch_size: pull_batch_size Out of range [1, 1024], got -5",
        f"  {path}: [consumers.a.sink_options] fsynk: jsonl: unknown option "
        "(did you mean 'fsync'?); allowed: path, body_format, on_bad_body, "
        "corrupt_record_column, fsync",
        f"  {path}: [consumers.b.sink_options] body_fromat: jsonl: unknown option "
        "(did you mean 'body_format'?); allowed: path, body_format, on_bad_body, "
        "corrupt_record_column, fsync",
        f"  {path}: [consumers.c.sink_options] body_format: jsonl: must be one of text, "
        "base64, json, got 'xml'",
        f"  {path}: [consumers.c.offset_store_options] direcotry: local-file: unknown option; "
        "allowed: dir, persist_mode",
    ]


def test_check_does_not_repeat_a_plugin_problem_its_table_already_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An unknown sink is said once, not again as a failing factory; the table's other
    # plugins are still checked.
    path = _write(
        tmp_path,
        'sink = "jsonl-typo"\nsink_options = { path = "o.jsonl" }\n'
        "offset_store_options = { timeout_ms = 0 }\n",
    )
    status, _, err = _check(capsys, str(path))
    assert status == 1
    assert err.startswith("rmqk: error: 2 problems in config:\n"), err
    assert f"{path}: [consumers.orders] sink: unknown sink 'jsonl-typo'" in err
    assert f"{path}: [consumers.orders.offset_store_options] timeout_ms: " in err


# -- one contract: declared option specs, checked by the kernel for every kind (issue 26) --


@attrs.frozen
class _UncheckingOptions:
    path: str = option(OptionType.PATH, "The file.", required="the file to write")
    rows: int = option(OptionType.INT, "Rows per file.", 100, minimum=1)


class _Unchecking:
    """A third-party sink that declares its options and never looks at them itself."""

    # As docs/hooks.md says: an options class's declarations as the factory's option_specs.
    option_specs = declared_options(_UncheckingOptions)

    def __init__(self, options: Mapping[str, Any]) -> None:
        pass

    async def start(self) -> None:
        return None

    async def write(self, queue: Any, messages: Sequence[Any]) -> None:
        return None

    async def close(self) -> None:
        return None


def _unchecking_store(context: Any) -> Any:
    raise AssertionError("the kernel refuses the table before building the store")


_unchecking_store.option_specs = (  # type: ignore[attr-defined]
    OptionSpec("ttl_s", OptionType.INT, "Seconds kept.", 60, minimum=1),
)


def _unchecking_strategy(**options: Any) -> Any:
    raise AssertionError("the kernel refuses the table before building the strategy")


_unchecking_strategy.option_specs = ()  # type: ignore[attr-defined]


class _Declaring:
    @hookimpl
    def rmqk_register_sinks(self, register: Any) -> None:
        register("declaring", _Unchecking)

    @hookimpl
    def rmqk_register_offset_stores(self, register: Any) -> None:
        register("declaring-store", _unchecking_store)

    @hookimpl
    def rmqk_register_allocation_strategies(self, register: Any) -> None:
        register("DECLARING", _unchecking_strategy)


@pytest.fixture
def declaring_plugins() -> Iterator[None]:
    reset_plugin_manager()
    get_plugin_manager().register(_Declaring(), name="test-declaring")
    try:
        yield
    finally:
        reset_plugin_manager()


def test_the_kernel_checks_every_kinds_declared_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], declaring_plugins: None
) -> None:
    path = _write(
        tmp_path,
        'sink = "declaring"\nsink_options = { rows = 0, colour = "red" }\n'
        'offset_store = "declaring-store"\noffset_store_options = { ttl = 5 }\n'
        'allocate_message_queue_strategy = "DECLARING"\nallocate_options = { n = 1 }\n',
    )
    expected = [
        "rmqk: error: 5 problems in config:",
        f"  {path}: [consumers.orders.sink_options] rows: declaring: must be an integer >= 1, "
        "got 0",
        f"  {path}: [consumers.orders.sink_options] colour: declaring: unknown option; "
        "allowed: path, rows",
        f"  {path}: [consumers.orders.sink_options] path: declaring: required key is missing: "
        "the file to write",
        f"  {path}: [consumers.orders.allocate_options] n: DECLARING: unknown option; "
        "allowed: no options",
        f"  {path}: [consumers.orders.offset_store_options] ttl: declaring-store: unknown "
        "option (did you mean 'ttl_s'?); allowed: ttl_s",
    ]
    status, out, err = _check(capsys, str(path))
    assert (status, out, err.splitlines()) == (1, "", expected)
    # `rmqk run` refuses the same, before it builds or connects anything.
    assert main(["run", str(path), "--no-summary"]) == 1
    assert capsys.readouterr().err.splitlines() == expected


def test_a_declared_table_that_is_right_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], declaring_plugins: None
) -> None:
    path = _write(tmp_path, 'sink = "declaring"\nsink_options = { path = "o" }\n')
    status, out, err = _check(capsys, str(path))
    assert (status, err) == (0, "")
    assert 'sink = "declaring"' in out
