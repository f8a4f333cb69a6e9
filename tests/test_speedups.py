"""The compiled record decoder and process-queue loops against the pure-Python code.

(The Spark column builder has its own: tests/test_spark_columns_speedups.py.)

The extensions are optional (setup.py builds them with ``optional=True``): these
tests compare compiled and Python code when built and are skipped when not. The
other codec tests run on whichever decoder is active; tox runs them a second
time with ``RMQK_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqk.engine import process_queue
from rmqk.model.message import MessageExt
from rmqk.plugins.spark import columns
from rmqk.wire import compiled_headers, message_codec
from rmqk.wire.message_codec import (
    _SLOT_ORDER,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    ZLIB_COMPRESSED_SYS_FLAG,
    RecordError,
    encode_stored_message,
    maybe_compress,
)

pytestmark = pytest.mark.timeout(120)

needs_extension = pytest.mark.skipif(
    not message_codec.SPEEDUPS, reason="the compiled decoder is not built (or disabled)"
)

Outcome = tuple[list[tuple[object, ...]], tuple[int, int, str, bool] | None]


def _fields(m: MessageExt) -> tuple[object, ...]:
    return tuple(getattr(m, name) for name in _SLOT_ORDER)


def _run(decode: Callable[[list[MessageExt]], object]) -> Outcome:
    out: list[MessageExt] = []
    error = None
    try:
        decode(out)
    except RecordError as exc:
        error = (exc.index, exc.offset, exc.reason, exc.framed)
    return [_fields(m) for m in out], error


def _both(buf: bytes, decompress: bool = True, max_body: int = 1 << 20) -> tuple[Outcome, Outcome]:
    end = len(buf)

    def compiled(out: list[MessageExt]) -> object:
        return message_codec._decode_records(buf, 0, end, "b", decompress, 0, max_body, out)

    def pure(out: list[MessageExt]) -> object:
        return message_codec._decode_records_py(buf, 0, end, "b", decompress, 0, max_body, out)

    return _run(compiled), _run(pure)


HOSTS = ["127.0.0.1:10911", "10.1.2.3:0", "[::1]:5", "[2001:db8::7]:65535"]


# Property texts as Apache's 4.9.8 Java producer and broker write them, plus odd
# ones its parser still accepts: empty values, non-ASCII, separators at the
# edges, a key without a value, a duplicated key (the later one wins in Java).
PROPERTY_SETS = [
    "",
    "TAGS\x01a",
    "UNIQ_KEY\x01x\x02KEYS\x01k j",
    "KEYS\x01order-1 order-2\x02UNIQ_KEY\x017F0000010B2A18B4AAC2754D6B8A0000\x02WAIT\x01true"
    "\x02TAGS\x01TagA\x02MIN_OFFSET\x010\x02MAX_OFFSET\x0112\x02CLUSTER\x01DefaultCluster\x02",
    "TAGS\x01\x02KEYS\x01\x02",
    "\x02TAGS\x01t\x02",
    "TAGS\x01t\x02TAGS\x01u\x02",
    "k\u00e9y\x01v\u00e4l\u4e2d\x02UNIQ_KEY\x01A\x02",
    "NOVALUE\x02WAIT\x01false",
]


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=300))
    sys_flag = draw(st.sampled_from([0, 0x2, 0x4, 0x8]))
    if draw(st.booleans()):
        body, _ = maybe_compress(body, threshold=0)
        sys_flag |= ZLIB_COMPRESSED_SYS_FLAG
    return encode_stored_message(
        topic=draw(st.text(max_size=20).filter(lambda t: len(t.encode()) <= 127)),
        body=body,
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        queue_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        commit_log_offset=draw(st.integers(0, 2**63 - 1)),
        sys_flag=sys_flag,
        born_timestamp=draw(st.integers(0, 2**63 - 1)),
        born_host=draw(st.sampled_from(HOSTS)),
        store_timestamp=draw(st.integers(-(2**63), 2**63 - 1)),
        store_host=draw(st.sampled_from(HOSTS)),
        reconsume_times=draw(st.integers(-(2**31), 2**31 - 1)),
        prepared_transaction_offset=draw(st.integers(0, 2**63 - 1)),
        properties_raw=draw(st.sampled_from(PROPERTY_SETS)),
        magic_code=draw(st.sampled_from([MAGIC_CODE_V1, MAGIC_CODE_V2])),
    )


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_extension
@FUZZ
@given(st.lists(records(), min_size=1, max_size=6), st.booleans())
def test_well_formed_records_decode_the_same(parts: list[bytes], decompress: bool) -> None:
    buf = b"".join(parts)
    compiled, pure = _both(buf, decompress)
    assert compiled == pure
    assert pure[1] is None
    # ... and the compiled decoder took every record itself.
    from rmqk.wire import _speedups

    out: list[MessageExt] = []
    assert _speedups.decode_records(buf, 0, len(buf), "b", decompress, 1 << 20, out) == len(buf)
    assert [_fields(m) for m in out] == pure[0]


@needs_extension
@FUZZ
@given(st.lists(records(), min_size=1, max_size=4), st.data())
def test_damaged_records_fail_the_same(parts: list[bytes], data: st.DataObject) -> None:
    buf = bytearray(b"".join(parts))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    compiled, pure = _both(bytes(buf[:cut]))
    assert compiled == pure


@needs_extension
def test_a_body_too_large_and_a_bad_host_are_reported_by_the_python_decoder() -> None:
    big, _ = maybe_compress(b"x" * 5000, threshold=0)
    good = encode_stored_message(topic="T", body=b"ok")
    inflated = encode_stored_message(topic="T", body=big, sys_flag=ZLIB_COMPRESSED_SYS_FLAG)
    bad_port = bytearray(encode_stored_message(topic="T", body=b"p"))
    bad_port[52:56] = b"\xff\xff\xff\xff"  # born host port -1
    for tail in (inflated, bytes(bad_port)):
        compiled, pure = _both(good + tail, max_body=100)
        assert compiled == pure
        assert len(pure[0]) == 1 and pure[1] is not None and pure[1][3]  # framed


@needs_extension
def test_a_subclass_or_another_type_is_refused_by_configure() -> None:
    from rmqk.wire import _speedups

    class Other:
        __slots__ = _SLOT_ORDER

    descriptors = tuple(Other.__dict__[name] for name in _SLOT_ORDER)
    with pytest.raises(TypeError):
        _speedups.configure(MessageExt, descriptors, {}, str, bytes)
    with pytest.raises(ValueError):
        _speedups.configure(MessageExt, descriptors[:3], {}, str, bytes)


@pytest.mark.skipif(
    os.environ.get("RMQK_NO_EXTENSIONS", "") not in ("", "0"), reason="disabled on purpose"
)
def test_a_built_extension_is_used() -> None:
    """A drift between MessageExt's slots and the C decoder's must not go unnoticed."""
    for module, used in (
        ("rmqk.wire._speedups", message_codec.SPEEDUPS),
        ("rmqk.wire._headers", compiled_headers.ENCODE is not None),
        ("rmqk.engine._pq_speedups", process_queue._SPEEDUPS is not None),
        ("rmqk.plugins.spark._columns", columns.SPEEDUPS),
    ):
        if importlib.util.find_spec(module) is not None:
            assert used, module


def test_rmqk_no_extensions_selects_the_python_decoder() -> None:
    code = "from rmqk.wire import message_codec as m; print(m.SPEEDUPS)"
    env = {**os.environ, "RMQK_NO_EXTENSIONS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


needs_pq_extension = pytest.mark.skipif(
    process_queue._SPEEDUPS is None, reason="the compiled process-queue loops are not built"
)


def _message(offset: int, size: int) -> MessageExt:
    return MessageExt(topic="T", body=bytes(size), queue_offset=offset)


def _state(pq: process_queue.ProcessQueue) -> tuple[object, ...]:
    return (
        {k: v.queue_offset for k, v in pq._msgs.items()},
        list(pq._order),
        pq.msg_count,
        pq.msg_size,
        pq.queue_offset_max,
        pq.consuming,
        dict(pq.consume_started),
        pq.first_offset(),
    )


@needs_pq_extension
@FUZZ
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), max_size=8),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_process_queue_loops_match_the_python_ones(
    steps: list[tuple[bool, list[tuple[int, int]], bool]],
) -> None:
    compiled, pure = process_queue.ProcessQueue(), process_queue.ProcessQueue()
    loops = process_queue._SPEEDUPS
    try:
        for put, batch, as_tuple in steps:
            for pq, speedups in ((compiled, loops), (pure, None)):
                process_queue._SPEEDUPS = speedups
                msgs = [_message(o, s) for o, s in batch]
                for m in msgs[::2]:
                    pq.consume_started[m.queue_offset] = 1
                if put:
                    result: object = pq.put_messages(tuple(msgs) if as_tuple else msgs)
                else:
                    result = pq.remove_messages(iter(msgs) if as_tuple else msgs)
                if pq is compiled:
                    expected = result
                else:
                    assert result == expected
            assert _state(compiled) == _state(pure)
    finally:
        process_queue._SPEEDUPS = loops


def _python_first_key(order: deque[object], msgs: dict[object, object]) -> object:
    pq = process_queue.ProcessQueue()
    pq._order, pq._msgs = order, msgs  # type: ignore[assignment]
    loops = process_queue._SPEEDUPS
    process_queue._SPEEDUPS = None
    try:
        return pq._first_key()
    finally:
        process_queue._SPEEDUPS = loops


def _outcome(call: Callable[[], object]) -> tuple[str, object]:
    try:
        return "ok", call()
    except Exception as exc:  # the type is what must match
        return "raised", type(exc)


@needs_pq_extension
@FUZZ
@given(
    st.lists(
        st.one_of(st.integers(-3, 12), st.just([1]), st.just("7"), st.none()), max_size=12
    ),
    st.lists(st.integers(-3, 12), max_size=12),
)
def test_first_key_matches_the_python_loop(head: list[object], held: list[int]) -> None:
    """Unhashable, foreign and missing offsets included: same answer, same pops, same error."""
    assert process_queue._SPEEDUPS is not None
    first_key = process_queue._SPEEDUPS[2]
    msgs: dict[object, object] = {off: _message(off, 1) for off in held}
    order_c, order_py = deque(head), deque(head)
    compiled = _outcome(lambda: first_key(order_c, msgs))  # type: ignore[arg-type]
    pure = _outcome(lambda: _python_first_key(order_py, dict(msgs)))
    assert compiled == pure
    assert list(order_c) == list(order_py)


@needs_pq_extension
def test_first_key_takes_a_dict_and_any_order() -> None:
    assert process_queue._SPEEDUPS is not None
    with pytest.raises(TypeError):
        process_queue._SPEEDUPS[2](deque([1]), [1])  # type: ignore[arg-type]
    # Not a deque: the same answer, or the same error, as the Python loop.
    first_key = process_queue._SPEEDUPS[2]
    for order in (None, [], [5, 6], [6, 5]):
        held: dict[object, object] = {6: _message(6, 1)}
        compiled_order = list(order) if order is not None else None
        compiled = _outcome(partial(first_key, compiled_order, held))  # type: ignore[arg-type]
        pure = _outcome(partial(_python_first_key, order, held))  # type: ignore[arg-type]
        assert compiled == pure, order
    assert _outcome(partial(first_key, [5, 6], {})) == ("raised", AttributeError)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", PROPERTY_SETS)
def test_java_shaped_properties_read_the_same_on_both_decoders(raw: str) -> None:
    # The tag fast path reads the raw text; it must agree with the full parse
    # (Java's string2messageProperties rules) on both decoders, odd texts included.
    from rmqk.model.message import parse_properties

    buf = encode_stored_message(
        topic="t",
        body=b"x",
        flag=0,
        queue_id=0,
        queue_offset=1,
        commit_log_offset=2,
        sys_flag=0,
        born_timestamp=3,
        born_host=HOSTS[0],
        store_timestamp=4,
        store_host=HOSTS[1],
        reconsume_times=0,
        prepared_transaction_offset=0,
        properties_raw=raw,
        magic_code=MAGIC_CODE_V1,
    )
    decoders = [message_codec._decode_records_py]
    if message_codec.SPEEDUPS:
        decoders.append(message_codec._decode_records)
    expected = parse_properties(raw)
    for decode in decoders:
        out: list[MessageExt] = []
        decode(buf, 0, len(buf), "b", True, 0, 1 << 20, out)
        (m,) = out
        assert m.tags == expected.get("TAGS")
        assert m.keys == expected.get("KEYS")
        assert m.properties == expected
