"""Messages from the compiled decoder are not tracked by the cyclic GC, and work as before.

A sink keeps its whole window (hundreds of thousands of messages) in flight, and
every full collection walked them all: about a tenth of a second each, several
per backlog. A MessageExt's slots hold only str, bytes, int, None and (after a
pull) a tuple of ints, so it can be in no reference cycle.
"""

from __future__ import annotations

import gc

import pytest

from rmqk.model.message import MessageExt
from rmqk.wire import message_codec
from rmqk.wire.message_codec import encode_stored_message

needs_extension = pytest.mark.skipif(
    not message_codec.SPEEDUPS, reason="the compiled decoder is not built (or RMQK_NO_EXTENSIONS)"
)


def _decoded(count: int) -> list[MessageExt]:
    buf = b"".join(
        encode_stored_message(
            topic="T",
            body=b"x" * 10,
            queue_offset=i,
            born_host="127.0.0.1:1",
            store_host="127.0.0.1:2",
            properties_raw=f"TAGS\x01a\x02UNIQ_KEY\x01u{i}",
        )
        for i in range(count)
    )
    out: list[MessageExt] = []
    message_codec._decode_records(buf, 0, len(buf), "b", True, 0, 1 << 20, out)
    assert len(out) == count
    return out


@needs_extension
def test_compiled_messages_are_not_tracked_and_read_as_before() -> None:
    msgs = _decoded(50)
    assert [gc.is_tracked(m) for m in msgs] == [False] * 50
    assert [m.queue_offset for m in msgs] == list(range(50))
    assert msgs[3].tags == "a" and msgs[3].properties["UNIQ_KEY"] == "u3"
    msgs[3].set_queue_bounds((0, 9))
    assert msgs[3].properties["MAX_OFFSET"] == "9"
    # A full collection leaves untracked messages (and what they hold) alone and alive.
    gc.collect()
    assert msgs[49].body == b"x" * 10 and msgs[49].topic == "T"


def test_python_messages_work_whatever_their_tracking() -> None:
    msgs: list[MessageExt] = []
    buf = encode_stored_message(topic="T", body=b"b", born_host="127.0.0.1:1",
                                store_host="127.0.0.1:2", properties_raw="TAGS\x01z")  # fmt: skip
    message_codec._decode_records_py(buf, 0, len(buf), "b", True, 0, 1 << 20, msgs)
    gc.collect()
    assert msgs[0].tags == "z"
