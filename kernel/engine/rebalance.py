"""Rebalance (Java's RebalanceImpl / RebalancePushImpl).

The push consumer uses :class:`Rebalance` as it is; the lite pull consumer
subclasses it (Java's RebalanceLitePullImpl) and sets ``consume_type``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import attrs

from rmqk.engine.client import ClientInstance
from rmqk.engine.process_queue import ProcessQueue
from rmqk.model import (
    RETRY_GROUP_TOPIC_PREFIX,
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from rmqk.model.errors import RmqkError
from rmqk.options import ConsumerOptions
from rmqk.pluginmanager import call_event_hook
from rmqk.spi.contracts import AllocationStrategy, OffsetStore, ReadOffsetType

__all__ = ["Rebalance", "RebalanceMember"]

log = logging.getLogger("rmqk.engine.rebalance")

# rocketmq.client.unlockDelayTimeMills: a queue that still holds messages is unlocked later.
# The environment variable RMQK_UNLOCK_DELAY_MS overrides it, read when a Rebalance is built.
UNLOCK_DELAY_MS = 20_000
# rocketmq.client.rebalance.waitInterval: the periodic rebalance. The environment variable
# RMQK_REBALANCE_WAIT_INTERVAL_MS overrides it, read when a client instance is built.
REBALANCE_WAIT_INTERVAL_MS = 20_000


def _env_ms(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None else int(value)


def unlock_delay_ms() -> int:
    return _env_ms("RMQK_UNLOCK_DELAY_MS", UNLOCK_DELAY_MS)


def rebalance_wait_interval_ms() -> int:
    return _env_ms("RMQK_REBALANCE_WAIT_INTERVAL_MS", REBALANCE_WAIT_INTERVAL_MS)


def parse_consume_timestamp(text: str) -> int:
    """yyyyMMddHHmmss in local time, as Java's UtilAll.parseDate does, to epoch ms."""
    return int(time.mktime(time.strptime(text, "%Y%m%d%H%M%S")) * 1000)


class RebalanceMember(Protocol):
    """What a rebalance needs from its consumer (push or lite pull)."""

    group: str
    message_model: MessageModel
    options: ConsumerOptions
    client: ClientInstance
    client_id: str
    allocation_strategy: AllocationStrategy
    offset_store: OffsetStore
    consume_orderly: bool
    rebalance_listener: Callable[..., Any] | None

    def start_pulling(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None: ...

    def apply_topic_flow_control(self) -> None: ...

    async def max_offset(self, mq: MessageQueue) -> int: ...

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


class Rebalance:
    # Java's consumeType(): a queue whose pulls stalled is re-created only for push
    # consumers; a lite pull consumer's queue may stay paused by its user forever.
    consume_type = ConsumeType.CONSUME_PASSIVELY

    def __init__(self, consumer: RebalanceMember) -> None:
        self.consumer = consumer
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.topic_subscribe_info: dict[str, frozenset[MessageQueue]] = {}
        self.unlock_delay_ms = unlock_delay_ms()

    @property
    def group(self) -> str:
        return self.consumer.group

    # -- entry points ---------------------------------------------------------------

    async def do_rebalance(self, is_order: bool) -> None:
        for topic in list(self.subscription_inner):
            try:
                await self.rebalance_by_topic(topic, is_order)
            except Exception:
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    log.warning("rebalance of %s topic %s failed", self.group, topic, exc_info=True)
        self._truncate_queues_not_my_topic()

    def update_topic_subscribe_info(self, topic: str, mqs: frozenset[MessageQueue]) -> None:
        """A route update's queues of ``topic``, kept only for a subscribed topic."""
        if topic in self.subscription_inner:
            self.topic_subscribe_info[topic] = mqs

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        """Subscribed, but no route has given its queues yet."""
        return topic in self.subscription_inner and topic not in self.topic_subscribe_info

    def _truncate_queues_not_my_topic(self) -> None:
        for mq in list(self.process_queue_table):
            if mq.topic not in self.subscription_inner:
                pq = self.process_queue_table.pop(mq)
                pq.dropped = True
                log.info(
                    "doRebalance, %s, truncateMessageQueueNotMyTopic remove unnecessary mq, %s",
                    self.group,
                    mq,
                )

    def _warn_no_route(self, topic: str) -> None:
        # With no name server answering, the topic is not known to be missing: the
        # client instance has said that the name server is unreachable.
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and (
            self.consumer.client.namesrv_error is None
        ):
            log.warning("doRebalance, %s, but the topic[%s] not exist.", self.group, topic)

    async def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        consumer = self.consumer
        mq_set = self.topic_subscribe_info.get(topic)
        if consumer.message_model is MessageModel.BROADCASTING:
            if mq_set is None:
                self._warn_no_route(topic)
                return
            if await self.update_process_queue_table(topic, set(mq_set), is_order):
                await self.message_queue_changed(topic, mq_set, sorted(mq_set))
            return
        cid_all = await consumer.client.find_consumer_id_list(topic, self.group)
        if mq_set is None:
            self._warn_no_route(topic)
            return
        if cid_all is None:
            log.warning("doRebalance, %s %s, get consumer id list failed", self.group, topic)
            return
        mq_all = sorted(mq_set)
        cid_all = sorted(cid_all)
        strategy = consumer.allocation_strategy
        try:
            result = strategy.allocate(self.group, consumer.client_id, mq_all, cid_all)
        except Exception:
            # A strategy failure changes nothing: keep the current assignment.
            log.exception(
                "AllocateMessageQueueStrategy.allocate Exception. "
                "allocateMessageQueueStrategyName=%s",
                strategy.name,
            )
            return
        assigned = set(result or [])
        if await self.update_process_queue_table(topic, assigned, is_order):
            log.info(
                "rebalanced result changed. allocateMessageQueueStrategyName=%s, group=%s, "
                "topic=%s, clientId=%s, mqAllSize=%d, cidAllSize=%d, rebalanceResultSize=%d, "
                "rebalanceResultSet=%s",
                strategy.name,
                self.group,
                topic,
                consumer.client_id,
                len(mq_all),
                len(cid_all),
                len(assigned),
                sorted(assigned),
            )
            await self.message_queue_changed(topic, mq_set, sorted(assigned))

    async def update_process_queue_table(
        self, topic: str, mq_set: set[MessageQueue], is_order: bool
    ) -> bool:
        changed = False
        # Phase 1: drop queues reassigned away, and queues whose pull loop has died.
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.info("doRebalance, %s, remove unnecessary mq, %s", self.group, mq)
            elif self.consume_type is ConsumeType.CONSUME_PASSIVELY and pq.is_pull_expired():
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.error(
                        "[BUG]doRebalance, %s, remove unnecessary mq, %s, because pull is "
                        "pause, so try to fixed it",
                        self.group,
                        mq,
                    )
        # Phase 2: take new queues.
        for mq in sorted(mq_set):
            if mq in self.process_queue_table:
                continue
            if is_order and not await self.lock(mq):
                log.warning(
                    "doRebalance, %s, add a new mq failed, %s, because lock failed", self.group, mq
                )
                continue
            self.consumer.offset_store.remove_offset(mq)
            pq = ProcessQueue()
            if is_order:
                pq.locked = True
                pq.last_lock_timestamp = int(time.time() * 1000)
            next_offset = await self.compute_pull_from_where(mq)
            if next_offset < 0:
                log.warning("doRebalance, %s, add new mq failed, %s", self.group, mq)
                continue
            if mq in self.process_queue_table:
                log.info("doRebalance, %s, mq already exists, %s", self.group, mq)
                continue
            self.process_queue_table[mq] = pq
            self.consumer.start_pulling(mq, pq, next_offset)
            changed = True
            log.info("doRebalance, %s, add a new mq, %s", self.group, mq)
        return changed

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        store = self.consumer.offset_store
        await store.persist(mq)
        store.remove_offset(mq)
        if self.consumer.consume_orderly and self.consumer.message_model is MessageModel.CLUSTERING:
            return await self._unlock_when_drained(mq, pq)
        return True

    async def _unlock_when_drained(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        consume_lock = pq.consume_lock
        if consume_lock is None:
            await self.unlock(mq, oneway=True)
            return True
        try:
            # Not wait_for: on 3.11 it can lose a cancellation or a just-acquired lock.
            async with asyncio.timeout(1.0):
                await consume_lock.acquire()
        except TimeoutError:
            pq.try_unlock_times += 1
            return False
        try:
            if pq.msg_count > 0:
                # Messages remain: unlock later so a new owner does not race this one.
                asyncio.get_running_loop().call_later(
                    self.unlock_delay_ms / 1000,
                    lambda: asyncio.ensure_future(self.unlock(mq, oneway=True)),
                )
            else:
                await self.unlock(mq, oneway=True)
            return True
        finally:
            consume_lock.release()

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        consumer = self.consumer
        store = consumer.offset_store
        last = await store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        cfw = consumer.options.consume_from_where
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if last >= 0:
            return last
        if last != -1:
            return -1  # -2: the store could not be read; skip the queue this round
        try:
            if cfw is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
                return 0 if is_retry else await consumer.max_offset(mq)
            if cfw is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if is_retry:
                return await consumer.max_offset(mq)
            ts = parse_consume_timestamp(consumer.options.consume_timestamp)
            return await consumer.search_offset(mq, ts)
        except RmqkError as exc:
            log.warning("compute pull offset of %s failed: %s", mq, exc)
            return -1

    async def message_queue_changed(
        self, topic: str, mq_all: Iterable[MessageQueue], assigned: list[MessageQueue]
    ) -> None:
        consumer = self.consumer
        sub = self.subscription_inner.get(topic)
        if sub is not None:
            # subVersion = now, so the broker adopts this subscription as the newest.
            self.subscription_inner[topic] = _evolve_sub(sub, int(time.time() * 1000))
        consumer.apply_topic_flow_control()
        await consumer.client.send_heartbeat_to_all_brokers()
        await call_event_hook(
            "rmqk_queues_changed",
            consumer=consumer,
            topic=topic,
            all_queues=frozenset(mq_all),
            assigned=list(assigned),
        )
        listener = consumer.rebalance_listener
        if listener is not None:
            try:
                result: Any = listener(topic, frozenset(mq_all), list(assigned))
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("rebalance listener of %s failed", self.group)

    # -- broker locks (orderly) ------------------------------------------------------------

    async def lock(self, mq: MessageQueue) -> bool:
        client = self.consumer.client
        found = client.find_broker_address_in_subscribe(mq.broker_name, 0, True)
        if found is None:
            return False
        try:
            ok = await client.transport.lock_batch_mq(
                found.broker_addr, self.group, client.client_id, [mq], 1000
            )
        except Exception as exc:
            log.warning("lockBatchMQ of %s failed: %s", mq, exc)
            return False
        now = int(time.time() * 1000)
        for locked in ok:
            pq = self.process_queue_table.get(locked)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = now
        return mq in ok

    def _held_by_broker(self) -> Iterator[tuple[str, str, list[MessageQueue]]]:
        """The held queues by broker name with the broker's address, found as each broker's
        turn comes (Java's buildProcessQueueTableByBrokerName); unknown brokers are skipped."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.process_queue_table:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, mqs in by_broker.items():
            found = self.consumer.client.find_broker_address_in_subscribe(broker_name, 0, True)
            if found is not None:
                yield broker_name, found.broker_addr, mqs

    async def lock_all(self) -> None:
        client = self.consumer.client
        for broker_name, broker_addr, mqs in self._held_by_broker():
            try:
                ok = await client.transport.lock_batch_mq(
                    broker_addr, self.group, client.client_id, mqs, 1000
                )
            except Exception as exc:
                log.warning("lockBatchMQ on %s failed: %s", broker_name, exc)
                continue
            now = int(time.time() * 1000)
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in ok:
                    pq.locked = True
                    pq.last_lock_timestamp = now
                else:
                    pq.locked = False

    async def unlock(self, mq: MessageQueue, oneway: bool) -> None:
        client = self.consumer.client
        found = client.find_broker_address_in_subscribe(mq.broker_name, 0, True)
        if found is None:
            return
        try:
            await client.transport.unlock_batch_mq(
                found.broker_addr, self.group, client.client_id, [mq], oneway, 1000
            )
        except Exception as exc:
            log.warning("unlockBatchMQ of %s failed: %s", mq, exc)

    async def unlock_all(self, oneway: bool) -> None:
        client = self.consumer.client
        for broker_name, broker_addr, mqs in self._held_by_broker():
            try:
                await client.transport.unlock_batch_mq(
                    broker_addr, self.group, client.client_id, mqs, oneway, 1000
                )
            except Exception as exc:
                log.warning("unlockBatchMQ on %s failed: %s", broker_name, exc)
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.locked = False

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            await self.remove_unnecessary_message_queue(mq, pq)
            log.info("Fix Offset, %s, remove unnecessary mq, %s", self.group, mq)

    def destroy(self) -> None:
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()


def _evolve_sub(sub: SubscriptionData, version: int) -> SubscriptionData:
    return attrs.evolve(sub, sub_version=version)
