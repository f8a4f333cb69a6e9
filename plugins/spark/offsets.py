"""Offsets of the ``rocketmq`` source: the checkpointed JSON, the starting/ending options
and the per-trigger limit. Pure functions; the broker lookups live in ``pull.py``.

A source offset is a JSON object from ``"<topic>@<broker>@<queueId>"`` to the
next offset to read in that queue (Spark keeps it in the checkpoint; keys are
strings because JSON object keys are).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "QueueKey",
    "cap_offsets",
    "offset_key",
    "parse_offset_key",
    "parse_offset_spec",
    "parse_timestamp_spec",
    "split_ranges",
]

# The sentinels of the RocketMQ Spark connector and of Kafka's source.
EARLIEST = -2
LATEST = -1


@attrs.frozen(order=True)
class QueueKey:
    topic: str
    broker: str
    queue_id: int

    def __str__(self) -> str:
        return offset_key(self.topic, self.broker, self.queue_id)


def offset_key(topic: str, broker: str, queue_id: int) -> str:
    return f"{topic}@{broker}@{queue_id}"


def parse_offset_key(key: str) -> QueueKey:
    topic, sep, rest = key.partition("@")
    broker, sep2, qid = rest.rpartition("@")
    if not sep or not sep2 or not topic or not broker or not qid.isdigit():
        raise ValueError(f"not a queue key 'topic@broker@queueId': {key!r}")
    return QueueKey(topic, broker, int(qid))


@attrs.frozen
class OffsetSpec:
    """Where to start (or end): ``earliest``, ``latest``, a timestamp, or per queue.

    ``specific`` pairs queues with offsets, where -2 means the queue's earliest
    and -1 its latest; queues it does not name take ``default`` (``earliest`` or
    ``latest``). (Pairs, not a mapping: Spark pickles the readers holding this.)
    """

    # "earliest" | "latest" | "timestamp" | "specific" | "timestamps" (``specific``
    # then pairs queues with timestamps in ms).
    kind: str
    timestamp_ms: int | None = None
    specific: tuple[tuple[QueueKey, int], ...] = ()
    default: str = "earliest"

    def offset_for(self, key: QueueKey) -> int | None:
        for k, offset in self.specific:
            if k == key:
                return offset
        return None

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp_ms}"
        if self.kind == "specific":
            return f"{len(self.specific)} queue offset(s), others {self.default}"
        if self.kind == "timestamps":
            return f"{len(self.specific)} queue timestamp(s), others {self.default}"
        return self.kind


def _problem(option: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem("<spark options>", "rocketmq", option, message)])


def parse_offset_spec(text: str | None, option: str, default: str) -> OffsetSpec:
    """Parse ``startingOffsets`` / ``endingOffsets``.

    Accepted: ``earliest``, ``latest``, a timestamp (milliseconds since the
    epoch, or ISO 8601 such as ``2024-05-01T12:00:00Z``; ``startingOffsets``
    only), or JSON, either flat ``{"Orders@broker-a@0": 42}`` or nested
    ``{"Orders": {"broker-a": {"0": 42}}}``.
    """
    if text is None or not str(text).strip():
        return OffsetSpec(default, default=default)
    value = str(text).strip()
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(lowered, default=default)
    if value.startswith("{"):
        return OffsetSpec("specific", specific=_parse_json_offsets(value, option), default=default)
    timestamp = _parse_timestamp(value)
    if timestamp is None:
        raise _problem(
            option,
            "must be earliest, latest, a timestamp (ms since the epoch or ISO 8601) or a "
            f'JSON object such as {{"Orders@broker-a@0": 42}}; got {value!r}',
        )
    return OffsetSpec("timestamp", timestamp_ms=timestamp, default=default)


def parse_timestamp_spec(text: str, option: str, default: str) -> OffsetSpec:
    """Parse ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON keyed as
    JSON offsets are, with timestamps (ms since the epoch) for values."""
    specific = _parse_json_offsets(str(text).strip(), option, timestamps=True)
    return OffsetSpec("timestamps", specific=specific, default=default)


def _parse_timestamp(value: str) -> int | None:
    if value.isdigit():
        return int(value)
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.UTC)
    return int(parsed.timestamp() * 1000)


def _parse_json_offsets(
    value: str, option: str, *, timestamps: bool = False
) -> tuple[tuple[QueueKey, int], ...]:
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise _problem(option, f"is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _problem(
            option, f"JSON {'timestamps' if timestamps else 'offsets'} must be an object"
        )
    out: dict[QueueKey, int] = {}

    def put(key: QueueKey, offset: Any) -> None:
        lowest = 0 if timestamps else EARLIEST
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
            what = (
                "timestamp of {key} must be an integer >= 0 (ms since the epoch)"
                if timestamps
                else "offset of {key} must be an integer >= 0, or -2 (earliest) / -1 (latest)"
            )
            raise _problem(option, f"{what.format(key=key)}; got {offset!r}")
        out[key] = offset

    for key, item in data.items():
        if isinstance(item, dict):
            for broker, queues in item.items():
                if not isinstance(queues, dict):
                    raise _problem(option, f"{key}.{broker} must map queue ids to offsets")
                for qid, offset in queues.items():
                    if not str(qid).isdigit():
                        raise _problem(
                            option, f"queue id {qid!r} of {key}.{broker} is not a number"
                        )
                    put(QueueKey(key, broker, int(qid)), offset)
        else:
            try:
                put(parse_offset_key(key), item)
            except ValueError as exc:
                raise _problem(option, str(exc)) from None
    return tuple(sorted(out.items()))


def cap_offsets(start: Mapping[str, int], end: Mapping[str, int], max_rows: int) -> dict[str, int]:
    """``end`` limited so that at most ``max_rows`` offsets are read in total.

    The budget is shared fairly: each round gives every queue with a backlog an
    equal share (at least one), so a small queue is never starved by a big one.
    Queues are visited in key order, which makes the result deterministic.
    """
    result = {k: int(start[k]) if k in start else int(v) for k, v in end.items()}
    backlog = {
        k: int(end[k]) - int(start[k]) for k in sorted(end) if k in start and end[k] > start[k]
    }
    budget = max_rows
    while budget > 0 and backlog:
        share = max(1, budget // len(backlog))
        for k in list(backlog):
            if budget <= 0:
                break
            take = min(share, backlog[k], budget)
            result[k] += take
            backlog[k] -= take
            budget -= take
            if backlog[k] == 0:
                del backlog[k]
    return result


def split_ranges(
    ranges: Sequence[tuple[str, int, int]], min_parts: int
) -> list[tuple[str, int, int]]:
    """``ranges`` (key, start, end) cut into at least ``min_parts`` consecutive pieces.

    As Kafka's ``minPartitions``: nothing changes when there are enough ranges
    already; otherwise each range gets pieces in proportion to its size, and the
    pieces still missing go one by one to the range whose pieces are biggest, so
    the result has ``min_parts`` pieces unless the ranges hold fewer offsets.
    Deterministic, so a replayed batch plans the same pieces.
    """
    if len(ranges) >= min_parts:
        return list(ranges)
    sizes = [end - start for _, start, end in ranges]
    total = sum(sizes)
    parts = [max(1, min(size, size * min_parts // total)) for size in sizes]
    while sum(parts) < min_parts:
        # The range whose pieces are the biggest, that can still be cut (first on a tie).
        best = max(
            (i for i, size in enumerate(sizes) if parts[i] < size),
            key=lambda i: (sizes[i] / parts[i], -i),
            default=None,
        )
        if best is None:
            break  # every piece is one offset
        parts[best] += 1
    out: list[tuple[str, int, int]] = []
    for (key, start, _), size, n in zip(ranges, sizes, parts, strict=True):
        step, extra = divmod(size, n)
        at = start
        for piece in range(n):
            length = step + (1 if piece < extra else 0)
            out.append((key, at, at + length))
            at += length
    return out
