"""ClientManageProcessor: HEART_BEAT and UNREGISTER_CLIENT.

A heartbeat registers the client's producer and consumer groups and creates the
retry topic of each consumer group, as Apache 4.9.8 does. Unlike Apache, it first
checks every group name as the Java client's Validators.checkGroup does and
refuses the heartbeat (SYSTEM_ERROR) on a bad one; and the retry topics one
heartbeat creates are written to disk together, once, off the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from rmqk.model import PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from rmqk.plugins.broker.clients import ClientChannelInfo, HeartbeatInfo, parse_heartbeat
from rmqk.plugins.broker.commands import Headers, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.filtering import check_subscription
from rmqk.plugins.broker.processors.context import Processor
from rmqk.plugins.broker.processors.topics import add_retry_topics, validate_group
from rmqk.wire import jsonwire
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["ClientManageProcessor"]

log = logging.getLogger("rmqk.broker")


class ClientManageProcessor(Processor):
    """Keeps the client manager's table of producers and consumers up to date."""

    def heart_beat(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            hb = parse_heartbeat(jsonwire.loads(request.body))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"com.alibaba.fastjson.JSONException: bad HeartbeatData body ({exc})",
            )
        refused = _refused_name(hb)
        if refused is not None:
            log.warning("heartbeat of %s from %s refused: %s", _java_str(hb.client_id),
                        conn.remote_addr, refused)  # fmt: skip
            return make_response(request, ResponseCode.SYSTEM_ERROR, refused)
        created = add_retry_topics(
            self.ctx,
            [(RETRY_GROUP_TOPIC_PREFIX + c.group, 2 if c.unit_mode else 0) for c in hb.consumers],
            PERM_WRITE | PERM_READ,
        )
        for consumer in hb.consumers:
            changed = self.ctx.clients.register_consumer(
                consumer, self._channel(conn, hb.client_id, request), notify_enabled=True
            )
            # ConsumerFilterManager hears every registration; it recompiles only on a new version.
            self.ctx.filters.register_group(consumer.group, consumer.subscriptions)
            if changed:
                log.info("consumer group %s changed by %s", consumer.group, hb.client_id)
        for group in hb.producer_groups:
            self.ctx.clients.register_producer(group, self._channel(conn, hb.client_id, request))
        if created:
            return self._answer_once_persisted(request)
        return make_response(request)

    async def _answer_once_persisted(self, request: RemotingCommand) -> RemotingCommand:
        # The new retry topics are on disk before the client hears of them, as each
        # is on Apache; the write runs off the event loop, so other clients go on.
        await self.ctx.persist_topics()
        return make_response(request)

    @staticmethod
    def _channel(conn: Connection, client_id: str, request: RemotingCommand) -> ClientChannelInfo:
        # A fresh record per group: the client manager refreshes each one on its own.
        language = request.language
        language_name = str(getattr(language, "name", language))
        return ClientChannelInfo(conn, client_id, language_name, request.version)

    def check_client_config(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        """Whether this broker can filter a consumer's subscription (CheckClientRequestBody)."""
        try:
            body = jsonwire.loads(request.body) if request.body else None
        except ValueError as exc:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"com.alibaba.fastjson.JSONException: bad CheckClientRequestBody ({exc})",
            )
        sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(sub, dict):
            return make_response(request)
        code, remark = check_subscription(
            sub.get("expressionType"),
            sub.get("subString"),
            self.ctx.settings.enable_property_filter,
        )
        if code != ResponseCode.SUCCESS:
            log.warning(
                "Client %s@%s filter message, but failed to compile expression! sub=%s, error=%s",
                body.get("clientId") if isinstance(body, dict) else None,
                body.get("group") if isinstance(body, dict) else None,
                sub,
                remark,
            )
        return make_response(request, code, remark)

    def unregister_client(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("clientID")
        producer_group = h.opt_text("producerGroup")
        if producer_group is not None:
            self.ctx.clients.unregister_producer(producer_group, conn)
        consumer_group = h.opt_text("consumerGroup")
        if consumer_group is not None:
            self.ctx.clients.unregister_consumer(consumer_group, conn)
        return make_response(request)


def _refused_name(hb: HeartbeatInfo) -> str | None:
    """Why a heartbeat's names cannot be taken: a group Validators.checkGroup refuses,
    or a subscribed topic that is not text."""
    for group in (*(c.group for c in hb.consumers), *hb.producer_groups):
        remark = validate_group(group)
        if remark is not None:
            return remark
    for consumer in hb.consumers:
        for sub in consumer.subscriptions:
            if _java_str(sub.topic) != sub.topic:
                return f"the subscribed topic[{_java_str(sub.topic)}] is not valid UTF-8 text"
    return None


def _java_str(text: str) -> str:
    # What Java's UTF-8 encoder makes of a lone surrogate: "?".
    return text.encode("utf-8", "replace").decode("utf-8")
