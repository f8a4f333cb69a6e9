"""Fuzzing the byte decoders: whatever arrives, the only error is FrameError.

A peer, a proxy or a bug may send anything. The decoders must answer every input
with a result or a FrameError (which closes the connection), never with another
exception and never by hanging.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqk.model.errors import FrameError
from rmqk.model.message import Message
from rmqk.wire.frame import FrameDecoder, SerializeType, decode_frame, encode_frame
from rmqk.wire.message_codec import (
    MAGIC_CODE_V2,
    ZLIB_COMPRESSED_SYS_FLAG,
    decode_batch,
    decode_messages,
    encode_batch,
    encode_stored_message,
    maybe_compress,
)
from rmqk.wire.protocol import RemotingCommand

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(
    max_examples=200,
    deadline=2000,  # milliseconds: a hang shows up as a failure, not a stuck run
    suppress_health_check=[HealthCheck.too_slow],
)


def valid_frames() -> list[bytes]:
    commands = [
        RemotingCommand(11, ext_fields={"topic": "T", "queueId": "1"}, remark="ok", body=b"xyz"),
        RemotingCommand(-1000, flag=1, opaque=-3, body=b""),
        RemotingCommand(34, ext_fields={"k": "v" * 40}, language="GO"),
    ]
    return [encode_frame(c, kind)[4:] for c in commands for kind in SerializeType]


def valid_records() -> list[bytes]:
    compressed, _ = maybe_compress(b"z" * 5000)
    return [
        encode_stored_message(topic="T", body=b"hello", properties_raw="TAGS\x01a\x02KEYS\x01b"),
        encode_stored_message(
            topic="Topic2",
            body=compressed,
            sys_flag=ZLIB_COMPRESSED_SYS_FLAG,
            born_host="[::1]:5",
            store_host="[2001:db8::7]:10911",
        ),
        encode_stored_message(topic="V2", body=b"", magic_code=MAGIC_CODE_V2),
    ]


FRAMES = valid_frames()
RECORDS = valid_records()
BATCH = encode_batch([Message("T", b"a", tags="x"), Message("T", b"bb", keys="k")])


@st.composite
def mutated(draw: st.DrawFn, sources: list[bytes]) -> bytes:
    """A valid input with a few bytes overwritten, inserted or dropped, then maybe cut."""
    data = bytearray(draw(st.sampled_from(sources)))
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["set", "insert", "delete", "int"]))
        if action == "set":
            data[at] = draw(st.integers(0, 255))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif action == "delete":
            del data[at]
        else:
            value = draw(st.sampled_from([-1, 0, 1, 127, 128, 255, 32767, -32768, 2**31 - 1]))
            data[at : at + 4] = struct.pack(">i", value)
    cut = draw(st.one_of(st.none(), st.integers(0, len(data))))
    return bytes(data if cut is None else data[:cut])


def decode_frame_or_frame_error(data: bytes) -> None:
    try:
        cmd = decode_frame(data)
    except FrameError as exc:
        assert str(exc).startswith("malformed frame:")
    else:
        assert isinstance(cmd.body, bytes)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in cmd.ext_fields.items())


@FUZZ
@given(st.binary(max_size=300))
def test_decode_frame_random_bytes(data: bytes) -> None:
    decode_frame_or_frame_error(data)


@FUZZ
@given(mutated(FRAMES))
def test_decode_frame_mutated(data: bytes) -> None:
    decode_frame_or_frame_error(data)


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=40), mutated(FRAMES)), max_size=6))
def test_frame_decoder_stream_of_garbage(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    for chunk in chunks:
        try:
            for cmd in decoder.feed(chunk):
                assert isinstance(cmd, RemotingCommand)
        except FrameError:
            assert decoder.failed
            with pytest.raises(FrameError, match="already failed"):
                decoder.feed(b"\x00")
            return
        assert decoder.buffered < 4096 + len(chunk)


@FUZZ
@given(mutated(FRAMES), st.lists(st.integers(1, 50), max_size=10))
def test_frame_decoder_length_prefixed_mutations(frame: bytes, cuts: list[int]) -> None:
    stream = struct.pack(">i", len(frame)) + frame
    decoder = FrameDecoder()
    pos = 0
    try:
        for cut in [*cuts, len(stream)]:
            decoder.feed(stream[pos : pos + cut])
            pos += cut
    except FrameError:
        assert decoder.failed


def decode_messages_or_frame_error(data: bytes) -> None:
    try:
        messages = decode_messages(data)
    except FrameError as exc:
        assert str(exc).startswith("malformed message record #")
    else:
        assert sum(m.store_size for m in messages) == len(data)
        for m in messages:
            assert isinstance(m.topic, str)
            assert isinstance(m.properties, dict)
            m.offset_msg_id  # noqa: B018 - every decoded host must make an id


@FUZZ
@given(st.binary(max_size=300))
def test_decode_messages_random_bytes(data: bytes) -> None:
    decode_messages_or_frame_error(data)


@FUZZ
@given(st.lists(mutated(RECORDS), min_size=1, max_size=3))
def test_decode_messages_mutated(records: list[bytes]) -> None:
    decode_messages_or_frame_error(b"".join(records))


@FUZZ
@given(st.one_of(st.binary(max_size=200), mutated([BATCH])))
def test_decode_batch_garbage(data: bytes) -> None:
    try:
        entries = decode_batch(data)
    except FrameError as exc:
        assert str(exc).startswith("malformed batch message #")
    else:
        assert all(isinstance(e.body, bytes) for e in entries)


def _reference_json_header(cmd: RemotingCommand) -> bytes:
    """What json.dumps makes of the header, field for field as fastjson orders it."""
    import json

    from rmqk.wire.frame import _language_name

    header: dict[str, object] = {
        "code": cmd.code,
        "extFields": dict(cmd.ext_fields),
        "flag": cmd.flag,
        "language": _language_name(cmd.language),
        "opaque": cmd.opaque,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(-(2**31), 2**31 - 1),
    fields=st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=8),
    remark=st.none() | st.text(max_size=30),
    flag=st.integers(0, 3),
    language=st.sampled_from([0, 7, 12, 99, "RUST", "JAVA"]),
)
def test_hand_written_json_header_is_what_json_dumps_gives(
    code: int, fields: dict[str, str], remark: str | None, flag: int, language: int | str
) -> None:
    from rmqk.wire.frame import encode_header

    cmd = RemotingCommand(code, ext_fields=fields, remark=remark, flag=flag, language=language)
    try:
        expected = _reference_json_header(cmd)
    except UnicodeEncodeError:  # lone surrogates: both refuse them
        with pytest.raises(ValueError, match="UTF-8"):
            encode_header(cmd)
        return
    assert encode_header(cmd) == expected


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(["UNIQ_KEY", "UNIQ_KEYX", "XUNIQ_KEY", "\x01", "\x02", "a", "K"]),
        max_size=12,
    )
)
def test_one_property_found_without_parsing_agrees_with_parse_properties(parts: list[str]) -> None:
    from rmqk.model.message import parse_properties
    from rmqk.plugins.remoting.producer_calls import _property_value

    text = "".join(parts)
    assert _property_value(text, "UNIQ_KEY") == parse_properties(text).get("UNIQ_KEY", "")
