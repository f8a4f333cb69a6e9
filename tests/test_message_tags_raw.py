"""MessageExt.tags read from the raw properties agrees with the full parse, whatever the bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqk.model.message import _AMBIGUOUS, MessageExt, _tags_in_raw, parse_properties


def consumed(raw: bytes) -> MessageExt:
    """A message as the decoder leaves it: properties still raw bytes."""
    msg = MessageExt(topic="T", body=b"")
    msg._props_raw = raw
    msg._props = None
    return msg


def parsed_tags(raw: bytes) -> str | None:
    return parse_properties(raw.decode("utf-8", "replace")).get("TAGS")


# Pieces that make the edge cases likely: separators, the key itself, bad UTF-8.
_PIECES = st.sampled_from(
    [b"TAGS", b"\x01", b"\x02", b"TAGS\x01", b"XTAGS\x01", b"a", b"paid", b"\xff", b"\xc3",
     b"\xc3\xa9", b"KEYS", b"UNIQ_KEY", b""]
)  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=6)), max_size=12))
def test_tags_equal_the_full_parse(pieces: list[bytes]) -> None:
    raw = b"".join(pieces)
    msg = consumed(raw)
    assert msg.tags == parsed_tags(raw)
    # Reading the tag must not have parsed (nor changed) anything else.
    assert msg.properties.get("TAGS") == parsed_tags(raw)


def test_plain_tags_are_read_without_parsing() -> None:
    raw = b"UNIQ_KEY\x01ABC\x02TAGS\x01paid\x02KEYS\x01k1\x02"
    msg = consumed(raw)
    assert msg.tags == "paid"
    assert msg._props is None  # the fast path answered
    assert consumed(b"KEYS\x01k\x02").tags is None
    assert consumed(b"").tags is None


def test_unclear_cases_fall_back_to_the_parse() -> None:
    # The last of a repeated key wins; an empty value is skipped; the key inside a value.
    for raw, expected in [
        (b"TAGS\x01a\x02TAGS\x01b\x02", "b"),
        (b"TAGS\x01a\x02TAGS\x01\x02", "a"),
        (b"K\x01xTAGS\x01y\x02", None),
        (b"TAGS\x01\xff\x02", "\ufffd"),
    ]:
        msg = consumed(raw)
        assert msg.tags == expected, raw
    assert _tags_in_raw(b"TAGS\x01a\x02TAGS\x01b\x02") is _AMBIGUOUS


def test_parsed_or_given_properties_are_read_as_before() -> None:
    msg = MessageExt(topic="T", body=b"", properties={"TAGS": "x"})
    assert msg.tags == "x"
    msg.properties["TAGS"] = "y"
    assert msg.tags == "y"
    raw_msg = consumed(b"TAGS\x01a\x02")
    raw_msg.properties["TAGS"] = "changed"
    assert raw_msg.tags == "changed"
