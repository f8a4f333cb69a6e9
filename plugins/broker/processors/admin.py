"""AdminBrokerProcessor: the broker's default processor, for admin tools and queue locks.

Serves queue offsets and store times, topic administration and stats, consume stats,
consumer connections, the queue locks of orderly consumers, and the requests it
relays to a client (running info, direct consume, offset reset). Any request
code no processor serves gets its REQUEST_CODE_NOT_SUPPORTED answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rmqk.model import MessageQueue
from rmqk.model.message import decode_offset_msg_id
from rmqk.plugins.broker.clients import ClientChannelInfo
from rmqk.plugins.broker.commands import HeaderError, Headers, make_request, make_response
from rmqk.plugins.broker.connection import Connection
from rmqk.plugins.broker.processors.broker2client import call_client, reset_offset
from rmqk.plugins.broker.processors.context import Processor
from rmqk.plugins.broker.processors.topics import save_topic, validate_topic
from rmqk.plugins.broker.store.topics import TopicConfig
from rmqk.wire import jsonwire
from rmqk.wire.bodies import subscription_json
from rmqk.wire.protocol import RemotingCommand, ResponseCode

__all__ = ["AdminBrokerProcessor"]


class AdminBrokerProcessor(Processor):
    """The admin requests of Apache's AdminBrokerProcessor that the embedded broker serves."""

    # -- offsets and store times of queues -------------------------------------

    def _topic_queue(self, request: RemotingCommand) -> tuple[str, int]:
        h = Headers(request)
        h.require("topic", "queueId")
        return h.text("topic"), h.number("queueId")

    def get_max_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(request, fields={"offset": self.ctx.store.max_offset(topic, queue_id)})

    def get_min_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(request, fields={"offset": self.ctx.store.min_offset(topic, queue_id)})

    def search_offset_by_timestamp(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require("topic", "queueId", "timestamp")
        offset = self.ctx.store.offset_for_timestamp(
            h.text("topic"), h.number("queueId"), h.number("timestamp")
        )
        return make_response(request, fields={"offset": offset})

    def get_earliest_msg_storetime(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic, queue_id = self._topic_queue(request)
        return make_response(
            request, fields={"timestamp": self.ctx.store.earliest_store_time(topic, queue_id)}
        )

    # -- consumers ---------------------------------------------------------------

    def get_consumer_connection_list(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group = Headers(request).text("consumerGroup")
        info = self.ctx.clients.consumer_group(group)
        if info is None:
            return make_response(
                request, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = {
            "connectionSet": [
                {
                    "clientAddr": ci.channel.remote_addr,
                    "clientId": ci.client_id,
                    "language": ci.language,
                    "version": ci.version,
                }
                for ci in info.channels.values()
            ],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {
                topic: subscription_json(sub) for topic, sub in info.subscriptions.items()
            },
        }
        return make_response(request, body=jsonwire.dumps(body))

    def get_consumer_running_info(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        h = Headers(request)
        h.require("consumerGroup", "clientId")
        group, client_id = h.text("consumerGroup"), h.text("clientId")
        return self._relay(conn, request, serialize_type, group, client_id)

    def consume_message_directly(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand | None:
        """Admin -> broker -> client: the client consumes one stored message (debugging)."""
        h = Headers(request)
        h.require("consumerGroup", "clientId", "msgId")
        group, client_id = h.text("consumerGroup"), h.text("clientId")
        try:
            _, commit_log_offset = decode_offset_msg_id(h.text("msgId"))
        except ValueError:
            return make_response(
                request, ResponseCode.SYSTEM_ERROR, f"invalid msgId {h.text('msgId')}"
            )
        record = self.ctx.store.look_message(commit_log_offset)
        if record is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"can not find message by the offset, {commit_log_offset}",
            )
        forward = make_request(request.code, body=bytes(record))
        forward.ext_fields = dict(request.ext_fields)
        return self._relay(conn, request, serialize_type, group, client_id, forward)

    def _relay(
        self,
        conn: Connection,
        request: RemotingCommand,
        serialize_type: int,
        group: str,
        client_id: str,
        forward: RemotingCommand | None = None,
    ) -> RemotingCommand | None:
        """Hand the request on to the client; None when the client's reply will answer it."""
        info = self.ctx.clients.consumer_group(group)
        target = info.find_channel(client_id) if info is not None else None
        if target is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online",
            )
        self.ctx.spawn(
            call_client(
                conn,
                request,
                serialize_type,
                target.channel,
                group,
                client_id,
                self.ctx.settings.call_client_timeout,
                forward,
            )
        )
        return None

    def invoke_broker_to_reset_offset(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        """Broker2Client.resetOffset: compute offsets by time, push them to every client."""
        h = Headers(request)
        h.require("topic", "group", "timestamp")
        topic, group = h.text("topic"), h.text("group")
        timestamp = h.number("timestamp")
        force = h.boolean("isForce", True)
        config = self.ctx.store.topics.get(topic)
        if config is None:
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] topic config not exist, {topic}",
            )
        offsets: dict[MessageQueue, int] = {}
        # Apache walks the topic's write queues, written to or not: the offset table holds
        # every queue a member may hold.
        for queue_id in range(config.write_queue_nums):
            mq = MessageQueue(topic, self.ctx.settings.broker_name, queue_id)
            current = self.ctx.store.consumer_offsets.query_offset(group, topic, queue_id)
            if current == -1:
                return make_response(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    f"THe consumer group <{group}> not exist",
                )
            if timestamp == -1:
                target = self.ctx.store.max_offset(topic, queue_id)
            else:
                target = self.ctx.store.offset_for_timestamp(topic, queue_id, timestamp)
            target = max(target, 0)
            offsets[mq] = target if force or target < current else current
        info = self.ctx.clients.consumer_group(group)
        channels: list[ClientChannelInfo] = list(info.channels.values()) if info is not None else []
        if not channels:
            return make_response(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {timestamp}",
            )
        body = reset_offset(channels, topic, group, timestamp, offsets)
        return make_response(request, body=body)

    # -- queue locks -------------------------------------------------------------

    @staticmethod
    def _lock_body(request: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        try:
            body = jsonwire.loads(request.body)
            group = str(body["consumerGroup"])
            client_id = str(body["clientId"])
            mqs = [
                MessageQueue(str(m["topic"]), str(m["brokerName"]), int(m["queueId"]))
                for m in jsonwire.as_list(body.get("mqSet"))
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HeaderError(f"com.alibaba.fastjson.JSONException: bad lock body ({exc})") from exc
        return group, client_id, mqs

    def lock_batch_mq(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(request)
        locked = self.ctx.locks.try_lock_batch(group, mqs, client_id)
        body = {"lockOKMQSet": [_mq_json(mq) for mq in sorted(locked)]}
        return make_response(request, body=jsonwire.dumps(body))

    def unlock_batch_mq(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(request)
        self.ctx.locks.unlock_batch(group, mqs, client_id)
        return make_response(request)

    # -- topics (admin) ----------------------------------------------------------

    def update_and_create_topic(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        h.require(
            "topic",
            "defaultTopic",
            "readQueueNums",
            "writeQueueNums",
            "perm",
            "topicFilterType",
            "order",
        )
        topic = h.text("topic")
        remark = validate_topic(topic)
        if remark is not None:
            return make_response(request, ResponseCode.SYSTEM_ERROR, remark)
        if topic in self.ctx.system_topics or topic.startswith("rmq_sys_"):
            return make_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{topic}] is conflict with system topic.",
            )
        cfg = TopicConfig(
            topic_name=topic,
            read_queue_nums=h.number("readQueueNums"),
            write_queue_nums=h.number("writeQueueNums"),
            perm=h.number("perm"),
            topic_filter_type=h.text("topicFilterType"),
            topic_sys_flag=h.opt_number("topicSysFlag", 0) or 0,
            order=h.boolean("order"),
        )
        save_topic(self.ctx, cfg)
        return make_response(request)

    def delete_topic_in_broker(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        topic = Headers(request).text("topic")
        if self.ctx.topics.delete(topic):
            self.ctx.on_topics_changed()
        return make_response(request)

    def get_all_topic_config(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        table = {cfg.topic_name: cfg.to_json() for cfg in self.ctx.topics.all()}
        body = {
            "dataVersion": self.ctx.topics.data_version.to_json(),
            "topicConfigTable": table,
        }
        return make_response(request, body=jsonwire.dumps(body))

    def get_consume_stats(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        h = Headers(request)
        group = h.text("consumerGroup")
        topic = h.opt_text("topic")
        if topic is None or not topic.strip():
            topics: Iterable[str] = self.ctx.store.consumer_offsets.topics_of_group(group)
        else:
            topics = [topic]
        table: list[tuple[Any, Any]] = []
        for name in sorted(topics):
            cfg = self.ctx.topics.get(name)
            if cfg is None:
                continue
            info = self.ctx.clients.consumer_group(group)
            if info is not None and info.subscriptions and name not in info.subscriptions:
                continue
            for qid in range(cfg.read_queue_nums):
                broker_offset = max(0, int(self.ctx.store.max_offset(name, qid)))
                consumer_offset = max(
                    0, int(self.ctx.store.consumer_offsets.query_offset(group, name, qid))
                )
                entry: dict[str, Any] = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": 0,
                }
                if consumer_offset > 0:
                    last = self.ctx.store.store_time_at(name, qid, consumer_offset - 1)
                    if last and last > 0:
                        entry["lastTimestamp"] = last
                key = {"brokerName": self.ctx.settings.broker_name, "queueId": qid, "topic": name}
                table.append((key, entry))
        body = {"consumeTps": 0.0, "offsetTable": jsonwire.ObjectKeyMap(tuple(table))}
        return make_response(request, body=jsonwire.dumps(body))

    def get_topic_stats_info(
        self, conn: Connection, request: RemotingCommand, serialize_type: int
    ) -> RemotingCommand:
        """TopicStatsTable: min offset, max offset and last store time of each write queue."""
        topic = Headers(request).text("topic")
        cfg = self.ctx.topics.get(topic)
        if cfg is None:
            return make_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table: list[tuple[Any, Any]] = []
        # Apache walks the write queues and clamps both offsets at 0.
        for qid in range(cfg.write_queue_nums):
            min_offset = max(0, int(self.ctx.store.min_offset(topic, qid)))
            max_offset = max(0, int(self.ctx.store.max_offset(topic, qid)))
            # The store time of the queue's last message; 0 for a queue never written to.
            last = self.ctx.store.store_time_at(topic, qid, max_offset - 1) if max_offset else 0
            key = {"brokerName": self.ctx.settings.broker_name, "queueId": qid, "topic": topic}
            entry = {
                "lastUpdateTimestamp": int(last),
                "maxOffset": max_offset,
                "minOffset": min_offset,
            }
            table.append((key, entry))
        body = {"offsetTable": jsonwire.ObjectKeyMap(tuple(table))}
        return make_response(request, body=jsonwire.dumps(body))


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
