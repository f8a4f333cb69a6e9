"""Fuzzing the config loader: whatever the file holds, the only error is ConfigError.

``rmqk.app.config.load_config`` reads user files. Random bytes, broken TOML, valid
TOML of the wrong shape and near-miss consumer tables must each give a Config or
a ConfigError that names the file, never another exception, never a hang.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_codec_fuzz import mutated

from rmqk.app.config import Config, load_config
from rmqk.model.errors import ConfigError
from rmqk.options import OPTIONS_BY_NAME

pytestmark = pytest.mark.timeout(180)

FUZZ = settings(
    max_examples=150,
    deadline=3000,  # milliseconds: a hang shows up as a failure, not a stuck run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SAMPLES = [p.read_bytes() for p in sorted(EXAMPLES.glob("*.toml"))] or [
    b'[consumers.a]\ngroup = "g"\nnamesrv_addr = "127.0.0.1:9876"\nsubscription = { T = "*" }\n'
]

_dir = tempfile.TemporaryDirectory(prefix="rmqk-fuzz-config-")
_names = (Path(_dir.name) / f"c{i}.toml" for i in itertools.count())


def write(data: bytes) -> Path:
    path = next(_names)
    path.write_bytes(data)
    return path


def load_or_config_error(data: bytes) -> None:
    path = write(data)
    try:
        config = load_config(path)
    except ConfigError as exc:
        assert exc.problems
        assert str(path) in str(exc), str(exc)
    else:
        assert isinstance(config, Config)
        for spec in config.consumers:
            assert spec.group and spec.subscriptions
    finally:
        path.unlink()


# -- TOML text from values ----------------------------------------------------------


def toml_key(key: str) -> str:
    return (
        key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else toml_str(key)
    )


def toml_str(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def toml_document(tables: Mapping[str, Mapping[str, Any]]) -> Iterator[str]:
    for name, table in tables.items():
        yield f"[consumers.{toml_key(name)}]"
        for key, value in table.items():
            yield f"{toml_key(key)} = {toml_value(value)}"


keys = st.text(st.characters(min_codepoint=33, max_codepoint=0x24F), min_size=1, max_size=12)
scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        ["AVG", "CLUSTERING", "BROADCASTING", "orderly", "concurrent", "*", "TagA || TagB"]
    )
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
option_names = st.sampled_from(sorted(OPTIONS_BY_NAME))
consumer_tables = st.dictionaries(
    st.sampled_from(["group", "namesrv_addr", "subscription", "sink", "sink_options"])
    | option_names
    | keys,
    values,
    max_size=8,
)
near_miss = st.fixed_dictionaries(
    {
        "group": st.sampled_from(["g", "bad group!", "", "%RETRY%x"]) | st.text(max_size=10),
        "namesrv_addr": st.sampled_from(["127.0.0.1:9876", "", "h:0", "nohost"]),
        "subscription": st.dictionaries(
            keys, st.sampled_from(["*", "a || b", "", "||"]) | values, max_size=3
        )
        | values,
    },
    optional={
        name: values
        for name in (
            "pull_batch_size",
            "consume_thread_max",
            "message_model",
            "sink",
            "sink_options",
        )
    },
)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    load_or_config_error(data)


@FUZZ
@given(mutated(SAMPLES))
def test_mutated_examples(data: bytes) -> None:
    load_or_config_error(data)


@FUZZ
@given(st.dictionaries(keys, consumer_tables | near_miss, min_size=1, max_size=3))
def test_generated_documents(tables: dict[str, dict[str, Any]]) -> None:
    load_or_config_error("\n".join(toml_document(tables)).encode())


@FUZZ
@given(st.dictionaries(keys, values, max_size=5))
def test_wrong_top_level_shapes(top: dict[str, Any]) -> None:
    text = "\n".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in top.items())
    load_or_config_error(text.encode())


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path)  # a directory


# -- the broker's ACL file ----------------------------------------------------------

ACL_SAMPLE = b"""globalWhiteRemoteAddresses = ["10.10.103.*", "192.168.0.{1,2}"]

[[accounts]]
accessKey = "RocketMQ"
secretKey = "12345678"
whiteRemoteAddress = "192.168.1.1-9"
admin = false
defaultTopicPerm = "DENY"
defaultGroupPerm = "SUB"
topicPerms = ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
groupPerms = ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]
"""


def load_acl_or_config_error(data: bytes, suffix: str) -> None:
    from rmqk.plugins.broker.acl import AclConfig, load_acl_config

    path = next(_names).with_suffix(suffix)
    path.write_bytes(data)
    try:
        config = load_acl_config(path)
    except ConfigError as exc:
        assert exc.problems
        assert str(path) in str(exc)
        assert "12345678" not in str(exc)  # the sample's secret never shows
    else:
        assert isinstance(config, AclConfig)
    finally:
        path.unlink()


@FUZZ
@given(st.one_of(st.binary(max_size=200), mutated([ACL_SAMPLE])))
def test_acl_file_toml(data: bytes) -> None:
    load_acl_or_config_error(data, ".toml")


acl_values = values | st.lists(st.sampled_from(["a=PUB", "b=SUB|PUB", "c=DENY", "=", "x"]))
acl_accounts = st.dictionaries(
    st.sampled_from(
        ["accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
         "defaultGroupPerm", "topicPerms", "groupPerms"]
    )
    | keys,
    acl_values | st.sampled_from(["1.2.3.*", "1.2.3.4-9", "1.2.3.{4,5}", "*", "::1", "1.2.3.x"]),
    max_size=8,
)  # fmt: skip


@FUZZ
@given(
    st.one_of(
        st.fixed_dictionaries({"accounts": st.lists(acl_accounts, max_size=3)}),
        st.dictionaries(keys, values, max_size=3),
        values,
    )
)
def test_acl_file_json_shapes(document: Any) -> None:
    import json

    load_acl_or_config_error(json.dumps(document).encode(), ".json")
