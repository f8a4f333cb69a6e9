"""The Spark sink's column builder: compiled (_columns.c) against Python, and against an oracle.

The compiled builder is optional: the comparisons skip when it is not built (or
``RMQK_NO_EXTENSIONS=1``). The oracle tests run on whichever builder is active,
so ``tox -e pure`` checks the Python one with them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from rmqk.model import MessageQueue  # noqa: E402
from rmqk.model.message import MessageExt, MessageProperty, parse_properties  # noqa: E402
from rmqk.plugins.spark import columns  # noqa: E402

pytestmark = pytest.mark.timeout(300)

needs_extension = pytest.mark.skipif(
    not columns.SPEEDUPS, reason="the compiled column builder is not built (or disabled)"
)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A recipe builds fresh messages each time: the Python builder may parse (and so
# cache) a message's properties, which must not change what the other side sees.
Recipe = Callable[[], list[tuple[MessageQueue | None, list[MessageExt]]]]

NAMES = ["UNIQ_KEY", "KEYS", "TAGS", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "WAIT"]
PIECES = [
    b"\x01",
    b"\x02",
    b"\x01\x01",
    b"\x02\x02",
    b"a",
    b"k v",
    b"\xc3\xa9",
    b"\xf0\x9f\x98\x80",
    b"\xff",  # never UTF-8
    b"\xed\xa0\x80",  # a surrogate's encoding
    b"\xe0\x80\x80",  # overlong
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xc3",  # truncated
    *(n.encode() for n in NAMES),
]

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def segments(draw: st.DrawFn) -> bytes:
    key = draw(st.sampled_from([*NAMES, "user", "é", "x"]))
    value = draw(st.text(max_size=12).filter(lambda v: "\x01" not in v and "\x02" not in v))
    return f"{key}\x01{value}\x02".encode()


def wire_properties() -> st.SearchStrategy[bytes]:
    """Raw property bytes: well-formed segments mixed with separators and bad UTF-8."""
    piece = st.one_of(st.sampled_from(PIECES), st.binary(max_size=6), segments())
    return st.lists(piece, max_size=10).map(b"".join)


@st.composite
def message_specs(draw: st.DrawFn, hostile: bool) -> dict[str, Any]:
    props_kind = draw(st.sampled_from(["wire", "wire", "wire", "text", "none", "dict", "parsed"]))
    spec: dict[str, Any] = {
        "topic": draw(st.text(max_size=10)),
        "broker_name": draw(st.text(max_size=6)),
        "queue_id": draw(INT32),
        "queue_offset": draw(INT64),
        "born_timestamp": draw(INT64),
        "store_timestamp": draw(INT64),
        "reconsume_times": draw(INT32),
        "store_host": draw(st.sampled_from(["127.0.0.1:10911", "[::1]:5"])),
        "commit_log_offset": draw(st.integers(0, 2**63 - 1)),
        # Now and then a body of megabytes, past the first buffer's size.
        "body": b"b" * (3 << 20) if draw(st.integers(0, 40)) == 0 else draw(st.binary(max_size=40)),
        "props": props_kind,
        "bounds": draw(st.booleans()),
    }
    raw = draw(wire_properties())
    if props_kind in ("wire", "parsed"):
        spec["raw"] = raw
    elif props_kind == "text":
        spec["raw"] = raw.decode("utf-8", "replace")
    elif props_kind == "dict":
        key = (
            st.sampled_from([*NAMES, "", "a", "a\x01b", "c\x02"])
            if hostile
            else st.sampled_from([*NAMES, "a"])
        )
        value = (
            st.one_of(st.text(max_size=6), st.just("v\x01w")) if hostile else st.text(max_size=6)
        )
        spec["dict"] = draw(st.dictionaries(key, value, max_size=5))
    if hostile:
        odd = draw(
            st.sampled_from(["", "", "", "", "subclass", "bool", "big", "bytearray", "none"])
        )
        spec["odd"] = odd
    return spec


class _Sub(MessageExt):
    __slots__ = ()


def _build(spec: dict[str, Any]) -> MessageExt:
    cls = _Sub if spec.get("odd") == "subclass" else MessageExt
    m = cls(
        topic=spec["topic"],
        body=spec["body"],
        broker_name=spec["broker_name"],
        queue_id=spec["queue_id"],
        queue_offset=spec["queue_offset"],
        born_timestamp=spec["born_timestamp"],
        store_timestamp=spec["store_timestamp"],
        reconsume_times=spec["reconsume_times"],
        store_host=spec["store_host"],
        commit_log_offset=spec["commit_log_offset"],
        properties=spec.get("dict"),
    )
    m._props_raw = spec.get("raw")
    if spec["bounds"]:
        m.set_queue_bounds((1, 99))
    if spec["props"] == "parsed":
        m.properties  # noqa: B018  (parsed before the sink sees it, as a filter would)
    odd = spec.get("odd")
    if odd == "bool":
        m.reconsume_times = True  # type: ignore[assignment]
    elif odd == "big":
        m.queue_offset = 2**64
    elif odd == "bytearray":
        m.body = bytearray(m.body)  # type: ignore[assignment]
    elif odd == "none":
        m.topic = None  # type: ignore[assignment]
    return m


@st.composite
def recipes(draw: st.DrawFn, hostile: bool = False) -> Recipe:
    groups = draw(
        st.lists(
            st.tuples(
                st.one_of(
                    st.none(),
                    st.builds(
                        MessageQueue,
                        st.just("T"),
                        st.text(min_size=1, max_size=5),
                        st.integers(0, 2**31 - 1),
                    ),
                ),
                st.lists(message_specs(hostile), max_size=6),
                st.booleans(),
            ),
            max_size=5,
        )
    )

    def recipe() -> list[tuple[MessageQueue | None, list[MessageExt]]]:
        out: list[Any] = []
        for queue, specs, as_tuple in groups:
            msgs = [_build(s) for s in specs]
            out.append((queue, tuple(msgs) if as_tuple else msgs))
        return out

    return recipe


def _outcome(build: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", build()
    except Exception as exc:  # both builders must fail the same way on what they refuse
        return "error", type(exc).__name__


def _assert_same(compiled: tuple[str, Any], pure: tuple[str, Any]) -> None:
    assert compiled[0] == pure[0], (compiled, pure)
    if compiled[0] == "error":
        assert compiled[1] == pure[1]
        return
    a, b = compiled[1], pure[1]
    assert a.schema.equals(b.schema)
    for name in a.schema.names:
        assert a.column(name).equals(b.column(name)), name
    assert a.equals(b)


@needs_extension
@FUZZ
@given(recipes())
def test_compiled_and_python_builders_agree(recipe: Recipe) -> None:
    _assert_same(
        _outcome(lambda: columns.messages_to_arrow(recipe())),
        _outcome(lambda: columns._python_arrow(recipe())),
    )


@needs_extension
@FUZZ
@given(recipes(hostile=True))
def test_hostile_messages_build_the_same(recipe: Recipe) -> None:
    _assert_same(
        _outcome(lambda: columns.messages_to_arrow(iter(recipe()))),
        _outcome(lambda: columns._python_arrow(recipe())),
    )


def _common(i: int, props: bytes | str | None) -> MessageExt:
    m = MessageExt(
        topic="T",
        body=b"body%d" % i,
        broker_name="b",
        queue_id=i % 4,
        queue_offset=i,
        born_timestamp=1_700_000_000_000 + i,
        store_timestamp=1_700_000_000_001 + i,
    )
    m._props_raw = props
    m.set_queue_bounds((0, 10))
    return m


@needs_extension
def test_the_compiled_builder_takes_the_common_cases() -> None:
    """It must not quietly hand every batch back to Python."""
    queue = MessageQueue("T", "other", 7)
    msgs = [
        _common(0, b"UNIQ_KEY\x01u0\x02TAGS\x01t\x02KEYS\x01k1 k2\x02WAIT\x01true\x02"),
        _common(1, b"TAGS\x01\xc3\xa9\x02bad\x01\xff\xfe\x02"),  # invalid UTF-8: U+FFFD
        _common(2, "UNIQ_KEY\x01u2\x02x\x01\x01y\x02\x02\x01z\x02w\x01"),  # given as str
        _common(3, None),
        _common(4, b""),
    ]
    parsed = _common(5, b"UNIQ_KEY\x01u5\x02a\x01b")
    assert parsed.properties["a"] == "b"  # parsed already: read from the dict
    msgs.append(parsed)
    pairs = ((None, msgs[:3]), (queue, msgs[3:]), (queue, []))
    assert columns._compiled_build is not None
    assert columns._compiled_build(pairs) is not None
    got = columns.messages_to_arrow(pairs).to_pydict()
    assert got["msg_id"][:3] == ["u0", msgs[1].offset_msg_id, "u2"]
    assert got["keys"] == ["k1 k2", None, None, None, None, None]
    assert got["tags"] == ["t", "é", None, None, None, None]
    assert got["properties"][:3] == [
        [("WAIT", "true")],
        [("bad", "\ufffd\ufffd")],
        [("x", "\x01y")],
    ]
    assert got["broker"] == ["b", "b", "b", "other", "other", "other"]
    assert got["queue_id"] == [0, 1, 2, 7, 7, 7]
    assert columns.messages_to_arrow(pairs).equals(columns._python_arrow(pairs))


@needs_extension
def test_unusual_batches_go_to_the_python_builder() -> None:
    build = columns._compiled_build
    assert build is not None
    dup = _common(0, b"a\x01first\x02a\x01last\x02")
    sub = _Sub(topic="T", body=b"")
    separator_in_dict = MessageExt(topic="T", body=b"", properties={"k\x01j": "v"})
    for odd in (dup, sub, separator_in_dict):
        assert build(((None, [odd]),)) is None
        assert columns.messages_to_arrow([(None, [odd])]).equals(
            columns._python_arrow([(None, [odd])])
        )
    assert build(([None, [_common(1, None)]],)) is None  # type: ignore[arg-type]
    # The last of a repeated key wins, as parse_properties has it.
    dup = _common(0, b"a\x01first\x02a\x01last\x02")
    assert columns.messages_to_arrow([(None, [dup])]).column("properties").to_pylist() == [
        [("a", "last")]
    ]


# ---- the oracle: each row from the message's own properties (either builder) ----


def _wrap64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _expected(pairs: list[tuple[MessageQueue | None, list[MessageExt]]]) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {name: [] for name in columns.COLUMN_NAMES}
    for queue, msgs in pairs:
        for m in msgs:
            raw = m._props_raw
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            props = parse_properties(text)
            rows["topic"].append(m.topic)
            rows["broker"].append(queue.broker_name if queue else m.broker_name)
            rows["queue_id"].append(queue.queue_id if queue else m.queue_id)
            rows["queue_offset"].append(m.queue_offset)
            rows["msg_id"].append(
                props.get(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.offset_msg_id
            )
            rows["keys"].append(props.get(MessageProperty.KEYS))
            rows["tags"].append(props.get(MessageProperty.TAGS))
            rows["properties"].append(
                [(k, v) for k, v in props.items() if k not in columns.EXCLUDED_PROPERTIES]
            )
            rows["body"].append(m.body)
            rows["born_timestamp"].append(_wrap64(m.born_timestamp * 1000))
            rows["store_timestamp"].append(_wrap64(m.store_timestamp * 1000))
            rows["reconsume_times"].append(m.reconsume_times)
    return rows


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.just(MessageQueue("T", "q", 3))),
            st.lists(st.tuples(wire_properties(), INT64, st.booleans()), max_size=6),
        ),
        max_size=4,
    )
)
def test_rows_match_each_messages_own_properties(
    groups: list[tuple[MessageQueue | None, list[tuple[bytes, int, bool]]]],
) -> None:
    def make() -> list[tuple[MessageQueue | None, list[MessageExt]]]:
        out = []
        for queue, specs in groups:
            msgs = []
            for i, (raw, ts, as_text) in enumerate(specs):
                m = _common(i, raw.decode("utf-8", "replace") if as_text else raw)
                m.born_timestamp = ts
                msgs.append(m)
            out.append((queue, msgs))
        return out

    batch = columns.messages_to_arrow(make())
    got = (
        batch.to_pydict()
        if batch.num_rows == 0
        else {
            name: (
                batch.column(name).cast(pa.int64()).to_pylist()
                if name.endswith("_timestamp")
                else batch.column(name).to_pylist()
            )
            for name in batch.schema.names
        }
    )
    if batch.num_rows == 0:
        assert all(v == [] for v in got.values())
    else:
        assert got == _expected(make())


def test_rmqk_no_extensions_selects_the_python_builder() -> None:
    code = "from rmqk.plugins.spark import columns as c; print(c.SPEEDUPS)"
    env = {**os.environ, "RMQK_NO_EXTENSIONS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
