"""The compiled JSON header encoder and decoder (``_headers.c``) against frame.py's Python code.

The compiled functions take the common case and return None for the rest, so
through frame.py both paths must give the same bytes, the same command or the
same error on any input. Skipped when the extension is not built or disabled.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqk.model.errors import FrameError
from rmqk.wire import compiled_headers, frame
from rmqk.wire.protocol import LanguageCode, RemotingCommand, RequestCode

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        compiled_headers.ENCODE is None, reason="the compiled header codec is not built"
    ),
]

Outcome = tuple[str, object]


def _encoded(encode: object, cmd: RemotingCommand) -> Outcome:
    try:
        return ("ok", encode(cmd))  # type: ignore[operator]
    except Exception as exc:  # the type and text are what is compared
        return (type(exc).__name__, str(exc))


def _decoded(decode: object, header: bytes) -> Outcome:
    try:
        cmd = decode(header)  # type: ignore[operator]
    except FrameError as exc:
        return ("FrameError", str(exc))
    return (
        "ok",
        (
            cmd.code,
            cmd.flag,
            cmd.opaque,
            cmd.version,
            cmd.remark,
            type(cmd.language),
            cmd.language,
            list(cmd.ext_fields.items()),  # the order too
            type(cmd.ext_fields),
        ),
    )


def _pull_request() -> RemotingCommand:
    fields = {
        "consumerGroup": "group_ü",
        "topic": "bench_cpu",
        "queueId": "3",
        "queueOffset": "123456",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "123400",
        "suspendTimeoutMillis": "20000",
        "subscription": "TagA || TagB",
        "subVersion": "1700000000000",
        "expressionType": "TAG",
        "bname": "broker-a",
    }
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=fields)


JAVA_PULL_RESPONSE = (
    b'{"code":0,"extFields":{"suggestWhichBrokerId":"0","minOffset":"0",'
    b'"nextBeginOffset":"64","maxOffset":"200000"},"flag":1,"language":"JAVA",'
    b'"opaque":4711,"serializeTypeCurrentRPC":"JSON","version":395}'
)


def test_the_common_cases_take_the_compiled_path() -> None:
    # Without this a compiled codec that always gave up would pass the comparisons.
    cmd = _pull_request()
    assert compiled_headers.ENCODE is not None and compiled_headers.DECODE is not None
    language = frame._LANGUAGE_TEXT[cmd.language]
    header = compiled_headers.ENCODE(
        cmd.code, cmd.ext_fields, cmd.flag, language, cmd.opaque, cmd.remark, cmd.version
    )
    assert header == frame._python_json_header(cmd)
    parts = compiled_headers.DECODE(JAVA_PULL_RESPONSE)
    assert parts == (
        0,
        {
            "suggestWhichBrokerId": "0",
            "minOffset": "0",
            "nextBeginOffset": "64",
            "maxOffset": "200000",
        },
        1,
        "JAVA",
        4711,
        None,
        395,
    )
    assert parts is not None and list(parts[1]) == [
        "suggestWhichBrokerId",
        "minOffset",
        "nextBeginOffset",
        "maxOffset",
    ]
    assert _decoded(frame._decode_json_header, JAVA_PULL_RESPONSE) == _decoded(
        frame._python_decode_json_header, JAVA_PULL_RESPONSE
    )


def test_the_encoders_agree_on_hand_picked_commands() -> None:
    odd = 'q"uo\\te\n\r\t\b\f\x00\x1f\x7f é 中 😀'
    cases: list[RemotingCommand] = [
        _pull_request(),
        RemotingCommand(1, ext_fields={odd: odd}, remark=odd),
        RemotingCommand(1, ext_fields={"k": "\ud800"}),  # not UTF-8 encodable
        RemotingCommand(1, remark="\udfff"),
        RemotingCommand(-(2**31), opaque=2**31 - 1, flag=-1, version=0),
        RemotingCommand(1, opaque=2**31),
        RemotingCommand(1, language="NODE_JS"),
        RemotingCommand(1, language=99),
        RemotingCommand(1, language=3),
        RemotingCommand(1, language="PYTHON"),
        RemotingCommand(1, ext_fields={"": ""}),
    ]
    weird = RemotingCommand(1)
    weird.ext_fields = {"n": 5}  # type: ignore[dict-item]
    cases.append(weird)
    flagged = RemotingCommand(1)
    flagged.flag = True
    cases.append(flagged)
    enum_code = RemotingCommand(1)
    enum_code.code = RequestCode.PULL_MESSAGE
    cases.append(enum_code)
    big = RemotingCommand(1, ext_fields={f"k{i}": "v" * i for i in range(200)})
    cases.append(big)

    class Text(str):
        pass

    sub = RemotingCommand(1)
    sub.ext_fields = {Text("a"): Text("b")}
    cases.append(sub)
    for cmd in cases:
        assert _encoded(frame._json_header, cmd) == _encoded(frame._python_json_header, cmd)


_texts = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)
_ints = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(),
    st.booleans(),
    st.sampled_from([0, -1, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1]),
)
_languages = st.one_of(
    st.sampled_from(list(LanguageCode)),
    st.integers(-5, 300),
    st.sampled_from(["JAVA", "PYTHON", "GO", "NODE_JS", "", "ü"]),
    _texts,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    code=_ints,
    flag=_ints,
    opaque=_ints,
    version=_ints,
    language=_languages,
    remark=st.one_of(st.none(), _texts),
    fields=st.dictionaries(_texts, st.one_of(_texts, st.integers(), st.none()), max_size=6),
)
def test_the_encoders_agree_on_random_commands(
    code: int,
    flag: int,
    opaque: int,
    version: int,
    language: int | str,
    remark: str | None,
    fields: dict[str, object],
) -> None:
    cmd = RemotingCommand(0)
    cmd.code, cmd.flag, cmd.opaque, cmd.version = code, flag, opaque, version
    cmd.language, cmd.remark = language, remark
    cmd.ext_fields = fields  # type: ignore[assignment]
    assert _encoded(frame._json_header, cmd) == _encoded(frame._python_json_header, cmd)


HOSTILE_HEADERS = [
    JAVA_PULL_RESPONSE,
    b"{}",
    b"[]",
    b"",
    b"null",
    b'{"code":1}',
    b' \t\r\n{ "code" : 1 , "extFields" : { "a" : "b" } } \n',
    b'{"code":1,"extFields":null}',
    b'{"code":1,"extFields":{}}',
    b'{"code":1,"extFields":{"a":null,"b":"2","a":"3"}}',
    b'{"code":1,"extFields":{"a":"1","b":"2","a":"3"}}',
    b'{"code":1,"extFields":{"a":1}}',
    b'{"code":1,"extFields":{"a":"\\u00e9\\n\\"x"}}',
    b'{"code":1,"extFields":{"\\ud800":"x"}}',
    b'{"code":1,"extFields":{"a":"\x01"}}',
    b'{"code":1,"extFields":[]}',
    b'{"code":1,"extFields":"x"}',
    b'{"code":1,"code":2}',
    b'{"code":"1"}',
    b'{"code":1.0}',
    b'{"code":1e3}',
    b'{"code":-0}',
    b'{"code":01}',
    b'{"code":-}',
    b'{"code":2147483647,"opaque":-2147483648,"flag":0,"version":1}',
    b'{"code":2147483648}',
    b'{"code":-2147483649}',
    b'{"code":99999999999999999999}',
    b'{"code":true}',
    b'{"code":null}',
    b'{"code":1,"opaque":null}',
    b'{"code":1,"language":null}',
    b'{"code":1,"language":3}',
    b'{"code":1,"language":13}',
    b'{"code":1,"language":"NODE_JS"}',
    b'{"code":1,"language":"GO"}',
    b'{"code":1,"language":1.5}',
    b'{"code":1,"remark":null}',
    b'{"code":1,"remark":7}',
    b'{"code":1,"remark":"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"}',
    b'{"code":1,"remark":"\xed\xa0\x80"}',
    b'{"code":1,"remark":"\xff"}',
    b'{"code":1,"serializeTypeCurrentRPC":1}',
    b'{"code":1,"unknown":"x"}',
    b'{"code":1,}',
    b'{"code":1} x',
    b'{"code":1',
    b'{"code":1,"extFields":{"a":"b"',
    b'{"code":1,"extFields":{"a":"b}}',
    b'\xef\xbb\xbf{"code":1}',
    b'{"code":NaN}',
    b'{"code":1,"remark":"\\/"}',
]


@pytest.mark.parametrize("header", HOSTILE_HEADERS)
def test_the_decoders_agree_on_hand_picked_headers(header: bytes) -> None:
    assert _decoded(frame._decode_json_header, header) == _decoded(
        frame._python_decode_json_header, header
    )


_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _texts),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=6,
)
_header_objects = st.fixed_dictionaries(
    {},
    optional={
        "code": _ints,
        "extFields": st.one_of(
            st.dictionaries(_texts, st.one_of(_texts, st.none()), max_size=5), _values
        ),
        "flag": _ints,
        "language": _languages,
        "opaque": _ints,
        "remark": st.one_of(st.none(), _texts),
        "serializeTypeCurrentRPC": st.sampled_from(["JSON", "ROCKETMQ"]),
        "version": _ints,
        "other": _values,
    },
)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_header_objects, ascii_only=st.booleans(), seed=st.integers(0, 2**32))
def test_the_decoders_agree_on_random_and_damaged_headers(
    obj: dict[str, object], ascii_only: bool, seed: int
) -> None:
    text = json.dumps(
        {k: (int(v) if isinstance(v, LanguageCode) else v) for k, v in obj.items()},
        ensure_ascii=ascii_only,
    )
    try:
        header = text.encode("utf-8")
    except UnicodeEncodeError:
        header = text.encode("utf-8", "surrogatepass")
    rng = random.Random(seed)
    variants = [header]
    if header:
        damaged = bytearray(header)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        variants += [bytes(damaged), header[: rng.randrange(len(header))]]
    for variant in variants:
        assert _decoded(frame._decode_json_header, variant) == _decoded(
            frame._python_decode_json_header, variant
        )


def test_numbers_as_strings_stay_strings() -> None:
    # Java sends every header field value as a string; "42" must not become 42.
    header = b'{"code":0,"extFields":{"queueOffset":"42","x":"-1"},"opaque":1}'
    parts = compiled_headers.DECODE(header)  # type: ignore[misc]
    assert parts is not None and parts[1] == {"queueOffset": "42", "x": "-1"}
