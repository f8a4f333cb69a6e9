"""A pull body decoded record by record: bad records are skipped, never a reason to stall.

Java 4.9.8's ``MessageDecoder.decodes`` stops at the first record it cannot
decode and the consumer moves on to the broker's ``nextBeginOffset``: the bad
record and every record after it in that body are dropped without a word. rmqk
decoded all or nothing, so one bad record was pulled again every second, forever.
Here neither happens:

* a record whose lengths add up but whose content is bad (a body that does not
  inflate, or inflates past ``max_body_size``; an unreadable host) is skipped
  and decoding goes on with the next record;
* a record whose lengths do not add up hides where the next record starts, so
  the records before it are delivered and the next pull starts at it; once it is
  the first record of a pull, it alone is skipped.

A skipped record is identified by the queue offset in its own header when that
is believable (the pull's queue id, and within the offsets this pull can hold),
else by the first offset it can be at. The next pull always starts past the
pull's offset, and no offset is skipped that the body did not show to be bad.
"""

from __future__ import annotations

import struct

import attrs

from rmqk.model import SkippedRecord
from rmqk.model.message import MessageExt
from rmqk.wire.message_codec import (
    QUEUE_ID_OFFSET,
    QUEUE_OFFSET_OFFSET,
    RecordError,
    decode_records_into,
    record_total_size,
)

__all__ = ["DecodedPull", "decode_plain", "decode_pull_body"]

_QUEUE_HEADER = struct.Struct(">iiq")  # QUEUEID, FLAG, QUEUEOFFSET
_QUEUE_HEADER_END = QUEUE_OFFSET_OFFSET + 8


@attrs.frozen
class DecodedPull:
    messages: tuple[MessageExt, ...]
    skipped: tuple[SkippedRecord, ...]
    next_begin_offset: int


def _header_offset(data: bytes, at: int, queue_id: int, low: int, high: int) -> int | None:
    """The bad record's own queue offset, if it is one this pull could return."""
    if at + _QUEUE_HEADER_END > len(data):
        return None
    record_queue, _flag, offset = _QUEUE_HEADER.unpack_from(data, at + QUEUE_ID_OFFSET)
    if record_queue != queue_id or not low <= offset < high:
        return None
    return int(offset)


def decode_plain(
    body: bytes | bytearray | memoryview, broker_name: str, max_body_size: int
) -> tuple[MessageExt, ...] | None:
    """The records of a FOUND answer when every one decodes (what :func:`decode_pull_body`
    returns then, in fewer steps); None when one does not."""
    data = body if isinstance(body, bytes) else bytes(body)
    out: list[MessageExt] = []
    try:
        decode_records_into(out, data, 0, broker_name, max_body_size)
    except RecordError:
        return None
    return tuple(out)


def decode_pull_body(
    body: bytes | bytearray | memoryview,
    broker_name: str,
    *,
    queue_id: int,
    request_offset: int,
    next_begin_offset: int,
    max_body_size: int,
) -> DecodedPull:
    """The records of a FOUND answer to a pull of ``request_offset``, bad ones skipped."""
    data = body if isinstance(body, bytes) else bytes(body)
    end = len(data)
    out: list[MessageExt] = []
    skipped: list[SkippedRecord] = []
    last = request_offset - 1  # the highest queue offset accounted for
    off = 0
    while off < end:
        try:
            decode_records_into(out, data, off, broker_name, max_body_size)
            break
        except RecordError as exc:
            bad = exc
        if out:
            last = max(last, out[-1].queue_offset)
        offset = _header_offset(data, bad.offset, queue_id, last + 1, next_begin_offset)
        if bad.framed and offset is not None:
            skipped.append(SkippedRecord(offset, bad.reason))
            last = offset
            off = bad.offset + record_total_size(data, bad.offset)
            continue
        if out or skipped:
            # Where the records after it start is unknown: pull again from it.
            following = max(last + 1, request_offset + 1)
            if next_begin_offset > request_offset:
                following = min(following, next_begin_offset)
            return DecodedPull(tuple(out), tuple(skipped), following)
        at = request_offset if offset is None else offset
        skipped.append(SkippedRecord(at, bad.reason))
        return DecodedPull((), tuple(skipped), at + 1)
    return DecodedPull(tuple(out), tuple(skipped), next_begin_offset)
