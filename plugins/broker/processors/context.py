"""What every processor of the embedded broker shares: settings, store, clients, tasks.

Apache's processors reach all of this through the ``BrokerController``; here one
small object plays that role so a processor module needs no other processor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from rmqk.plugins.broker.clients import ClientManager
from rmqk.plugins.broker.commands import make_request
from rmqk.plugins.broker.filtering import ConsumerFilters
from rmqk.plugins.broker.locks import RebalanceLockManager
from rmqk.plugins.broker.store.topics import TopicConfigs
from rmqk.wire.protocol import RequestCode

__all__ = ["BrokerContext", "BrokerSettings", "Processor"]

log = logging.getLogger("rmqk.broker")


@attrs.frozen
class BrokerSettings:
    """The broker options a client can observe (BrokerConfig / MessageStoreConfig)."""

    broker_name: str = "broker-a"
    cluster: str = "DefaultCluster"
    broker_addr: str = "127.0.0.1:10911"
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    auto_create_topic: bool = True
    default_topic_queue_nums: int = 8
    max_message_size: int = 4 * 1024 * 1024
    max_pull_msgs: int = 32
    max_pull_bytes: int = 256 * 1024
    retry_max_times: int = 16
    retry_queue_nums: int = 1
    notify_consumer_ids_changed: bool = True
    call_client_timeout: float = 10.0
    # BrokerConfig.enablePropertyFilter: SQL92 subscriptions are refused unless on.
    enable_property_filter: bool = False
    # BrokerConfig.rejectTransactionMessage: refuse half messages (NO_PERMISSION).
    reject_transaction_message: bool = False


class BrokerContext:
    """The broker-wide state the processors read and change.

    ``settings`` is read on every use (never copied), so replacing it takes
    effect at once for every processor.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        store: Any,
        *,
        system_topics: Iterable[str],
        on_topics_changed: Callable[[], None],
        lock_expiry: float,
        channel_expiry: float,
    ) -> None:
        self.settings = settings
        self.store = store
        self.topics: TopicConfigs = store.topics
        self.system_topics = set(system_topics)
        self.on_topics_changed = on_topics_changed
        self.clients = ClientManager(
            self._notify_consumer_ids_changed, channel_expiry=channel_expiry
        )
        self.locks = RebalanceLockManager(lock_expiry)
        self.filters = ConsumerFilters()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def persist_topics(self) -> None:
        """Write the topic table (off the event loop), then register the routes once.

        A failed write is logged and left to the store's flush thread
        (``persist_pending``), as Apache's ConfigManager.persist logs and goes on.
        """
        try:
            await asyncio.to_thread(self.topics.persist)
        except OSError as exc:
            log.warning("cannot write the topic table (%s): retrying in the background", exc)
        self.on_topics_changed()

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` in the background until it ends or the broker stops."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def broker_ip(self) -> str:
        return self.settings.broker_addr.rpartition(":")[0]

    def _notify_consumer_ids_changed(self, channel: Any, group: str) -> None:
        # Broker2Client.notifyConsumerIdsChanged, called by the client manager.
        if not self.settings.notify_consumer_ids_changed:
            return
        request = make_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
        channel.oneway(request)


class Processor:
    """A request processor: what it works on is the broker-wide context."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
