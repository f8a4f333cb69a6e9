"""Whether a consume queue entry describes the commit log record it points at.

An entry is ``commitLogOffset size tagsCode``; the record it indexes names itself:
its PHYSICALOFFSET is its own position, its QUEUEID and QUEUEOFFSET are the entry's
queue and index, its TOTALSIZE is the entry's size and its TOPIC the queue's topic.
One flipped byte in an entry's offset makes it point into another record; served
as it is, the consumer gets bytes it cannot decode, skips them, and the message is
gone (issue 25). The store checks entries against their records when it opens
(everything, tags codes included, see ``recovery.check_queue_entries``) and when it
serves them (reads.py: the head of every record an unfiltered pull returns, this
whole check for each entry a filtered pull accepts), and rebuilds what does not
match from the commit log.

Verdicts:

* ``OK``: the record at the entry's offset is the entry's own, size and topic included.
* ``DAMAGED_RECORD``: the record there names itself and this entry, but its size
  (or the layout inside it) disagrees with the entry. The entry may be the damaged
  one (a rebuild finds the record) or the record may be (then nothing can be
  rebuilt; it is served as stored and the consumer's bad-record handling skips it,
  as for a record whose body fails its CRC).
* ``ELSEWHERE``: whatever is there is not this entry's record (out of the log, not a
  record head, another record). A rebuild finds the real one; if none is in the log,
  the entry is not served: its bytes would be another message or garbage.
"""

from __future__ import annotations

import struct
from typing import Final

from rmqk.wire.message_codec import MAGIC_CODE_V1, MAGIC_CODE_V2

from .records import MIN_RECORD_SIZE, Buffer

__all__ = ["DAMAGED_RECORD", "ELSEWHERE", "OK", "examine", "judge"]

OK: Final = 0
DAMAGED_RECORD: Final = 1
ELSEWHERE: Final = 2

# total magic bodyCRC queueId flag queueOffset physicalOffset sysFlag: the first 40 bytes.
_HEAD = struct.Struct(">iiiiiqqi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_BORN_V6 = 0x10
_STORE_V6 = 0x20


def judge(
    buf: Buffer,
    pos: int,
    avail: int,
    phys: int,
    size: int,
    queue_id: int,
    index: int,
    topic: bytes,
) -> int:
    """The verdict on entry ``index`` = (``phys``, ``size``) of ``topic``:``queue_id``.

    ``buf[pos:]`` holds the commit log bytes at ``phys``; ``avail`` is how many of
    them the log has there (to the end of the segment or of the written data,
    whichever is nearer), so nothing past them is read.
    """
    return examine(buf, pos, avail, phys, size, queue_id, index, topic)[0]


def examine(
    buf: Buffer,
    pos: int,
    avail: int,
    phys: int,
    size: int,
    queue_id: int,
    index: int,
    topic: bytes,
) -> tuple[int, int, int]:
    """(verdict, where the record's properties start, its store timestamp); the last two
    are meaningful for ``OK`` only (the properties then run to ``pos + size``)."""
    if avail < MIN_RECORD_SIZE:
        return ELSEWHERE, 0, 0
    total, magic, _crc, qid, _flag, qoff, at, sys_flag = _HEAD.unpack_from(buf, pos)
    if at != phys or qid != queue_id or qoff != index:
        return ELSEWHERE, 0, 0
    if magic != MAGIC_CODE_V1 and magic != MAGIC_CODE_V2:
        return ELSEWHERE, 0, 0
    if total != size or size > avail:
        return DAMAGED_RECORD, 0, 0
    end = pos + size
    p = pos + (68 if sys_flag & _BORN_V6 else 56)
    store_ts = _I64.unpack_from(buf, p)[0]
    p += 8 + (20 if sys_flag & _STORE_V6 else 8) + 12  # STOREHOST, RECONSUMETIMES, PREPARED..
    if p + 4 > end:
        return DAMAGED_RECORD, 0, 0
    p += 4 + _I32.unpack_from(buf, p)[0]
    if magic == MAGIC_CODE_V1:
        if p < pos or p + 1 > end:
            return DAMAGED_RECORD, 0, 0
        length = buf[p]
        p += 1
    else:
        if p < pos or p + 2 > end:
            return DAMAGED_RECORD, 0, 0
        length = _I16.unpack_from(buf, p)[0]
        p += 2
    if length < 0 or p + length + 2 > end:
        return DAMAGED_RECORD, 0, 0
    if buf[p : p + length] != topic:
        return ELSEWHERE, 0, 0
    p += length
    if p + 2 + _I16.unpack_from(buf, p)[0] != end:
        return DAMAGED_RECORD, 0, 0
    return OK, p + 2, store_ts
