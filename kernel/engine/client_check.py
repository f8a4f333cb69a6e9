"""Java's checkClientInBroker: ask a broker of each topic whether it can filter as asked.

A consumer that subscribes by SQL92 to a broker that cannot filter (or with an
expression the broker does not accept) would otherwise start and then never
receive a message. Java sends CHECK_CLIENT_CONFIG at start for every non-TAG
subscription and throws with the broker's code and remark; so does rmqk, also
when a running consumer subscribes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from rmqk.engine.client import ClientInstance
from rmqk.model import ExpressionType, SubscriptionData
from rmqk.model.errors import BrokerError, ClientError, RmqkError, SubscriptionRefusedError

__all__ = ["check_client_in_broker"]


async def check_client_in_broker(
    client: ClientInstance, group: str, subscriptions: Iterable[SubscriptionData]
) -> None:
    """Raise SubscriptionRefusedError for the first subscription a broker refuses.

    As in Java, one broker of the topic's route is asked (chosen at random: the
    brokers of a cluster are assumed to share their configuration), and a topic
    without a route yet is not checked.
    """
    for sub in subscriptions:
        if sub.expression_type is ExpressionType.TAG:
            continue
        route = client.route_table.get(sub.topic)
        if route is None or not route.broker_datas:
            continue
        addr = random.choice(route.broker_datas).select_addr()
        if addr is None:
            continue
        try:
            await client.transport.check_client_config(
                addr, group, client.client_id, sub, client.config.request_timeout_ms
            )
        except BrokerError as exc:
            raise SubscriptionRefusedError(
                exc.code, exc.remark, addr, sub.topic, sub.sub_string
            ) from exc
        except RmqkError as exc:
            raise ClientError(
                "Check client in broker error, maybe because you use "
                f"{sub.expression_type.value} to filter message, but server has not been "
                f"upgraded to support! ({exc})"
            ) from exc
