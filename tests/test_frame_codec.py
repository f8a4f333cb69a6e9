"""Remoting frame codec: golden bytes built by hand from the 4.9.8 layout, and round trips."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.model.errors import FrameError
from rmqk.wire.frame import (
    MAX_FRAME_SIZE,
    FrameDecoder,
    SerializeType,
    decode_frame,
    decode_frame_typed,
    encode_frame,
    encode_frame_head,
)
from rmqk.wire.protocol import (
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)

pytestmark = pytest.mark.timeout(60)


def frame_of(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame laid out by hand: length, type+header length, header, body."""
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header))
        + header
        + body
    )


def binary_header(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: bytes,
    fields: list[tuple[bytes, bytes]],
) -> bytes:
    ext = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in fields)
    return (
        struct.pack(">hBhiii", code, language, version, opaque, flag, len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


# --------------------------------------------------------------------- golden encodes


def test_json_request_frame_golden_bytes() -> None:
    cmd = RemotingCommand(
        RequestCode.QUERY_CONSUMER_OFFSET,
        ext_fields={"consumerGroup": "g1", "topic": "t1", "queueId": "0"},
        opaque=1,
        version=409,
        body=b"\x00\xffbody",
    )
    header = (
        b'{"code":14,"extFields":{"consumerGroup":"g1","topic":"t1","queueId":"0"},'
        b'"flag":0,"language":"PYTHON","opaque":1,"serializeTypeCurrentRPC":"JSON",'
        b'"version":409}'
    )
    assert encode_frame(cmd) == frame_of(0, header, b"\x00\xffbody")


def test_json_response_with_remark_and_unicode() -> None:
    request = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=-7)
    response = RemotingCommand.response_to(
        request, ResponseCode.PULL_NOT_FOUND, remark="OFFSET_OVERFLOW_ONE é\n", fields={"x": 1}
    )
    response.version = 433
    header = (
        '{"code":19,"extFields":{"x":"1"},"flag":1,"language":"PYTHON","opaque":-7,'
        '"remark":"OFFSET_OVERFLOW_ONE é\\n","serializeTypeCurrentRPC":"JSON","version":433}'
    ).encode()
    assert encode_frame(response) == frame_of(0, header)


def test_json_header_leaves_out_a_null_remark_and_writes_unknown_language_as_number() -> None:
    cmd = RemotingCommand(34, opaque=3, language=42, version=1)
    header = json.loads(encode_frame(cmd)[8:])
    assert "remark" not in header
    assert header["language"] == 42
    assert header["extFields"] == {}


def test_rocketmq_request_frame_golden_bytes() -> None:
    # The worked example of protocol-and-peers.md 6.1: prefix 00000049 01000045.
    cmd = RemotingCommand(
        RequestCode.QUERY_CONSUMER_OFFSET,
        ext_fields={"consumerGroup": "g1", "topic": "t1", "queueId": "0"},
        opaque=1,
        version=409,
    )
    header = binary_header(
        14, 3, 409, 1, 0, b"", [(b"consumerGroup", b"g1"), (b"topic", b"t1"), (b"queueId", b"0")]
    )
    expected = frame_of(1, header)
    assert expected[:8] == bytes.fromhex("00000049 01000045")
    assert expected[8:21] == bytes.fromhex("000e 03 0199 00000001 00000000")
    assert encode_frame(cmd, SerializeType.ROCKETMQ) == expected


def test_rocketmq_response_frame_with_remark_and_body() -> None:
    cmd = RemotingCommand(
        ResponseCode.RPC_TIME_OUT,
        remark="naïve",
        opaque=2**31 - 1,
        flag=RPC_TYPE_RESPONSE,
        language=LanguageCode.GO,
        version=-2,
        body=b"payload",
    )
    header = binary_header(-1006, 9, -2, 2**31 - 1, 1, "naïve".encode(), [])
    assert encode_frame(cmd, SerializeType.ROCKETMQ) == frame_of(1, header, b"payload")


@pytest.mark.parametrize("serialize_type", list(SerializeType))
@pytest.mark.parametrize(
    ("flag", "is_response", "is_oneway"),
    [(0, False, False), (RPC_TYPE_RESPONSE, True, False), (RPC_ONEWAY, False, True)],
)
def test_request_response_and_oneway_flags(
    serialize_type: SerializeType, flag: int, is_response: bool, is_oneway: bool
) -> None:
    cmd = RemotingCommand(RequestCode.HEART_BEAT, opaque=5)
    if flag == RPC_ONEWAY:
        cmd.mark_oneway()
    else:
        cmd.flag = flag
    frame = encode_frame(cmd, serialize_type)
    if serialize_type == SerializeType.ROCKETMQ:
        assert struct.unpack_from(">i", frame, 8 + 9)[0] == flag
    else:
        assert json.loads(frame[8:])["flag"] == flag
    decoded = decode_frame(frame[4:])
    assert decoded.flag == flag
    assert decoded.is_response is is_response
    assert decoded.is_oneway is is_oneway


def test_encode_frame_head_plus_body_is_the_frame() -> None:
    cmd = RemotingCommand(11, ext_fields={"a": "b"}, body=b"x" * 1000, opaque=9)
    for kind in SerializeType:
        assert encode_frame_head(cmd, kind) + cmd.body == encode_frame(cmd, kind)


# --------------------------------------------------------------------- golden decodes


def test_decodes_a_java_json_header() -> None:
    # fastjson output of a Java broker: language by name, null remark left out.
    header = (
        b'{"code":0,"extFields":{"offset":"42"},"flag":1,"language":"JAVA","opaque":77,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    typed = decode_frame_typed(frame_of(0, header, b"BODY")[4:])
    cmd = typed.command
    assert typed.serialize_type is SerializeType.JSON
    assert (cmd.code, cmd.flag, cmd.opaque, cmd.version) == (0, 1, 77, 409)
    assert cmd.language is LanguageCode.JAVA
    assert cmd.remark is None
    assert cmd.ext_fields == {"offset": "42"}
    assert cmd.body == b"BODY"
    assert isinstance(cmd.body, bytes)


def test_json_language_as_number_and_unknown_languages_are_kept() -> None:
    def lang(value: object) -> object:
        header = json.dumps({"code": 1, "language": value}).encode()
        return decode_frame(frame_of(0, header)[4:]).language

    assert lang(3) is LanguageCode.PYTHON
    assert lang("GO") is LanguageCode.GO
    assert lang("NODE_JS") == "NODE_JS"
    assert lang(13) == 13


def test_json_defaults_and_null_ext_values() -> None:
    header = b'{"code":40,"extFields":{"a":"1","b":null},"remark":null,"extra":[1,2]}'
    cmd = decode_frame(frame_of(0, header)[4:])
    assert cmd.code == 40
    assert cmd.ext_fields == {"a": "1"}
    assert (cmd.flag, cmd.opaque, cmd.version) == (0, 0, 0)
    assert cmd.language is LanguageCode.JAVA


def test_decodes_a_rocketmq_header() -> None:
    header = binary_header(
        11, 0, 409, -5, 0, b"hi", [(b"topic", "tópico".encode()), (b"queueId", b"3")]
    )
    typed = decode_frame_typed(frame_of(1, header, b"\x01\x02")[4:])
    cmd = typed.command
    assert typed.serialize_type is SerializeType.ROCKETMQ
    assert (cmd.code, cmd.version, cmd.opaque, cmd.remark) == (11, 409, -5, "hi")
    assert cmd.language is LanguageCode.JAVA
    assert cmd.ext_fields == {"topic": "tópico", "queueId": "3"}
    assert cmd.body == b"\x01\x02"


def test_rocketmq_empty_strings_are_absent_as_in_java() -> None:
    header = binary_header(1, 200, 0, 0, 0, b"", [(b"k", b""), (b"", b"v"), (b"a", b"b")])
    cmd = decode_frame(frame_of(1, header)[4:])
    assert cmd.remark is None
    assert cmd.ext_fields == {"a": "b"}
    assert cmd.language == 200


def test_empty_body_decodes_as_empty_bytes() -> None:
    cmd = decode_frame(encode_frame(RemotingCommand(1, opaque=1))[4:])
    assert cmd.body == b""


def test_decode_accepts_memoryview_and_bytearray() -> None:
    frame = encode_frame(RemotingCommand(1, opaque=1, body=b"abc"))[4:]
    assert decode_frame(memoryview(frame)).body == b"abc"
    assert decode_frame(bytearray(frame)).body == b"abc"


# ------------------------------------------------------------------------- errors

JSON_OK = b'{"code":1}'


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        (b"", "no header length word"),
        (b"\x00\x00", "no header length word"),
        (struct.pack(">I", 10) + b"{}", "header length 10 exceeds the 2 bytes"),
        (struct.pack(">I", (2 << 24) | 2) + b"{}", "unknown serialize type 2"),
        (struct.pack(">I", (0xFF << 24)), "unknown serialize type 255"),
        (frame_of(0, b"{not json")[4:], "not valid JSON"),
        (frame_of(0, b"\xff\xfe")[4:], "not UTF-8"),
        (frame_of(0, b"[1, 2]")[4:], "is a list, not an object"),
        (frame_of(0, b'"code"')[4:], "is a str, not an object"),
        (frame_of(0, b"{}")[4:], "has no 'code'"),
        (frame_of(0, b'{"code":"1"}')[4:], "'code' must be an integer"),
        (frame_of(0, b'{"code":1.5}')[4:], "'code' must be an integer"),
        (frame_of(0, b'{"code":true}')[4:], "'code' must be an integer"),
        (frame_of(0, b'{"code":4294967296}')[4:], "does not fit a 32-bit int"),
        (frame_of(0, b'{"code":1,"opaque":[]}')[4:], "'opaque' must be an integer"),
        (frame_of(0, b'{"code":1,"remark":5}')[4:], "'remark' must be a string"),
        (frame_of(0, b'{"code":1,"extFields":[]}')[4:], "'extFields' must be an object"),
        (frame_of(0, b'{"code":1,"extFields":{"a":1}}')[4:], "ext field 'a' must be a string"),
        (frame_of(0, b'{"code":1,"language":{}}')[4:], "'language' must be a name"),
        (frame_of(0, b"[" * 100_000 + b"]" * 100_000)[4:], "cannot be parsed"),
        (frame_of(0, b'{"code":' + b"9" * 5000 + b"}")[4:], "cannot be parsed"),
        (frame_of(1, b"\x00" * 20)[4:], "shorter than the fixed 21"),
        (
            frame_of(1, struct.pack(">hBhiii", 1, 0, 0, 0, 0, -1) + b"\x00" * 4)[4:],
            "remark length -1",
        ),
        (
            frame_of(1, struct.pack(">hBhiii", 1, 0, 0, 0, 0, 3) + b"ab" + b"\x00" * 4)[4:],
            "remark length 3",
        ),
        (frame_of(1, struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, -2))[4:], "ext fields length -2"),
        (frame_of(1, struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 9))[4:], "ext fields length 9"),
        (
            frame_of(1, struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 0) + b"xx")[4:],
            "2 bytes after its ext fields",
        ),
        (
            frame_of(1, struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 1) + b"x")[4:],
            "key length truncated",
        ),
        (
            frame_of(1, struct.pack(">hBhiiiih", 1, 0, 0, 0, 0, 0, 6, -1) + b"\x00" * 4)[4:],
            "key length -1",
        ),
        (
            frame_of(1, struct.pack(">hBhiiiih", 1, 0, 0, 0, 0, 0, 8, 1) + b"k\x00\x00\x00\x07v")[
                4:
            ],
            "length 7 of ext field 'k'",
        ),
        (
            frame_of(1, binary_header(1, 0, 0, 0, 0, b"", [(b"k", b"\xc3")]))[4:],
            "ext field 'k' at header offset",
        ),
        (frame_of(1, binary_header(1, 0, 0, 0, 0, b"\xff", []))[4:], "remark at header offset"),
    ],
)
def test_malformed_frames_raise_frame_error(frame: bytes, fragment: str) -> None:
    with pytest.raises(FrameError, match="malformed frame") as info:
        decode_frame(frame)
    assert fragment in str(info.value)


def test_encode_refuses_what_cannot_be_represented() -> None:
    with pytest.raises(ValueError, match="code=200050"):
        encode_frame(RemotingCommand(200050), SerializeType.ROCKETMQ)
    assert decode_frame(encode_frame(RemotingCommand(200050))[4:]).code == 200050
    with pytest.raises(ValueError, match="opaque"):
        encode_frame(RemotingCommand(1, opaque=2**31))
    with pytest.raises(ValueError, match="must be str"):
        encode_frame(RemotingCommand(1, ext_fields={"a": 1}))  # type: ignore[dict-item]
    big = RemotingCommand(1, body=bytes(MAX_FRAME_SIZE))
    with pytest.raises(ValueError, match="exceeds"):
        encode_frame(big)
    assert len(encode_frame(big, max_frame_size=None)) > MAX_FRAME_SIZE
    with pytest.raises(ValueError, match="UTF-8"):
        encode_frame(RemotingCommand(1, remark="\ud800"))
    with pytest.raises(ValueError, match="UTF-8"):
        encode_frame(RemotingCommand(1, remark="\ud800"), SerializeType.ROCKETMQ)


def test_unknown_language_names_encode_as_other_in_binary() -> None:
    frame = encode_frame(RemotingCommand(1, language="SOMETHING"), SerializeType.ROCKETMQ)
    assert frame[10] == LanguageCode.OTHER
    frame = encode_frame(RemotingCommand(1, language="NODE_JS"), SerializeType.ROCKETMQ)
    assert frame[10] == 13


# ------------------------------------------------------------------ stream decoder


def sample_frames() -> list[bytes]:
    return [
        encode_frame(RemotingCommand(1, opaque=1, ext_fields={"a": "b"})),
        encode_frame(RemotingCommand(2, opaque=2, body=b"x" * 300), SerializeType.ROCKETMQ),
        encode_frame(RemotingCommand(3, opaque=3, remark="r", flag=1)),
    ]


def test_stream_decoder_byte_by_byte() -> None:
    stream = b"".join(sample_frames())
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert [c.opaque for c in out] == [1, 2, 3]
    assert out[1].body == b"x" * 300
    assert decoder.buffered == 0


def test_stream_decoder_many_frames_in_one_chunk_and_partial_tail() -> None:
    frames = sample_frames()
    stream = b"".join(frames)
    decoder = FrameDecoder()
    typed = decoder.feed_typed(stream + frames[0][:6])
    assert [t.command.code for t in typed] == [1, 2, 3]
    assert [t.serialize_type for t in typed] == [
        SerializeType.JSON,
        SerializeType.ROCKETMQ,
        SerializeType.JSON,
    ]
    assert decoder.buffered == 6
    assert [c.code for c in decoder.feed(frames[0][6:])] == [1]
    assert decoder.buffered == 0


def test_stream_decoder_large_body_in_chunks() -> None:
    body = bytes(range(256)) * (5 * 4096)  # 5 MiB
    frame = encode_frame(RemotingCommand(11, opaque=4, body=body, flag=1))
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(frame), 65536):
        out += decoder.feed(memoryview(frame)[i : i + 65536])
    assert len(out) == 1
    assert out[0].body == body


def test_stream_decoder_refuses_oversized_frame_before_buffering_it() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="over the 16777216-byte limit"):
        decoder.feed(struct.pack(">i", MAX_FRAME_SIZE - 3))
    assert decoder.failed
    assert decoder.buffered == 0
    # It stays failed, even for a valid frame.
    with pytest.raises(FrameError, match="already failed"):
        decoder.feed(sample_frames()[0])


def test_stream_decoder_accepts_a_frame_exactly_at_the_limit() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    frame = encode_frame(RemotingCommand(1, opaque=1, body=b"z" * 100))
    pad = 1000 - len(frame)
    frame = encode_frame(RemotingCommand(1, opaque=1, body=b"z" * (100 + pad)))
    assert len(frame) == 1000
    assert decoder.feed(frame)[0].body == b"z" * (100 + pad)
    with pytest.raises(FrameError, match="over the 999-byte limit"):
        FrameDecoder(max_frame_size=999).feed(frame)


@pytest.mark.parametrize("length", [-1, 0, 3])
def test_stream_decoder_refuses_impossible_lengths(length: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match=f"frame length {length} at stream offset"):
        decoder.feed(struct.pack(">i", length) + b"\x00" * 8)


def test_stream_decoder_fails_on_a_malformed_frame_after_good_ones() -> None:
    good = sample_frames()[0]
    bad = frame_of(0, b"{oops}")
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="not valid JSON"):
        decoder.feed(good + bad)
    assert decoder.failed
    with pytest.raises(FrameError, match="already failed: malformed frame"):
        decoder.feed(good)


# ------------------------------------------------------------------ round trips

text = st.text(st.characters(codec="utf-8"), max_size=40)
nonempty_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
languages = st.one_of(st.sampled_from(list(LanguageCode)), st.integers(13, 255))

# A command's fields after code and version: opaque, flag, remark, ext fields, body, language.
Rest = tuple[int, int, str | None, dict[str, str], bytes, int]
rest_of_command = st.tuples(
    int32,
    int32,
    st.one_of(st.none(), text),
    st.dictionaries(text, text, max_size=6),
    st.binary(max_size=300),
    languages,
)


def command(code: int, version: int, rest: Rest) -> RemotingCommand:
    opaque, flag, remark, fields, body, language = rest
    return RemotingCommand(
        code,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
        body=body,
        language=language,
    )


@settings(max_examples=200, deadline=None)
@given(code=int32, version=int32, rest=rest_of_command)
def test_json_round_trip(code: int, version: int, rest: Rest) -> None:
    opaque, flag, remark, fields, body, language = rest
    cmd = command(code, version, rest)
    frame = encode_frame(cmd)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    back = decode_frame(frame[4:])
    assert (back.code, back.version, back.opaque, back.flag) == (code, version, opaque, flag)
    assert (back.remark, back.ext_fields, back.body) == (remark, fields, body)
    assert back.language == language


@settings(max_examples=200, deadline=None)
@given(code=int16, version=int16, rest=rest_of_command)
def test_rocketmq_round_trip(code: int, version: int, rest: Rest) -> None:
    opaque, flag, remark, fields, body, language = rest
    cmd = command(code, version, rest)
    frame = encode_frame(cmd, SerializeType.ROCKETMQ)
    back = decode_frame(frame[4:])
    assert (back.code, back.version, back.opaque, back.flag) == (code, version, opaque, flag)
    # Java reads empty strings as null: an empty remark or ext entry comes back absent.
    assert back.remark == (remark or None)
    assert back.ext_fields == {k: v for k, v in fields.items() if k and v}
    assert back.body == body
    assert back.language == language


@settings(max_examples=50, deadline=None)
@given(
    commands=st.lists(
        st.tuples(int16, nonempty_text, st.binary(max_size=200), st.sampled_from(SerializeType)),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(1, 64), max_size=30),
)
def test_stream_decoder_any_chunking(
    commands: list[tuple[int, str, bytes, SerializeType]], cuts: list[int]
) -> None:
    stream = b"".join(
        encode_frame(RemotingCommand(code, opaque=i, remark=remark, body=body), kind)
        for i, (code, remark, body, kind) in enumerate(commands)
    )
    decoder = FrameDecoder()
    out = []
    pos = 0
    for cut in cuts:
        out += decoder.feed(stream[pos : pos + cut])
        pos += cut
    out += decoder.feed(stream[pos:])
    assert [(c.opaque, c.code, c.remark, c.body) for c in out] == [
        (i, code, remark, body) for i, (code, remark, body, _) in enumerate(commands)
    ]
    assert decoder.buffered == 0
