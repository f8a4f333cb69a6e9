"""Committing a lite pull consumer's offsets: to the store, then through to the brokers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rmqk.model import MessageModel, MessageQueue
from rmqk.model.errors import ClientError, RmqkError
from rmqk.spi.contracts import BrokerOffsetStore

if TYPE_CHECKING:
    from rmqk.engine.lite_pull.consumer import AsyncLitePullConsumer

__all__ = ["Committer"]


class Committer:
    """Chooses the offsets to commit, writes them, and runs auto commit's schedule."""

    __slots__ = ("_next_auto_commit", "consumer")

    def __init__(self, consumer: AsyncLitePullConsumer) -> None:
        self.consumer = consumer
        self._next_auto_commit = 0.0

    def to_store(
        self, offsets: Mapping[MessageQueue, int] | None, *, processed_only: bool
    ) -> dict[MessageQueue, int]:
        """Put the chosen offsets in the offset store's memory; returns them.

        Without ``offsets``: each held queue's consumed offset, or with
        ``processed_only`` what earlier polls returned.
        """
        consumer = self.consumer
        states = consumer.queues.states
        if offsets is None:
            chosen = {
                mq: (s.processed if processed_only else s.consume_offset)
                for mq, s in states.items()
                if not s.pq.dropped
            }
            chosen = {mq: off for mq, off in chosen.items() if off >= 0}
        else:
            chosen = dict(offsets)
            for mq, off in chosen.items():
                if mq not in states:
                    raise ClientError(f"cannot commit {mq}: this consumer does not hold it")
                if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                    raise ClientError(
                        f"cannot commit {mq}: offset must be an int >= 0, got {off!r}"
                    )
        for mq, off in chosen.items():
            consumer.offset_store.update_offset(mq, off, False)
        return chosen

    async def persist(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Write ``offsets`` through: confirmed broker updates in CLUSTERING, else the store."""
        if not offsets:
            return
        consumer = self.consumer
        store = consumer.offset_store
        if consumer.message_model is MessageModel.BROADCASTING or not isinstance(
            store, BrokerOffsetStore
        ):
            owned = set(consumer.queues.states) | set(offsets)
            await store.persist_all(owned)
            return
        results = await asyncio.gather(
            *(
                store.update_consume_offset_to_broker(mq, off, False)
                for mq, off in sorted(offsets.items())
            ),
            return_exceptions=True,
        )
        failed = [
            f"{mq}: {res}"
            for mq, res in zip(sorted(offsets), results, strict=True)
            if isinstance(res, BaseException)
        ]
        if failed:
            raise ClientError(
                f"committing offsets of group {consumer.group} failed for " + "; ".join(failed)
            )

    def maybe_auto_commit(self) -> None:
        """Commit what earlier polls returned, once every ``auto_commit_interval_ms``."""
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        consumer = self.consumer
        self._next_auto_commit = now + consumer.lite_options.auto_commit_interval_ms / 1000
        chosen = self.to_store(None, processed_only=True)
        if chosen:
            consumer._spawn(self.persist_logged(chosen))

    async def persist_logged(
        self, offsets: Mapping[MessageQueue, int], *, forget: bool = False
    ) -> None:
        """:meth:`persist` in the background: a failure is logged, not raised.

        With ``forget``, offsets of queues no longer held leave the store afterwards.
        """
        consumer = self.consumer
        try:
            await self.persist(offsets)
        except RmqkError as exc:
            # The next auto commit, the periodic persist and close all send again.
            consumer.log.warning("auto commit of group %s failed: %s", consumer.group, exc)
        if forget:
            for mq in offsets:
                if mq not in consumer.queues.states:
                    consumer.offset_store.remove_offset(mq)

    def commit_async(self, offsets: Mapping[MessageQueue, int] | None) -> asyncio.Task[None]:
        consumer = self.consumer
        chosen = self.to_store(offsets, processed_only=False)
        task = asyncio.get_running_loop().create_task(self.persist(chosen), name="rmqk commit")
        consumer._track(task)
        task.add_done_callback(self._log_failure)
        return task

    def _log_failure(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.consumer.log.warning("asynchronous commit failed: %s", exc)
