"""``remote-broker``: consumer offsets kept by the brokers (the CLUSTERING default).

Java's RemoteBrokerOffsetStore. Offsets live in memory and reach the broker
that owns each queue through UPDATE_CONSUMER_OFFSET (oneway by default), every
``persist_consumer_offset_interval_ms`` and when a queue leaves this member.
Reads from the store ask the broker with QUERY_CONSUMER_OFFSET.

The -1 / -2 distinction of ``read_offset`` is what keeps CONSUME_FROM_LAST_OFFSET
safe: -1 means the broker answered that the group has no offset (the consumer
then applies consume_from_where), -2 means it could not be asked (the queue is
skipped this round). Reporting a network error as "no offset" would jump to the
max offset and lose messages.

Options (``offset_store_options``): ``timeout_ms``, the timeout of each query
and update (default 5000, as Java's ``1000 * 5``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from rmqk.model import MessageQueue
from rmqk.model.errors import BrokerError, ClientError
from rmqk.plugins.offsets.options import (
    DEFAULT_TIMEOUT_MS,
    RemoteBrokerOptions,
    parse_store_options,
)
from rmqk.plugins.offsets.table import OffsetTable, TableBackedStore
from rmqk.spi.contracts import BrokerClient, OffsetStoreContext

__all__ = ["DEFAULT_TIMEOUT_MS", "NAME", "RemoteBrokerOffsetStore", "create_remote_broker_store"]

log = logging.getLogger(__name__)

NAME = "remote-broker"


class RemoteBrokerOffsetStore(TableBackedStore):
    """A :class:`rmqk.spi.contracts.BrokerOffsetStore` backed by the brokers.

    ``client`` is a :class:`rmqk.spi.contracts.BrokerClient`: its
    ``find_broker_addr_for_offsets`` finds the master, refreshing the topic's
    route when the master is missing (Java's ``findBrokerAddressInSubscribe``
    with ``MASTER_ID``, ``updateTopicRouteInfoFromNameServer``, then any broker of
    the group), and raises ClientError when the group stays unknown; its
    ``transport`` queries and updates consumer offsets.
    """

    log = log

    def __init__(
        self,
        client: BrokerClient | None,
        group: str,
        client_id: str = "",
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        if client is None:
            raise ClientError(
                f"{NAME} offset store of group {group!r} needs the client instance "
                "(OffsetStoreContext.client is None)"
            )
        self.client: BrokerClient = client
        self.group = group
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self._table = OffsetTable()

    async def load(self) -> None:
        """Nothing to load: the brokers are asked queue by queue."""

    async def _read_from_store(self, mq: MessageQueue) -> int:
        try:
            offset = await self._fetch_consume_offset_from_broker(mq)
        except BrokerError as exc:
            # Java maps every MQBrokerException here to "no offset".
            log.info("query consumer offset of %s for group %s: %s", mq, self.group, exc)
            return -1
        except Exception as exc:
            log.warning(
                "query consumer offset of %s for group %s failed: %s", mq, self.group, exc
            )
            return -2
        return -1 if offset is None else offset

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Send the offsets of ``mqs``; forget those of every other queue.

        Pruning happens before the first await, so a queue that a concurrent
        rebalance re-adds while the sends are in flight keeps its fresh offset.
        """
        if not mqs:
            return
        assigned = set(mqs)
        for mq in self._table.prune_except(assigned):
            log.info("remove unused mq, %s, %s", mq, self.group)
        to_send = self._table.pick(assigned)
        if not to_send:
            return
        # Concurrently: one unreachable broker must not delay the others' commits.
        await asyncio.gather(*(self._send_logged(mq, "persistAll") for mq in sorted(to_send)))

    async def persist(self, mq: MessageQueue) -> None:
        if mq not in self._table:
            return
        await self._send_logged(mq, "persist")

    async def update_consume_offset_to_broker(
        self, mq: MessageQueue, offset: int, oneway: bool
    ) -> None:
        """Send one offset; raises what the lookup or the transport raises."""
        addr = await self.client.find_broker_addr_for_offsets(mq.broker_name, mq.topic)
        await self.client.transport.update_consumer_offset(
            addr, self.group, mq, offset, oneway=oneway, timeout_ms=self.timeout_ms
        )

    async def _send_logged(self, mq: MessageQueue, what: str) -> None:
        offset = self._table.get(mq)
        if offset is None:
            return  # removed while an earlier send was in flight
        try:
            await self.update_consume_offset_to_broker(mq, offset, True)
        except Exception as exc:
            # Losing one commit is tolerated: the next period and the pull piggyback resend.
            log.error(
                "updateConsumeOffsetToBroker of %s for group %s failed: %s", mq, self.group, exc
            )
            return
        log.debug(
            "[%s] Group: %s ClientId: %s updateConsumeOffsetToBroker %s %d",
            what, self.group, self.client_id, mq, offset,
        )

    async def _fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int | None:
        addr = await self.client.find_broker_addr_for_offsets(mq.broker_name, mq.topic)
        result: int | None = await self.client.transport.query_consumer_offset(
            addr, self.group, mq, self.timeout_ms
        )
        return result


def create_remote_broker_store(context: OffsetStoreContext) -> RemoteBrokerOffsetStore:
    """``remote-broker`` from Python, its options read from ``context.options``."""
    return build_remote_broker_store(
        context, parse_store_options(NAME, RemoteBrokerOptions, context.options)
    )


def build_remote_broker_store(
    context: OffsetStoreContext, options: RemoteBrokerOptions
) -> RemoteBrokerOffsetStore:
    """The registered factory of ``remote-broker``."""
    return RemoteBrokerOffsetStore(
        context.client, context.group, context.client_id, options.timeout_ms
    )
