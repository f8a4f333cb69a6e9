"""Config files composing consumers, the option table, and ``rmqk check``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pluggy
import pytest

from rmqk.app.cli import main
from rmqk.app.config import (
    COMPOSITION_KEYS,
    REQUIRED_KEYS,
    Config,
    ConsumerSpec,
    announce_config,
    describe_config,
    load_config,
)
from rmqk.model import ConsumeFromWhere, ExpressionType, MessageModel, build_subscription
from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.options import (
    OPTIONS,
    OPTIONS_BY_NAME,
    ConsumerOptions,
    OptionType,
    PluginChoice,
    Where,
    check_group,
    default_consume_timestamp,
    plugin_choices,
    validate_options,
)
from rmqk.pluginmanager import get_plugin_manager, registries, reset_plugin_manager
from rmqk.spi.hookspecs import hookimpl

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "config"
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


def problems_of(path: Path, *, check_plugins: bool = False) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as info:
        load_config(path, check_plugins=check_plugins)
    return info.value.problems


def only_problem(path: Path) -> ConfigProblem:
    problems = problems_of(path)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def fake_factory(*args: Any, **kwargs: Any) -> object:
    """A plugin factory that takes any options: `rmqk check` builds what it names."""
    return object()


class FakePlugins:
    """Registers one name of every kind, so plugin-name checks are deterministic."""

    @hookimpl
    def rmqk_register_allocation_strategies(self, register: Any) -> None:
        register("AVG", fake_factory)
        register("AVG_BY_CIRCLE", fake_factory)

    @hookimpl
    def rmqk_register_offset_stores(self, register: Any) -> None:
        register("remote-broker", fake_factory)
        register("local-file", fake_factory)

    @hookimpl
    def rmqk_register_transports(self, register: Any) -> None:
        register("tcp", fake_factory)

    @hookimpl
    def rmqk_register_consume_services(self, register: Any) -> None:
        register("concurrent", fake_factory)

    @hookimpl
    def rmqk_register_sinks(self, register: Any) -> None:
        register("jsonl", fake_factory)
        register("spark", fake_factory)


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[pluggy.PluginManager]:
    """A plugin manager holding only FakePlugins (no entry points)."""
    monkeypatch.setenv("RMQK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("RMQK_LOAD_PLUGINS", raising=False)
    reset_plugin_manager()
    pm = get_plugin_manager()
    pm.register(FakePlugins(), name="fake")
    yield pm
    reset_plugin_manager()


# -- one kind of mistake per file ------------------------------------------------

# (file, table, key, fragments the message must contain: what is wrong and what is allowed)
MISTAKES = [
    ("unknown-key.toml", "consumers.orders", "consume_thread_maxx",
     ["unknown key", "did you mean 'consume_thread_max'"]),
    ("unknown-key-no-match.toml", "consumers.orders", "colour",
     ["unknown key", "allowed keys:", "consume_thread_max", "pull_batch_size", "sink_options"]),
    ("wrong-type.toml", "consumers.orders", "pull_batch_size",
     ["must be an integer", 'string "32"']),
    ("bool-for-int.toml", "consumers.orders", "consume_thread_max",
     ["must be an integer", "boolean true"]),
    ("out-of-range.toml", "consumers.orders", "consume_thread_max",
     ["consume_thread_max Out of range [1, 1000]", "got 1001"]),
    ("topic-threshold.toml", "consumers.orders", "pull_threshold_for_topic",
     ["pull_threshold_for_topic Out of range [1, 6553500]", "-1 (no limit)", "got 0"]),
    ("bad-enum.toml", "consumers.orders", "consume_from_where",
     ["'CONSUME_FROM_MIDDLE' is not allowed",
      "allowed: CONSUME_FROM_LAST_OFFSET, CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_TIMESTAMP"]),
    ("bad-tag-expression.toml", "consumers.orders", "subscription.Orders",
     ["single '|'", "separated by '||'"]),
    ("empty-tag-expression.toml", "consumers.orders", "subscription.Orders",
     ["names no tag", '"*"', "TagA || TagB"]),
    ("bad-expression-type.toml", "consumers.orders", "subscription.Orders.type",
     ['"SQL" is not an expression type', "allowed: TAG, SQL92"]),
    ("bad-topic.toml", "consumers.orders", 'subscription."Orders.EU"',
     ["topic[Orders.EU] contains illegal characters", "^[%|a-zA-Z0-9_-]+$"]),
    ("default-group.toml", "consumers.orders", "group",
     ["can not equal DEFAULT_CONSUMER", "specify another one"]),
    ("bad-group-chars.toml", "consumers.orders", "group",
     ["group[order analytics] contains illegal characters", "^[%|a-zA-Z0-9_-]+$"]),
    ("bad-timestamp.toml", "consumers.orders", "consume_timestamp",
     ["consume_timestamp is invalid", "yyyyMMddHHmmss", "'2024-01-31 12:00:00'"]),
    ("impossible-timestamp.toml", "consumers.orders", "consume_timestamp",
     ["consume_timestamp is invalid", "yyyyMMddHHmmss", "'20241341000000'"]),
    ("thread-min-above-max.toml", "consumers.orders", "consume_thread_min",
     ["consume_thread_min (30) is larger than consume_thread_max (20)"]),
    ("bad-namesrv.toml", "consumers.orders", "namesrv_addr",
     ["'localhost' is not host:port", "[1, 65535]"]),
    ("sink-options-without-sink.toml", "consumers.orders", "sink_options",
     ["no sink is chosen", 'sink = "<name>"']),
    ("options-not-a-table.toml", "consumers.orders", "allocate_options",
     ["must be a table", 'string "machine_room=a"']),
    ("no-consumers.toml", "", "consumers",
     ["no consumers", "[consumers.<name>]", "the file has [consumer]: did you mean [consumers]?"]),
    ("top-level-option.toml", "", "pull_batch_size",
     ["top-level keys must be tables", "belong in a [consumers.<name>] table"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "table", "key", "fragments"), MISTAKES, ids=[m[0] for m in MISTAKES]
)
def test_each_mistake_names_file_table_key_and_what_is_allowed(
    name: str, table: str, key: str, fragments: list[str]
) -> None:
    path = DATA / name
    problem = only_problem(path)
    assert problem.path == str(path)
    assert problem.table == table
    assert problem.key == key
    for fragment in fragments:
        assert fragment in problem.message
    text = str(problem)
    assert text.startswith(f"{path}: ")
    assert (f"[{table}] {key}:" if table else f"top level {key}:") in text


def test_invalid_toml_reports_line_and_column_with_the_path() -> None:
    path = DATA / "invalid-toml.toml"
    problem = only_problem(path)
    assert problem.path == str(path)
    assert "invalid TOML" in problem.message
    assert "line 3" in problem.message and "column" in problem.message


def test_missing_required_keys_are_each_reported() -> None:
    problems = problems_of(DATA / "missing-required.toml")
    assert [(p.table, p.key) for p in problems] == [
        ("consumers.orders", "group"),
        ("consumers.orders", "namesrv_addr"),
        ("consumers.orders", "subscription"),
    ]
    assert all("required key is missing" in p.message for p in problems)
    assert 'e.g. namesrv_addr = "127.0.0.1:9876"' in problems[1].message


def test_duplicate_group_names_the_other_consumer() -> None:
    problem = only_problem(DATA / "duplicate-group.toml")
    assert (problem.table, problem.key) == ("consumers.refunds", "group")
    assert "'order-analytics' is already used by [consumers.orders]" in problem.message


def test_the_same_group_in_different_namespaces_is_allowed(tmp_path: Path) -> None:
    text = (DATA / "duplicate-group.toml").read_text()
    text = text.replace("[consumers.refunds]\n", '[consumers.refunds]\nnamespace = "eu"\n')
    path = tmp_path / "ns.toml"
    path.write_text(text)
    config = load_config(path, check_plugins=False)
    assert [c.options.namespace for c in config.consumers] == [None, "eu"]


def test_long_group_is_rejected_with_java_limit() -> None:
    assert check_group("g" * 255) is None
    message = check_group("g" * 256)
    assert message is not None and "longer than group max length 255" in message
    assert check_group("%RETRY%ns|g_1-2") is None


def test_sql92_expression_must_not_be_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[consumers.a]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { T = { expression = "  ", type = "SQL92" }, '
        'U = { type = "TAG", expr = "*" } }\n'
    )
    problems = problems_of(path)
    by_key = {p.key: p.message for p in problems}
    assert "must not be empty" in by_key["subscription.T"]
    assert "did you mean 'expression'" in by_key["subscription.U.expr"]
    assert "the expression is missing" in by_key["subscription.U.expression"]


def test_several_mistakes_are_reported_together_in_file_order() -> None:
    path = DATA / "many-mistakes.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path, check_plugins=False)
    problems = info.value.problems
    assert [(p.table, p.key) for p in problems] == [
        ("consumers.orders", "message_model"),
        ("consumers.orders", "pull_batch_size"),
        ("consumers.refunds", "namesrv_addr"),
        ("consumers.refunds", "pull_intervall"),
        ("consumers.refunds", "consume_timestamp"),
    ]
    text = str(info.value)
    assert text.startswith("5 problems in config:")
    assert "did you mean 'CLUSTERING'" in text
    assert "pull_batch_size Out of range [1, 1024], got 0" in text
    assert "did you mean 'pull_interval'" in text
    assert all(line.strip().startswith(f"{path}: [consumers.") for line in text.splitlines()[1:])


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    problem = problems_of(missing)[0]
    assert problem.path == str(missing) and "cannot read the file" in problem.message
    latin = tmp_path / "latin1.toml"
    latin.write_bytes(b'[consumers.a]\ngroup = "caf\xe9"\n')
    problem = problems_of(latin)[0]
    assert "not UTF-8" in problem.message


# -- plugin names ------------------------------------------------------------------


def test_unknown_plugin_names_list_the_registered_ones(
    fake_plugins: pluggy.PluginManager,
) -> None:
    problems = problems_of(DATA / "unknown-plugin.toml", check_plugins=True)
    by_key = {p.key: p.message for p in problems}
    assert set(by_key) == {"allocate_message_queue_strategy", "sink"}
    assert "unknown allocation strategy 'AVERAGE'" in by_key["allocate_message_queue_strategy"]
    assert "registered: AVG, AVG_BY_CIRCLE" in by_key["allocate_message_queue_strategy"]
    assert "unknown sink 'parquet'" in by_key["sink"]
    assert "registered: jsonl, spark" in by_key["sink"]
    # Without the plugin check, the same file is well formed.
    assert load_config(DATA / "unknown-plugin.toml", check_plugins=False).consumers


def test_a_default_plugin_that_is_not_installed_is_reported_as_the_default(
    fake_plugins: pluggy.PluginManager, tmp_path: Path
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[consumers.a]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { T = "*" }\nconsume_service = "orderly"\n'
        'message_model = "BROADCASTING"\n'
    )
    config = load_config(path, check_plugins=False)
    assert config.consumers[0].offset_store == "local-file"
    problem = problems_of(path, check_plugins=True)
    assert [(p.key, p.message) for p in problem] == [
        ("consume_service", "unknown consume service 'orderly'; registered: concurrent")
    ]


def test_plugin_names_are_checked_by_default(
    fake_plugins: pluggy.PluginManager, tmp_path: Path
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[consumers.a]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { T = "*" }\ntransport = "quic"\n'
    )
    with pytest.raises(ConfigError, match=r"unknown transport 'quic'; registered: tcp"):
        load_config(path)


# -- valid files -----------------------------------------------------------------


def test_plugin_tables_and_resolved_values() -> None:
    config = load_config(DATA / "plugin-tables.toml", check_plugins=False)
    assert isinstance(config, Config)
    (spec,) = config.consumers
    assert isinstance(spec, ConsumerSpec)
    assert spec.name == "orders" and spec.table == "consumers.orders"
    assert spec.group == "order-analytics"
    assert spec.namesrv_addrs == ("127.0.0.1:9876", "127.0.0.2:9876")
    assert spec.subscriptions == (
        build_subscription("Orders", "TagA || TagB", sub_version=spec.subscriptions[0].sub_version),
    )
    assert spec.subscriptions[0].tags_set == {"TagA", "TagB"}
    assert spec.message_model is MessageModel.CLUSTERING
    assert spec.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert spec.allocate_message_queue_strategy == "AVG"
    assert spec.offset_store == "remote-broker"
    assert spec.transport == "tcp" and spec.consume_service == "concurrent"
    assert spec.transport_options == {"client_close_socket_if_timeout": False}
    assert spec.sink == "jsonl"
    assert spec.sink_options == {"path": "out/orders.jsonl", "fsync": True}
    assert spec.options.consume_thread_max == 64
    assert spec.options.consume_thread_min == 20
    assert spec.from_file == {
        "group", "namesrv_addr", "subscription", "consume_thread_max", "sink", "sink_options",
        "transport_options",
    }  # fmt: skip
    # Read-only: neither the plugin tables nor the document can be changed.
    with pytest.raises(TypeError):
        spec.sink_options["path"] = "elsewhere"  # type: ignore[index]
    assert config.document["metrics"]["port"] == 9100
    assert config.document["metrics"]["labels"] == ({"name": "team"},)
    with pytest.raises(TypeError):
        config.document["metrics"]["port"] = 1
    assert config.consumer("orders") is spec
    with pytest.raises(KeyError, match="has no consumer 'refunds'; it has: orders"):
        config.consumer("refunds")


def test_sql92_subscription() -> None:
    config = load_config(ROOT / "examples" / "broadcast-jsonl.toml", check_plugins=False)
    (sub,) = config.consumers[0].subscriptions
    assert sub.expression_type is ExpressionType.SQL92
    assert sub.sub_string == "amount > 1000"
    assert config.consumers[0].message_model is MessageModel.BROADCASTING


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_examples_are_well_formed(path: Path) -> None:
    config = load_config(path, check_plugins=False)
    assert config.consumers
    for spec in config.consumers:
        assert spec.subscriptions and spec.namesrv_addrs


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_examples_pass_rmqk_check(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Names are always checked against the installed plugins; a plugin that is
    # not written yet skips the example, naming it, rather than weakening the check.
    config = load_config(path, check_plugins=False)
    regs = registries()
    choices = [c for spec in config.consumers for c in plugin_choices(spec.options)]
    choices += [PluginChoice("sink", s.sink, "sink") for s in config.consumers if s.sink]
    missing = sorted(
        {f"{c.kind} {c.name!r}" for c in choices if c.name not in regs.by_kind(c.kind)}
    )
    if missing:
        pytest.skip(f"{path.name} needs plugins that are not installed yet: {', '.join(missing)}")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: OK" in out


class ExamplePlugins:
    """The plugin names the shipped examples use, as the default plugins will register them."""

    @hookimpl
    def rmqk_register_allocation_strategies(self, register: Any) -> None:
        for name in ("AVG", "AVG_BY_CIRCLE"):
            register(name, fake_factory)

    @hookimpl
    def rmqk_register_offset_stores(self, register: Any) -> None:
        for name in ("remote-broker", "local-file"):
            register(name, fake_factory)

    @hookimpl
    def rmqk_register_transports(self, register: Any) -> None:
        register("tcp", fake_factory)

    @hookimpl
    def rmqk_register_consume_services(self, register: Any) -> None:
        for name in ("concurrent", "orderly"):
            register(name, fake_factory)

    @hookimpl
    def rmqk_register_sinks(self, register: Any) -> None:
        for name in ("spark", "jsonl", "python"):
            register(name, fake_factory)


def test_rmqk_check_passes_all_examples_once_their_plugins_exist(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RMQK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("RMQK_LOAD_PLUGINS", raising=False)
    reset_plugin_manager()
    try:
        get_plugin_manager().register(ExamplePlugins(), name="examples")
        assert main(["check", *map(str, EXAMPLES)]) == 0
    finally:
        reset_plugin_manager()
    captured = capsys.readouterr()
    assert captured.err == ""
    for path in EXAMPLES:
        assert f"# {path}: OK" in captured.out


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {"demo.toml"}
    demo = load_config(ROOT / "examples" / "demo.toml", check_plugins=False)
    assert demo.consumers[0].sink == "spark"
    assert demo.consumers[0].sink_options["format"] == "parquet"


# -- rmqk check ------------------------------------------------------------------


def test_rmqk_check_prints_every_option_and_its_source(
    fake_plugins: pluggy.PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / "plugin-tables.toml"
    assert main(["check", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert f"{path}: OK, 1 consumer" in out
    assert "[consumers.orders]" in out
    lines = {line.split(" = ")[0].lstrip("# ").split(" ")[0]: line for line in out.splitlines()}
    for option in OPTIONS:
        assert option.name in lines, option.name
    assert lines["consume_thread_max"].endswith("# file")
    assert "= 64" in lines["consume_thread_max"]
    assert lines["consume_thread_min"].endswith("# default")
    assert "= 20" in lines["consume_thread_min"]
    assert lines["offset_store"].endswith("# default for CLUSTERING")
    assert 'subscription = { Orders = "TagA || TagB" }' in lines["subscription"]


def test_rmqk_check_json(
    fake_plugins: pluggy.PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--json", str(DATA / "plugin-tables.toml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    (consumer,) = doc["consumers"]
    assert consumer["group"] == "order-analytics"
    assert consumer["subscriptions"] == [
        {"topic": "Orders", "expression": "TagA || TagB", "type": "TAG", "tags": ["TagA", "TagB"]}
    ]
    options = consumer["options"]
    assert options["consume_thread_max"] == {"value": 64, "source": "file"}
    assert options["pull_batch_size"] == {"value": 32, "source": "default"}
    assert options["message_model"] == {"value": "CLUSTERING", "source": "default"}
    assert options["sink_options"]["value"] == {"path": "out/orders.jsonl", "fsync": True}
    assert set(options) >= {o.name for o in OPTIONS}


def test_rmqk_check_fails_with_every_message_on_stderr(
    fake_plugins: pluggy.PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = DATA / "many-mistakes.toml"
    assert main(["check", str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    # The file's five mistakes, and what `rmqk run` would refuse next in the same tables:
    # neither names a sink (issue 26: check no longer stops at the keys of a table).
    assert err.startswith("rmqk: error: 7 problems in config:\n")
    assert f"{bad}: [consumers.orders] sink: required key is missing" in err
    assert f"{bad}: [consumers.refunds] sink: required key is missing" in err
    assert f"{bad}: [consumers.orders] message_model: 'clustering' is not allowed" in err
    assert f"{bad}: [consumers.orders] pull_batch_size: pull_batch_size Out of range" in err
    assert f"{bad}: [consumers.refunds] namesrv_addr: required key is missing" in err
    assert f"{bad}: [consumers.refunds] pull_intervall: unknown key" in err
    assert f"{bad}: [consumers.refunds] consume_timestamp: consume_timestamp is invalid" in err
    assert "Traceback" not in err


def test_rmqk_check_reports_bad_and_good_files(
    fake_plugins: pluggy.PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["check", str(DATA / "invalid-toml.toml"), str(DATA / "plugin-tables.toml")])
    assert status == 1
    captured = capsys.readouterr()
    assert "invalid TOML" in captured.err and "line 3" in captured.err
    assert "plugin-tables.toml: OK" in captured.out


# -- the option table --------------------------------------------------------------

# DefaultMQPushConsumer and ClientConfig of Apache RocketMQ 4.9.8.
JAVA_DEFAULTS = {
    "consume_thread_min": 20,
    "consume_thread_max": 20,
    "adjust_thread_pool_nums_threshold": 100_000,
    "consume_concurrently_max_span": 2000,
    "pull_threshold_for_queue": 1000,
    "pull_threshold_size_for_queue": 100,
    "pull_threshold_for_topic": -1,
    "pull_threshold_size_for_topic": -1,
    "pull_interval": 0,
    "consume_message_batch_max_size": 1,
    "pull_batch_size": 32,
    "post_subscription_when_pull": False,
    "unit_mode": False,
    "max_reconsume_times": -1,
    "suspend_current_queue_time_millis": 1000,
    "consume_timeout": 15,
    "await_termination_millis_when_shutdown": 0,
    "poll_name_server_interval": 30_000,
    "heartbeat_broker_interval": 30_000,
    "persist_consumer_offset_interval": 5_000,
    "pull_time_delay_mills_when_exception": 1_000,
    "mq_client_api_timeout": 3_000,
    "instance_name": "DEFAULT",
    "vip_channel_enabled": False,
    "use_tls": False,
    "message_model": MessageModel.CLUSTERING,
    "consume_from_where": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    "allocate_message_queue_strategy": "AVG",
}

# checkConfig's ranges.
JAVA_RANGES = {
    "consume_thread_min": (1, 1000),
    "consume_thread_max": (1, 1000),
    "consume_concurrently_max_span": (1, 65535),
    "pull_threshold_for_queue": (1, 65535),
    "pull_threshold_for_topic": (1, 6_553_500),
    "pull_threshold_size_for_queue": (1, 1024),
    "pull_threshold_size_for_topic": (1, 102_400),
    "pull_interval": (0, 65535),
    "consume_message_batch_max_size": (1, 1024),
    "pull_batch_size": (1, 1024),
}


def test_defaults_are_java_4_9_8() -> None:
    options = ConsumerOptions()
    for name, value in JAVA_DEFAULTS.items():
        assert getattr(options, name) == value, name
        assert OPTIONS_BY_NAME[name].default == value, name


def test_java_checked_ranges() -> None:
    checked = {o.name: (o.minimum, o.maximum) for o in OPTIONS if o.java_checked}
    assert checked == JAVA_RANGES
    for name, (lo, hi) in JAVA_RANGES.items():
        where = Where("<kwargs>", "PushConsumer")
        for good in (lo, hi):
            values = {name: good}
            if name.startswith("consume_thread_"):
                # consume_thread_min may not exceed consume_thread_max.
                values = {"consume_thread_min": good, "consume_thread_max": good}
            _, problems = validate_options(values, where)
            assert not problems, (name, good)
        for bad in (lo - 1, hi + 1):
            if bad in OPTIONS_BY_NAME[name].special:
                continue
            _, problems = validate_options({name: bad}, where)
            assert [p.message for p in problems] == [
                f"{name} Out of range {OPTIONS_BY_NAME[name].range_text}, got {bad}"
            ]


def test_every_option_is_documented_and_typed() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    for option in OPTIONS:
        assert option.doc.endswith("."), option.name
        assert option.default_repr, option.name
        if option.value_type is OptionType.INT:
            assert option.minimum is not None and option.maximum is not None, option.name
        if option.value_type is OptionType.ENUM:
            assert option.choices, option.name
        if option.value_type is OptionType.PLUGIN:
            assert option.plugin_kind in {r.kind for r in registries().all()}, option.name
    assert set(REQUIRED_KEYS) <= {o.name for o in OPTIONS} | {k.name for k in COMPOSITION_KEYS}


def test_validate_options_for_keyword_arguments() -> None:
    where = Where("PushConsumer('g')", "options")
    options, problems = validate_options(
        {
            "message_model": MessageModel.BROADCASTING,
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
            "namesrv_addr": ["127.0.0.1:9876"],
            "allocate_options": {"idc": {"a": ["b"]}},
        },
        where,
    )
    assert problems == []
    assert options.message_model is MessageModel.BROADCASTING
    assert options.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert options.effective_offset_store == "local-file"
    assert options.allocate_options == {"idc": {"a": ("b",)}}

    options, problems = validate_options(
        {"pull_batch_size": 2.5, "consume_thread_max": 0, "batch_size": 3}, where
    )
    assert [(p.path, p.table, p.key) for p in problems] == [
        (where.path, "options", "pull_batch_size"),
        (where.path, "options", "consume_thread_max"),
        (where.path, "options", "batch_size"),
    ]
    assert "must be an integer, got float 2.5" in problems[0].message
    # Rejected values fall back to their defaults, so the object stays usable.
    assert options.pull_batch_size == 32 and options.consume_thread_max == 20


def test_default_consume_timestamp_is_half_an_hour_ago() -> None:
    import time

    now = time.mktime((2024, 1, 31, 12, 0, 0, 0, 0, -1))
    assert default_consume_timestamp(now) == "20240131113000"
    assert len(ConsumerOptions().consume_timestamp) == 14


# -- rmqk_configure ----------------------------------------------------------------


def test_announce_config_reaches_plugins_registered_later(
    fake_plugins: pluggy.PluginManager,
) -> None:
    seen: list[Mapping[str, Any]] = []

    class Reader:
        @hookimpl
        def rmqk_configure(self, config: Mapping[str, Any]) -> None:
            seen.append(config)

    config = load_config(DATA / "plugin-tables.toml", check_plugins=False)
    assert seen == []
    announce_config(config)
    fake_plugins.register(Reader(), name="late-reader")
    assert len(seen) == 1
    assert seen[0]["metrics"]["port"] == 9100
    assert seen[0] is config.document


def test_describe_config_marks_unset_options() -> None:
    config = load_config(DATA / "plugin-tables.toml", check_plugins=False)
    text = describe_config(config, as_json=False)
    assert "# client_ip not set" in text
    assert "the machine's first non-loopback address" in text


def test_announce_config_names_the_file_in_a_plugin_problem(
    fake_plugins: pluggy.PluginManager,
) -> None:
    class Strict:
        @hookimpl
        def rmqk_configure(self, config: Mapping[str, Any]) -> None:
            if "port" in config.get("metrics", {}):
                raise ConfigError([ConfigProblem("<config>", "metrics", "port", "not allowed")])

    fake_plugins.register(Strict(), name="strict")
    config = load_config(DATA / "plugin-tables.toml", check_plugins=False)
    with pytest.raises(ConfigError) as info:
        announce_config(config)
    assert [str(p) for p in info.value.problems] == [
        f"{DATA / 'plugin-tables.toml'}: [metrics] port: not allowed"
    ]
