"""Which processor answers which request code on the broker port.

The table is Apache 4.9.8's ``registerProcessor`` list cut down to the codes the
embedded broker serves; AdminBrokerProcessor, Apache's default processor, answers
every other code as not supported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rmqk.plugins.broker.clients import ClientManager
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.longpoll import PullHoldService
from rmqk.plugins.broker.processors.admin import AdminBrokerProcessor
from rmqk.plugins.broker.processors.client_manage import ClientManageProcessor
from rmqk.plugins.broker.processors.consumer_manage import ConsumerManageProcessor
from rmqk.plugins.broker.processors.context import BrokerContext, BrokerSettings
from rmqk.plugins.broker.processors.end_transaction import (
    EndTransactionProcessor,
    not_supported,
)
from rmqk.plugins.broker.processors.pull import PullMessageProcessor
from rmqk.plugins.broker.processors.query_message import QueryMessageProcessor
from rmqk.plugins.broker.processors.reply import ReplyMessageProcessor
from rmqk.plugins.broker.processors.send import SendMessageProcessor
from rmqk.plugins.broker.transaction_check import TransactionCheckService, TransactionSettings
from rmqk.plugins.broker.transactions import TransactionalMessageBridge
from rmqk.wire.protocol import RemotingCommand, RequestCode

__all__ = ["BrokerProcessors", "Handler"]

Handler = Callable[
    [Connection, RemotingCommand, int],
    RemotingCommand | Awaitable[RemotingCommand | None] | None,
]


class BrokerProcessors:
    """Dispatches the broker port's requests to the processor of each request code."""

    def __init__(
        self,
        settings: BrokerSettings,
        store: Any,
        *,
        system_topics: Iterable[str] = (),
        on_topics_changed: Callable[[], None] = lambda: None,
        lock_expiry: float = 60.0,
        channel_expiry: float = 120.0,
        hold_check_interval: float = 5.0,
        transaction: TransactionSettings | None = None,
        file_reserved_hours: float = 72.0,
    ) -> None:
        self.context = BrokerContext(
            settings,
            store,
            system_topics=system_topics,
            on_topics_changed=on_topics_changed,
            lock_expiry=lock_expiry,
            channel_expiry=channel_expiry,
        )
        ctx = self.context
        self.transactions = TransactionalMessageBridge(ctx)
        self.transaction_check = TransactionCheckService(
            self.transactions,
            ctx.clients,
            transaction or TransactionSettings(),
            file_reserved_hours,
        )
        send = SendMessageProcessor(ctx, self.transactions)
        reply = ReplyMessageProcessor(ctx, send)
        self.pull = PullMessageProcessor(ctx, hold_check_interval=hold_check_interval)
        query = QueryMessageProcessor(ctx)
        client = ClientManageProcessor(ctx)
        consumer = ConsumerManageProcessor(ctx)
        end_transaction = EndTransactionProcessor(ctx, self.transactions)
        admin = AdminBrokerProcessor(ctx)
        self._handlers: dict[int, Handler] = {
            RequestCode.SEND_MESSAGE: send.send_message,
            RequestCode.SEND_MESSAGE_V2: send.send_message,
            RequestCode.SEND_BATCH_MESSAGE: send.send_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: send.consumer_send_msg_back,
            RequestCode.SEND_REPLY_MESSAGE: reply.send_reply_message,
            RequestCode.SEND_REPLY_MESSAGE_V2: reply.send_reply_message,
            RequestCode.PULL_MESSAGE: self.pull.pull_message,
            RequestCode.QUERY_MESSAGE: query.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: query.view_message_by_id,
            RequestCode.HEART_BEAT: client.heart_beat,
            RequestCode.UNREGISTER_CLIENT: client.unregister_client,
            RequestCode.CHECK_CLIENT_CONFIG: client.check_client_config,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer.get_consumer_list_by_group,
            RequestCode.QUERY_CONSUMER_OFFSET: consumer.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: consumer.update_consumer_offset,
            RequestCode.END_TRANSACTION: end_transaction.end_transaction,
            RequestCode.GET_MAX_OFFSET: admin.get_max_offset,
            RequestCode.GET_MIN_OFFSET: admin.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: admin.get_earliest_msg_storetime,
            RequestCode.LOCK_BATCH_MQ: admin.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: admin.unlock_batch_mq,
            RequestCode.GET_CONSUMER_RUNNING_INFO: admin.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: admin.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: admin.invoke_broker_to_reset_offset,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic_in_broker,
            RequestCode.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
            RequestCode.GET_CONSUME_STATS: admin.get_consume_stats,
            RequestCode.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.get_consumer_connection_list,
        }

    # Tests and the broker's client scan reach the shared state through these.

    @property
    def settings(self) -> BrokerSettings:
        return self.context.settings

    @settings.setter
    def settings(self, value: BrokerSettings) -> None:
        self.context.settings = value

    @property
    def clients(self) -> ClientManager:
        return self.context.clients

    @property
    def holds(self) -> PullHoldService:
        return self.pull.holds

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self.holds.start()
        await self.transaction_check.start()

    async def stop(self) -> None:
        await self.transaction_check.stop()
        await self.holds.stop()
        await self.context.cancel_tasks()

    def connection_closed(self, conn: Connection) -> None:
        self.holds.drop_connection(conn)
        self.context.clients.channel_closed(conn)

    def on_message_arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.holds.on_message_arrived(topic, queue_id, max_offset)

    async def handle(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        handler = self._handlers.get(request.code)
        if handler is None:
            return not_supported(request)
        answer = handler(conn, request, serialize_type)
        if answer is None or isinstance(answer, RemotingCommand):
            return answer
        # The few handlers with slow work (file writes) hand back an awaitable.
        return await answer
