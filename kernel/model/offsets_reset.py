"""A queue whose offsets went backwards, and what rmqk does about it (issue 25).

A broker rebuilt with an empty store under the same name, or a topic deleted and
created again, hands out queue offsets from 0 again. Everything that recorded an
offset of the old queue (the group's offsets, an exactly-once sink's commit log,
a Spark checkpoint) would then take the new messages for ones already consumed:
they are skipped, silently. rmqk notices it where the recorded offset is above
the queue's max offset on the broker now, and follows ``on_offsets_reset``:

* ``fail`` (the default, as Spark's ``failOnDataLoss``): the consumer stops with
  one :class:`OffsetsWentBackwardsError` naming the queue, both offsets and the
  option that resumes;
* ``resume``: the queue starts afresh (as Java 4.9.8 does for every
  OFFSET_ILLEGAL answer), with a WARNING and the ``offsets_reset`` counter.

The kernel's value objects live here so that sinks (plugins) and the engine
speak of the same thing.
"""

from __future__ import annotations

import attrs

from rmqk.model.errors import RmqkError

__all__ = [
    "OFFSETS_RESET_CHOICES",
    "OFFSETS_RESET_OPTION",
    "OffsetsReset",
    "OffsetsWentBackwardsError",
]

OFFSETS_RESET_OPTION = "on_offsets_reset"
OFFSETS_RESET_CHOICES = ("fail", "resume")


@attrs.frozen
class OffsetsReset:
    """One queue seen with offsets below what was recorded for it."""

    topic: str
    broker: str
    queue_id: int
    # The offset recorded for the queue: the next one to pull or to write.
    recorded: int
    # The queue's max offset on the broker now (the next offset it will store).
    current: int
    # Who had recorded ``recorded``: "the consumer group", "the sqlite sink's commit log".
    recorded_by: str
    # Where the queue starts afresh with on_offsets_reset = "resume": its min offset.
    first: int = 0

    def describe(self) -> str:
        return (
            f"the offsets of topic {self.topic}, broker {self.broker}, queue {self.queue_id} "
            f"went backwards: {self.recorded_by} recorded offset {self.recorded}, the queue's "
            f"max offset on the broker is now {self.current} (a broker rebuilt with an empty "
            "store, or the topic deleted and created again)"
        )


class OffsetsWentBackwardsError(RmqkError):
    """A queue's offsets went backwards and ``on_offsets_reset`` is ``fail``."""

    def __init__(self, reset: OffsetsReset) -> None:
        self.reset = reset
        super().__init__(
            f"{reset.describe()}; its new messages would be skipped as already consumed, "
            f'so the consumer stopped. Set {OFFSETS_RESET_OPTION} = "resume" in the '
            "consumer's options to start the queue afresh from the broker's offsets"
        )
