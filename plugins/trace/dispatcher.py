"""The asyncio AsyncTraceDispatcher: trace records queued, batched and sent in the background.

Java 4.9.8's numbers: a queue of 1024 records that refuses (and counts) rather
than blocks, a worker polling it every 100 ms, records of one trace topic
grouped until 500 ms old or close to the 128,000-byte message limit, and up to
2048 batches waiting to be sent. Batches go out with a producer of the
dispatcher's own (group ``_INNER_TRACE_PRODUCER-<group>-<type>-<n>``, instance
``PID_CLIENT_INNER_TRACE_PRODUCER_<namesrv>``), asynchronously, with a 5 s
timeout. rmqk also closes a batch at 100 records (Java's unused ``batchSize``),
so one trace message stays readable.

Nothing here ever waits on the consumer's path: :meth:`append` is a
non-blocking put. A record that finds the queue full, or whose batch could not
be sent (trace topic not writable, broker gone), is dropped and counted in
:attr:`discarded`; the first drop is logged as a warning, later ones at debug.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rmqk.model.message import Message
from rmqk.plugins.trace.records import TraceContext, TransferBean, encode

__all__ = ["RMQ_SYS_TRACE_TOPIC", "AsyncTraceDispatcher"]

log = logging.getLogger("rmqk.plugins.trace")

RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_TOPIC_PREFIX = "rmq_sys_TRACE_DATA_"
GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"
TRACE_INSTANCE_NAME = "PID_CLIENT_INNER_TRACE_PRODUCER"

_COUNTER = itertools.count(1)


class _Segment:
    """The records waiting for one trace topic (Java's TraceDataSegment)."""

    __slots__ = ("beans", "first_added", "size", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.beans: list[TransferBean] = []
        self.first_added = 0.0
        self.size = 0

    def add(self, bean: TransferBean) -> None:
        if not self.beans:
            self.first_added = time.monotonic()
        self.beans.append(bean)
        self.size += len(bean.data)

    def take(self) -> list[TransferBean]:
        beans, self.beans, self.size = self.beans, [], 0
        return beans


class AsyncTraceDispatcher:
    """Queues trace contexts and sends them in batches to the trace topic."""

    def __init__(
        self,
        group: str,
        kind: str,
        trace_topic: str | None,
        namesrv_addrs: Sequence[str],
        *,
        cloud: bool = False,
        transport: str = "tcp",
        transport_options: Mapping[str, Any] | None = None,
        connection: Mapping[str, Any] | None = None,
        queue_size: int = 1024,
        pending_batches: int = 2048,
        batch_size: int = 100,
        max_msg_size: int = 128_000,
        polling_ms: int = 100,
        wait_threshold_ms: int = 500,
        send_timeout_ms: int = 5000,
        flush_wait_ms: int = 3000,
    ) -> None:
        self.group = group
        self.kind = kind
        # The traced client's TLS and account options, for the trace producer.
        self.connection = dict(connection or {})
        self.trace_topic = trace_topic or RMQ_SYS_TRACE_TOPIC
        self.namesrv_addrs = tuple(namesrv_addrs)
        self.cloud = cloud
        self.transport = transport
        self.transport_options = dict(transport_options or {})
        self.batch_size = batch_size
        self.max_msg_size = max_msg_size
        self.polling_s = polling_ms / 1000
        self.wait_threshold_s = wait_threshold_ms / 1000
        self.send_timeout_ms = send_timeout_ms
        self.flush_wait_s = flush_wait_ms / 1000
        self.pending_batches = pending_batches
        self.producer_group = f"{GROUP_NAME_PREFIX}-{group}-{kind}-{next(_COUNTER)}"
        self.discarded = 0
        self.sent_records = 0
        self._queue: asyncio.Queue[TraceContext] = asyncio.Queue(queue_size)
        self._segments: dict[str, _Segment] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._producer: Any = None
        self._warned = False
        self._stopped = False

    # -- the consumer's and producer's side: never waits ---------------------------------

    def append(self, ctx: TraceContext) -> bool:
        """Queue ``ctx``; False (and counted) when the queue is full or the dispatcher stopped."""
        if self._stopped:
            return False
        try:
            self._queue.put_nowait(ctx)
        except asyncio.QueueFull:
            self._drop(1, "the trace queue is full")
            return False
        return True

    def _drop(self, records: int, why: str) -> None:
        self.discarded += records
        if not self._warned:
            self._warned = True
            log.warning(
                "trace records of %s dropped (%s); consumption and sends go on, "
                "later drops are counted (%s.discarded) and logged at debug",
                self.group,
                why,
                type(self).__name__,
            )
        else:
            log.debug("%d trace records dropped (%s), %d in all", records, why, self.discarded)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        from rmqk import AsyncProducer

        producer = AsyncProducer(
            self.producer_group,
            namesrv_addr=self.namesrv_addrs,
            instance_name=f"{TRACE_INSTANCE_NAME}_{';'.join(self.namesrv_addrs)}",
            send_msg_timeout=self.send_timeout_ms,
            max_message_size=self.max_msg_size,
            transport=self.transport,
            transport_options=self.transport_options,
            **self.connection,
        )
        await producer.start()
        self._producer = producer
        self._worker = asyncio.get_running_loop().create_task(
            self._run(), name=f"rmqk trace dispatcher {self.producer_group}"
        )

    async def shutdown(self) -> None:
        """Stop taking records, send what is queued (waiting at most ``flush_wait_ms``), stop."""
        if self._stopped:
            return
        self._stopped = True
        await self.flush()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        for task in list(self._sending):
            task.cancel()
        if self._producer is not None:
            await self._producer.shutdown()

    async def flush(self) -> None:
        """Send every queued record now and wait for the sends, at most ``flush_wait_ms``."""
        deadline = time.monotonic() + self.flush_wait_s
        self._drain_queue()
        for segment in self._segments.values():
            self._send(segment)
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=max(0.0, deadline - time.monotonic()))

    # -- the worker ----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                ctx = await asyncio.wait_for(self._queue.get(), self.polling_s)
            except TimeoutError:
                ctx = None
            if ctx is not None:
                self._add(ctx)
                self._drain_queue()
            now = time.monotonic()
            for segment in self._segments.values():
                if segment.beans and now - segment.first_added >= self.wait_threshold_s:
                    self._send(segment)

    def _drain_queue(self) -> None:
        while True:
            try:
                ctx = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            self._add(ctx)

    def _topic_for(self, ctx: TraceContext) -> str:
        # Java's getTraceTopicName: a cloud client writes to its region's trace topic.
        if self.cloud:
            return f"{TRACE_TOPIC_PREFIX}{ctx.region_id}"
        return self.trace_topic

    def _add(self, ctx: TraceContext) -> None:
        if not ctx.beans:
            return
        topic = self._topic_for(ctx)
        segment = self._segments.get(topic)
        if segment is None:
            segment = self._segments[topic] = _Segment(topic)
        segment.add(encode(ctx))
        if segment.size >= self.max_msg_size - 10_000 or len(segment.beans) >= self.batch_size:
            self._send(segment)

    def _send(self, segment: _Segment) -> None:
        beans = segment.take()
        if not beans:
            return
        if len(self._sending) >= self.pending_batches:
            self._drop(len(beans), "too many trace batches waiting to be sent")
            return
        task = asyncio.get_running_loop().create_task(self._send_batch(segment.topic, beans))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_batch(self, topic: str, beans: list[TransferBean]) -> None:
        keys: dict[str, None] = {}
        for bean in beans:
            keys.update(dict.fromkeys(bean.keys))
        data = "".join(b.data for b in beans)
        message = Message(topic, data.encode("utf-8"), keys=list(keys))
        try:
            await self._producer.send_async(message, timeout_ms=self.send_timeout_ms)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._drop(len(beans), f"sending to {topic} failed: {exc}")
            return
        self.sent_records += len(beans)
