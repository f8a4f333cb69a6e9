"""Topic routes as name servers send them (GET_ROUTEINFO_BY_TOPIC bodies).

A name server older than 4.9.4, or a newer one asked by an old client, writes the
route with fastjson's defaults: ``"brokerAddrs":{0:"127.0.0.1:10911"}``, integer
keys unquoted. Newer ones write standard JSON with the keys quoted. Both parse
into :class:`rmqk.model.TopicRouteData`.
"""

from __future__ import annotations

from typing import Any

from rmqk.model import PERM_READ, PERM_WRITE, BrokerData, QueueData, TopicRouteData
from rmqk.wire.bodies import BodyFormatError, dumps, loads

__all__ = ["decode_topic_route", "encode_topic_route"]


def _obj(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise BodyFormatError(f"topic route: {what} must be a JSON object, got {value!r:.60}")
    return value


def _int(obj: dict[Any, Any], name: str, what: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyFormatError(f"topic route: {what}.{name} must be an integer, got {value!r:.60}")
    return value


def _str(obj: dict[Any, Any], name: str, what: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise BodyFormatError(f"topic route: {what}.{name} must be a string, got {value!r:.60}")
    return value


def _list(obj: dict[Any, Any], name: str) -> list[Any]:
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyFormatError(f"topic route: {name} must be a JSON array, got {value!r:.60}")
    return value


def _broker_id(key: Any, broker: str) -> int:
    if isinstance(key, bool):
        key = None
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        try:
            return int(key.strip())
        except ValueError:
            pass
    raise BodyFormatError(f"topic route: broker {broker!r} has a non-numeric broker id {key!r:.60}")


def decode_topic_route(body: bytes | bytearray | memoryview | str) -> TopicRouteData:
    """Parse a TopicRouteData body, standard or fastjson's unquoted-key JSON.

    Unknown fields (``filterServerTable``, 5.x's ``topicQueueMappingByBroker``, ...)
    are ignored; a field of the wrong type raises
    :class:`~rmqk.wire.bodies.BodyFormatError` naming it.
    """
    root = _obj(loads(body), "the body")
    queues = []
    for i, raw in enumerate(_list(root, "queueDatas")):
        what = f"queueDatas[{i}]"
        q = _obj(raw, what)
        queues.append(
            QueueData(
                broker_name=_str(q, "brokerName", what),
                read_queue_nums=_int(q, "readQueueNums", what),
                write_queue_nums=_int(q, "writeQueueNums", what),
                perm=_int(q, "perm", what, PERM_READ | PERM_WRITE),
                # Servers before 4.4 spell it topicSynFlag.
                topic_sys_flag=_int(q, "topicSysFlag", what, _int(q, "topicSynFlag", what, 0)),
            )
        )
    brokers = []
    for i, raw in enumerate(_list(root, "brokerDatas")):
        what = f"brokerDatas[{i}]"
        b = _obj(raw, what)
        name = _str(b, "brokerName", what)
        addrs_raw = b.get("brokerAddrs") or {}
        addrs = {}
        for key, addr in _obj(addrs_raw, f"{what}.brokerAddrs").items():
            if not isinstance(addr, str):
                raise BodyFormatError(
                    f"topic route: {what}.brokerAddrs[{key!r}] must be a string, got {addr!r:.60}"
                )
            addrs[_broker_id(key, name)] = addr
        cluster = b.get("cluster")
        brokers.append(
            BrokerData(
                cluster=cluster if isinstance(cluster, str) else "",
                broker_name=name,
                broker_addrs=addrs,
            )
        )
    order_conf = root.get("orderTopicConf")
    return TopicRouteData(
        queue_datas=tuple(queues),
        broker_datas=tuple(brokers),
        order_topic_conf=order_conf if isinstance(order_conf, str) else None,
    )


def encode_topic_route(route: TopicRouteData, *, standard_json: bool = True) -> bytes:
    """The body a name server sends for ``route``.

    ``standard_json=False`` writes the broker ids unquoted, as a 4.9.3 name server
    (or a 4.9.4+ one answering a client older than 4.9.4) does.
    """
    queue_datas = [
        {
            "brokerName": q.broker_name,
            "perm": q.perm,
            "readQueueNums": q.read_queue_nums,
            "topicSysFlag": q.topic_sys_flag,
            "writeQueueNums": q.write_queue_nums,
        }
        for q in route.queue_datas
    ]
    broker_parts = []
    for b in route.broker_datas:
        if standard_json:
            addrs = dumps({str(k): v for k, v in b.broker_addrs.items()})
        else:
            addrs = "{" + ",".join(f"{k}:{dumps(v)}" for k, v in b.broker_addrs.items()) + "}"
        broker_parts.append(
            '{"brokerAddrs":'
            + addrs
            + ',"brokerName":'
            + dumps(b.broker_name)
            + ',"cluster":'
            + dumps(b.cluster)
            + "}"
        )
    parts = ['"brokerDatas":[' + ",".join(broker_parts) + "]", '"filterServerTable":{}']
    if route.order_topic_conf is not None:
        parts.append('"orderTopicConf":' + dumps(route.order_topic_conf))
    parts.append('"queueDatas":' + dumps(queue_datas))
    return ("{" + ",".join(parts) + "}").encode("utf-8")
