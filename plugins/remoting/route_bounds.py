"""How many queues the client accepts from one topic route.

Apache sets no limit: a route naming three million read queues makes a consumer
build three million queue objects and rebalance over them (issue 19: 46 s of a
blocked event loop, 690 MB). Apache's largest own topic, ``BenchmarkTest``, has
1,024 queues on a broker and its defaults are 8 or 16; rmqk's embedded broker
refuses more than 1,024 per broker. :data:`MAX_ROUTE_QUEUES`, 65,535 queues in
all (64 brokers of 1,024 queues each), is far above any real topic and expands
in well under a second.

What is over the limit is refused, not cut: a broker whose queues do not fit is
left out of the route whole (its queue data, and its broker data unless other
queue data of the route names it) (cutting its queue count would hide the messages in
the queues cut off). Brokers are taken in name order, so every member of a
group keeps the same ones, and a broker with an absurd count never crowds out
the others.
"""

from __future__ import annotations

import attrs

from rmqk.model import QueueData, TopicRouteData

__all__ = ["MAX_ROUTE_QUEUES", "BoundedRoute", "bound_route"]

MAX_ROUTE_QUEUES = 65_535


@attrs.frozen
class BoundedRoute:
    route: TopicRouteData
    refused: tuple[QueueData, ...] = ()


def bound_route(route: TopicRouteData, limit: int = MAX_ROUTE_QUEUES) -> BoundedRoute:
    """``route`` without the queue data that would take it past ``limit`` queues."""
    datas = route.queue_datas
    budget = limit
    refused: set[int] = set()
    for index in sorted(range(len(datas)), key=lambda i: datas[i].broker_name):
        size = max(datas[index].read_queue_nums, datas[index].write_queue_nums, 0)
        if size > budget:
            refused.add(index)
        else:
            budget -= size
    if not refused:
        return BoundedRoute(route)
    kept = tuple(q for i, q in enumerate(datas) if i not in refused)
    # A broker left without queues is left out too: nothing would ask it for
    # messages, but a random choice of broker (the consumer id lookup) could.
    named = {q.broker_name for q in kept}
    gone = {datas[i].broker_name for i in refused} - named
    brokers = tuple(b for b in route.broker_datas if b.broker_name not in gone)
    return BoundedRoute(
        attrs.evolve(route, queue_datas=kept, broker_datas=brokers),
        tuple(q for i, q in enumerate(datas) if i in refused),
    )
