"""RocketMQ 4.9 remoting frames: the bytes of a :class:`~rmqk.wire.protocol.RemotingCommand`.

A frame on the wire is::

    length:i32 | serializeType:u8 headerLength:u24 | header | body

``length`` counts everything after itself (4 + header + body). All integers are
big-endian. The header is JSON (fastjson's rendering of Java's RemotingCommand)
or the ROCKETMQ binary layout of ``RocketMQSerializable``; a peer answers in the
type of the request, so both are decoded everywhere.

:func:`decode_frame` takes a frame *without* its length prefix, as Netty's
``LengthFieldBasedFrameDecoder`` hands it to Java's ``RemotingCommand.decode``;
:class:`FrameDecoder` cuts a byte stream into such frames.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from typing import NamedTuple

from rmqk.model.errors import FrameError
from rmqk.wire.compiled_headers import DECODE as _compiled_decode_header
from rmqk.wire.compiled_headers import ENCODE as _compiled_header
from rmqk.wire.protocol import LanguageCode, RemotingCommand

__all__ = [
    "MAX_FRAME_SIZE",
    "DecodedFrame",
    "FrameDecoder",
    "SerializeType",
    "decode_frame",
    "decode_frame_typed",
    "encode_frame",
    "encode_frame_head",
    "encode_header",
]

# Java's default ``com.rocketmq.remoting.frameMaxLength``. Netty compares it with the
# length field *plus* the 4 bytes of the field itself.
MAX_FRAME_SIZE = 16 * 1024 * 1024
_MAX_HEADER_LENGTH = 0xFFFFFF

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">iI")
# code, language, version, opaque, flag, remark length
_BIN_FIXED = struct.Struct(">hBhiii")
_BIN_FIXED_TOTAL = _BIN_FIXED.size + 4  # plus the ext fields length: 21 bytes

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT16_MIN = -(2**15)
_INT16_MAX = 2**15 - 1

# LanguageCode values that newer peers send and our enum does not list (5.x NODE_JS).
_EXTRA_LANGUAGES = {"NODE_JS": 13}
_LANGUAGE_BY_NAME = {code.name: code for code in LanguageCode}
_LANGUAGE_BY_VALUE = {int(code): code for code in LanguageCode}


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


class DecodedFrame(NamedTuple):
    """A decoded command and the header type it arrived in (answers use the same type).

    A NamedTuple rather than an attrs class: one is made per frame, and building a
    frozen attrs instance costs more than decoding a small binary header.
    """

    command: RemotingCommand
    serialize_type: SerializeType


_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ


# ----------------------------------------------------------------------------- encode


def _check_int(name: str, value: int, low: int, high: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{where}: {name}={value} is outside [{low}, {high}]")
    return value


def _language_name(language: int | str) -> str | int:
    if isinstance(language, LanguageCode):
        return language.name
    if isinstance(language, str):
        return language
    known = _LANGUAGE_BY_VALUE.get(language)
    # fastjson reads an enum from its ordinal too, which equals the code for every
    # LanguageCode, so an unknown code is written as a number rather than invented.
    return known.name if known is not None else language


def _language_byte(language: int | str) -> int:
    if isinstance(language, str):
        known = _LANGUAGE_BY_NAME.get(language)
        if known is not None:
            return int(known)
        # A name neither we nor Java 4.9 know has no byte; OTHER is Java's catch-all.
        return _EXTRA_LANGUAGES.get(language, int(LanguageCode.OTHER))
    return _check_int("language", int(language), 0, 255, "ROCKETMQ header")


# json.dumps(ensure_ascii=False)'s own string escaper (C), so the header written by
# hand below is byte for byte what json.dumps would give, without building an
# encoder per call.
_json_str = json.encoder.encode_basestring


# The JSON text of each language a header can name without the slow path: the
# enum members, their values and their names (all give the same text there).
_LANGUAGE_TEXT: dict[object, str] = {
    **{code: code.name for code in LanguageCode},
    **{code.name: code.name for code in LanguageCode},
}


def _json_header(cmd: RemotingCommand) -> bytes:
    compiled = _compiled_header
    if compiled is not None:
        language = _LANGUAGE_TEXT.get(cmd.language)
        if language is not None:
            header = compiled(
                cmd.code,
                cmd.ext_fields,
                cmd.flag,
                language,
                cmd.opaque,
                cmd.remark,
                cmd.version,
            )
            if header is not None:
                return header
    return _python_json_header(cmd)


def _python_json_header(cmd: RemotingCommand) -> bytes:
    where = "JSON header"
    code, version, opaque, flag = cmd.code, cmd.version, cmd.opaque, cmd.flag
    for name, value in (("code", code), ("version", version), ("opaque", opaque), ("flag", flag)):
        if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
            _check_int(name, value, _INT32_MIN, _INT32_MAX, where)
    esc = _json_str
    try:
        ext = ",".join([esc(k) + ":" + esc(v) for k, v in cmd.ext_fields.items()])
    except TypeError:
        _checked_fields(cmd.ext_fields)  # says which field is not a str
        raise
    language = _language_name(cmd.language)
    # fastjson's field order (alphabetical); null remark is left out as fastjson does.
    text = "".join(
        (
            '{"code":',
            str(code),
            ',"extFields":{',
            ext,
            '},"flag":',
            str(flag),
            ',"language":',
            esc(language) if isinstance(language, str) else str(language),
            ',"opaque":',
            str(opaque),
            "" if cmd.remark is None else ',"remark":' + esc(cmd.remark),
            ',"serializeTypeCurrentRPC":"JSON","version":',
            str(version),
            "}",
        )
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: text is not encodable as UTF-8: {exc}") from None


def _checked_fields(fields: Mapping[str, str]) -> Mapping[str, str]:
    for key, value in fields.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"ext field {key!r}={value!r}: keys and values must be str "
                "(use RemotingCommand.request / stringify_fields for typed values)"
            )
    return fields


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"ROCKETMQ header: {what} is not encodable as UTF-8: {exc}") from None


def _binary_header(cmd: RemotingCommand) -> bytes:
    where = "ROCKETMQ header"
    # Java casts code and version to short; a value that does not fit would arrive as
    # a different number, so refuse it (5.x POP codes only fit the JSON header).
    _check_int("code", cmd.code, _INT16_MIN, _INT16_MAX, where)
    _check_int("version", cmd.version, _INT16_MIN, _INT16_MAX, where)
    _check_int("opaque", cmd.opaque, _INT32_MIN, _INT32_MAX, where)
    _check_int("flag", cmd.flag, _INT32_MIN, _INT32_MAX, where)
    remark = _utf8(cmd.remark, "remark") if cmd.remark else b""
    parts: list[bytes] = []
    for key, value in _checked_fields(cmd.ext_fields).items():
        kb = _utf8(key, f"ext field key {key!r}")
        vb = _utf8(value, f"ext field {key!r}")
        if len(kb) > _INT16_MAX:
            raise ValueError(f"{where}: ext field key of {len(kb)} bytes exceeds 32767")
        parts += (_I16.pack(len(kb)), kb, _I32.pack(len(vb)), vb)
    ext = b"".join(parts)
    fixed = _BIN_FIXED.pack(
        cmd.code, _language_byte(cmd.language), cmd.version, cmd.opaque, cmd.flag, len(remark)
    )
    return b"".join((fixed, remark, _I32.pack(len(ext)), ext))


def encode_header(
    cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON
) -> bytes:
    """The header bytes alone (what the second length word counts)."""
    if serialize_type == SerializeType.JSON:
        return _json_header(cmd)
    if serialize_type == SerializeType.ROCKETMQ:
        return _binary_header(cmd)
    raise ValueError(f"unknown serialize type {serialize_type!r}")


def encode_frame_head(
    cmd: RemotingCommand,
    serialize_type: SerializeType = SerializeType.JSON,
    *,
    max_frame_size: int | None = MAX_FRAME_SIZE,
) -> bytes:
    """Everything of the frame except the body: write ``cmd.body`` right after it.

    Lets a sender hand a multi-megabyte body to the socket without joining it
    into a new buffer first.
    """
    # JSON, every request of a consumer, without the dispatch of encode_header.
    header = (
        _json_header(cmd)
        if serialize_type is SerializeType.JSON
        else encode_header(cmd, serialize_type)
    )
    if len(header) > _MAX_HEADER_LENGTH:
        raise ValueError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    length = 4 + len(header) + len(cmd.body)
    if max_frame_size is not None and length + 4 > max_frame_size:
        raise ValueError(
            f"frame of {length + 4} bytes (code {cmd.code}, body {len(cmd.body)} bytes) "
            f"exceeds the {max_frame_size}-byte frame limit peers enforce"
        )
    return _PREFIX.pack(length, (int(serialize_type) << 24) | len(header)) + header


def encode_frame(
    cmd: RemotingCommand,
    serialize_type: SerializeType = SerializeType.JSON,
    *,
    max_frame_size: int | None = MAX_FRAME_SIZE,
) -> bytes:
    """The complete frame of ``cmd``, including the leading 4-byte length.

    Raises ValueError for a command that cannot be represented: a frame over
    ``max_frame_size`` (None disables the check), a header over 16 MiB, or numbers
    outside the widths of the chosen header type.
    """
    head = encode_frame_head(cmd, serialize_type, max_frame_size=max_frame_size)
    if not cmd.body:
        return head
    return b"".join((head, cmd.body))


# ----------------------------------------------------------------------------- decode


def _bad(message: str) -> FrameError:
    return FrameError(f"malformed frame: {message}")


def _json_int(obj: Mapping[str, object], name: str, default: int | None) -> int:
    value = obj.get(name)
    if value is None:
        if default is None:
            raise _bad(f"JSON header has no {name!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"JSON header field {name!r} must be an integer, got {value!r:.80}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise _bad(f"JSON header field {name!r}={value} does not fit a 32-bit int")
    return value


def _json_language(value: object) -> int | str:
    if value is None:
        return LanguageCode.JAVA  # Java's default when the field is absent
    if isinstance(value, str):
        return _LANGUAGE_BY_NAME.get(value, value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _LANGUAGE_BY_VALUE.get(value, value)
    raise _bad(f"JSON header field 'language' must be a name or a number, got {value!r:.80}")


def _decode_json_header(header: bytes) -> RemotingCommand:
    parts = None if _compiled_decode_header is None else _compiled_decode_header(header)
    if parts is None:
        return _python_decode_json_header(header)
    code, fields, flag, language, opaque, remark, version = parts
    cmd = RemotingCommand(
        code,
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=_json_language(language),
        version=version,
    )
    cmd.ext_fields = fields
    return cmd


def _python_decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _bad(f"JSON header is not UTF-8 (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise _bad(
            f"JSON header ({len(header)} bytes) is not valid JSON: {exc.msg} at char {exc.pos}"
        ) from None
    except (ValueError, RecursionError) as exc:
        # Over-long integers and absurd nesting are refused by the parser itself.
        raise _bad(f"JSON header ({len(header)} bytes) cannot be parsed: {exc}") from None
    if obj.__class__ is not dict:
        raise _bad(f"JSON header is a {type(obj).__name__}, not an object")
    get = obj.get
    remark = get("remark")
    if remark is not None and remark.__class__ is not str:
        raise _bad(f"JSON header field 'remark' must be a string, got {remark!r:.80}")
    raw_fields = get("extFields")
    fields: dict[str, str] = {}
    if raw_fields:
        if raw_fields.__class__ is not dict:
            raise _bad(f"JSON header field 'extFields' must be an object, got {raw_fields!r:.80}")
        for key, value in raw_fields.items():
            if value.__class__ is str:
                fields[key] = value
            elif value is not None:  # a null value is an absent field, as in Java
                raise _bad(f"JSON header ext field {key!r} must be a string, got {value!r:.80}")
    elif raw_fields is not None and raw_fields.__class__ is not dict:
        raise _bad(f"JSON header field 'extFields' must be an object, got {raw_fields!r:.80}")
    code = get("code")
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    version = get("version", 0)
    # json gives exact ints (never bool subclasses by class identity) within range
    # of the checks below; anything else goes to the slow path for its message.
    if not (
        code.__class__ is int
        and opaque.__class__ is int
        and flag.__class__ is int
        and version.__class__ is int
        and _INT32_MIN <= code <= _INT32_MAX
        and _INT32_MIN <= opaque <= _INT32_MAX
        and _INT32_MIN <= flag <= _INT32_MAX
        and _INT32_MIN <= version <= _INT32_MAX
    ):
        code = _json_int(obj, "code", None)
        opaque = _json_int(obj, "opaque", 0)
        flag = _json_int(obj, "flag", 0)
        version = _json_int(obj, "version", 0)
    cmd = RemotingCommand(
        code,
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=_json_language(get("language")),
        version=version,
    )
    cmd.ext_fields = fields
    return cmd


def _decode_binary_header(header: bytes) -> RemotingCommand:
    size = len(header)
    if size < _BIN_FIXED_TOTAL:
        raise _bad(f"ROCKETMQ header of {size} bytes is shorter than the fixed {_BIN_FIXED_TOTAL}")
    code, language, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(header, 0)
    pos = _BIN_FIXED.size
    if remark_len < 0 or remark_len > size - pos - 4:
        raise _bad(
            f"ROCKETMQ header: remark length {remark_len} at header offset {pos - 4} "
            f"does not fit the {size - pos} bytes left before the ext fields length"
        )
    what = "remark"
    key = ""
    try:
        # Java reads a zero-length string as null.
        remark = header[pos : pos + remark_len].decode("utf-8") if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(header, pos)
        pos += 4
        if ext_len < 0 or ext_len > size - pos:
            raise _bad(
                f"ROCKETMQ header: ext fields length {ext_len} at header offset {pos - 4} "
                f"does not fit the {size - pos} bytes left in the header"
            )
        end = pos + ext_len
        if end != size:
            raise _bad(f"ROCKETMQ header has {size - end} bytes after its ext fields")
        fields: dict[str, str] = {}
        unpack_i16 = _I16.unpack_from
        unpack_i32 = _I32.unpack_from
        while pos < end:
            if end - pos < 2:
                raise _bad(
                    f"ROCKETMQ header: ext field key length truncated at header offset {pos}"
                )
            key_len = unpack_i16(header, pos)[0]
            pos += 2
            if key_len < 0 or key_len > end - pos - 4:
                raise _bad(
                    f"ROCKETMQ header: ext field key length {key_len} at header offset "
                    f"{pos - 2} does not fit the {end - pos} bytes left in the ext fields"
                )
            what = "ext field key"
            key = header[pos : pos + key_len].decode("utf-8")
            pos += key_len
            value_len = unpack_i32(header, pos)[0]
            pos += 4
            if value_len < 0 or value_len > end - pos:
                raise _bad(
                    f"ROCKETMQ header: length {value_len} of ext field {key!r} at header "
                    f"offset {pos - 4} does not fit the {end - pos} bytes left in the ext fields"
                )
            what = "ext field"
            value = header[pos : pos + value_len].decode("utf-8")
            pos += value_len
            # Java reads empty strings as null: such an entry is an absent field.
            if key and value:
                fields[key] = value
    except UnicodeDecodeError as exc:
        name = f"ext field {key!r}" if what == "ext field" else what
        raise _bad(
            f"ROCKETMQ header: {name} at header offset {pos} is not UTF-8 "
            f"(byte {exc.start}: {exc.reason})"
        ) from None
    cmd = RemotingCommand(
        code,
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=_LANGUAGE_BY_VALUE.get(language, language),
        version=version,
    )
    cmd.ext_fields = fields
    return cmd


def _decode(frame: bytes | memoryview) -> DecodedFrame:
    """Decode a frame held in bytes or in a one-dimensional byte memoryview."""
    length = len(frame)
    if length < 4:
        raise _bad(f"frame of {length} bytes has no header length word")
    (word,) = _U32.unpack_from(frame, 0)
    header_len = word & 0xFFFFFF
    kind = word >> 24
    if header_len > length - 4:
        raise _bad(
            f"header length {header_len} exceeds the {length - 4} bytes after the "
            f"header length word (frame of {length} bytes)"
        )
    # bytes() of a bytes slice is that slice; of a memoryview slice, one copy.
    header = bytes(frame[4 : 4 + header_len])
    if kind == 0:
        cmd = _decode_json_header(header)
        serialize_type = _JSON
    elif kind == 1:
        cmd = _decode_binary_header(header)
        serialize_type = _ROCKETMQ
    else:
        raise _bad(f"unknown serialize type {kind} (header length word 0x{word:08x})")
    if 4 + header_len < length:
        cmd.body = bytes(frame[4 + header_len :])
    return DecodedFrame(cmd, serialize_type)


def _as_frame(frame: bytes | bytearray | memoryview) -> bytes | memoryview:
    if isinstance(frame, bytes):
        return frame
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def decode_frame_typed(frame: bytes | bytearray | memoryview) -> DecodedFrame:
    """:func:`decode_frame`, also telling which header type the frame used."""
    return _decode(_as_frame(frame))


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame given without its 4-byte length prefix.

    Both header types are accepted; a language the enum does not know is kept as
    its name or number. Anything malformed raises :class:`~rmqk.model.errors.FrameError`
    saying what and where. The body is a fresh ``bytes`` (b"" when absent).
    """
    return _decode(_as_frame(frame)).command


# ----------------------------------------------------------------------------- stream


class FrameDecoder:
    """Cuts a byte stream into commands, keeping a partial frame between calls.

    A frame larger than ``max_frame_size`` (counting its length word, as Netty does)
    is refused as soon as its length is read, before its bytes are buffered. After
    any :class:`~rmqk.model.errors.FrameError` the decoder stays failed: the stream has
    lost its framing and the connection must be closed.
    """

    __slots__ = ("_buf", "_failure", "_max")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = max_frame_size
        self._failure: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Add bytes read from the connection; return the commands now complete."""
        return [decoded.command for decoded in self.feed_typed(data)]

    def feed_typed(self, data: bytes | bytearray | memoryview) -> list[DecodedFrame]:
        """:meth:`feed`, with the header type of each frame."""
        if self._failure is not None:
            raise FrameError(f"frame decoder already failed: {self._failure}")
        buf = self._buf
        buf += data
        out: list[DecodedFrame] = []
        pos = 0
        end = len(buf)
        try:
            while end - pos >= 4:
                (length,) = _I32.unpack_from(buf, pos)
                if length < 4 or length + 4 > self._max:
                    what = (
                        "shorter than its 4-byte header length word"
                        if length < 4
                        else f"over the {self._max}-byte limit"
                    )
                    raise _bad(f"frame length {length} at stream offset +{pos} is {what}")
                stop = pos + 4 + length
                if stop > end:
                    break
                # The view must be gone before the buffer is resized below.
                with memoryview(buf) as view:
                    out.append(_decode(view[pos + 4 : stop]))
                pos = stop
        except FrameError as exc:
            self._failure = str(exc)
            self._buf = bytearray()
            raise
        if pos:
            # Deleting from the front of a bytearray only moves its start pointer.
            del buf[:pos]
        return out
