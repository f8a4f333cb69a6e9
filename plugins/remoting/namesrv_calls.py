"""Name server calls of the ``tcp`` transport: the address list, failover, routes.

Requests stick to one name server until it fails; then the next one in the
(shuffled) list is tried, each at most once per call, as Java's
``NettyRemotingClient`` does. Routes fetched here also teach the client which
broker name each broker address has (the messages of a pull carry it), and are
bounded first (:mod:`~rmqk.plugins.remoting.route_bounds`): what is refused is
logged once per topic and refused content, not at every refresh.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from rmqk.model import TopicRouteData
from rmqk.model.errors import BrokerError, RemotingConnectError, RemotingError
from rmqk.plugins.remoting.namesrv import decode_topic_route
from rmqk.plugins.remoting.route_bounds import MAX_ROUTE_QUEUES, BoundedRoute, bound_route
from rmqk.plugins.remoting.rpc import RemotingClient
from rmqk.spi.transport import TransportConfig
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["NameServerCalls"]

log = logging.getLogger("rmqk.remoting")


class NameServerCalls(RemotingClient):
    def __init__(self, config: TransportConfig, hook: Any | None = None) -> None:
        super().__init__(config, hook)
        self._namesrv_addrs: list[str] = []
        self._namesrv_index = -1
        self._namesrv_chosen: str | None = None
        # Name servers that failed, with their error: said once, and again on a change.
        self._namesrv_down: dict[str, str] = {}
        # Per topic, what was last refused of its route: reported once, not per refresh.
        self._refused: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self.update_namesrv_addrs(config.namesrv_addrs)

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        return tuple(self._namesrv_addrs)

    @property
    def chosen_namesrv(self) -> str | None:
        """The name server requests stick to until it fails."""
        return self._namesrv_chosen

    def update_namesrv_addrs(self, addrs: Iterable[str]) -> None:
        """Replace the name server list when its set of addresses changed; the new
        list is shuffled, so clients spread over the name servers (Java does the same)."""
        new = []
        for addr in addrs:
            for part in addr.split(";"):
                if part.strip() and part.strip() not in new:
                    new.append(part.strip())
        if not new or set(new) == set(self._namesrv_addrs):
            return
        random.shuffle(new)
        self._namesrv_addrs = new
        if self._namesrv_chosen not in new:
            self._namesrv_chosen = None

    def _choose_namesrv(self) -> str:
        addrs = self._namesrv_addrs
        if self._namesrv_chosen is not None and self._namesrv_chosen in addrs:
            return self._namesrv_chosen
        self._namesrv_index = (self._namesrv_index + 1) % len(addrs)
        self._namesrv_chosen = addrs[self._namesrv_index]
        return self._namesrv_chosen

    async def invoke_namesrv(
        self, make_request: Callable[[], RemotingCommand], timeout_ms: int | None = None
    ) -> tuple[str, RemotingCommand]:
        """Send to the chosen name server; on connection trouble or a timeout, move
        to the next one, trying each at most once. Returns (address, response)."""
        if not self._namesrv_addrs:
            raise RemotingConnectError("no name server address is configured (namesrv_addrs)")
        failures: dict[str, RemotingError] = {}
        tries = len(self._namesrv_addrs)
        for attempt in range(tries):
            addr = self._choose_namesrv()
            try:
                response = await self.invoke(addr, make_request(), timeout_ms)
            except RemotingError as exc:
                failures[addr] = exc
                if self._namesrv_chosen == addr:
                    self._namesrv_chosen = None
                self._namesrv_failed(addr, exc, more=attempt < tries - 1)
                continue
            if self._namesrv_down.pop(addr, None) is not None:
                log.warning("name server %s reachable again", addr)
            return addr, response
        if len(failures) == 1:
            raise next(iter(failures.values()))
        last = list(failures.values())[-1]
        # Sorted, so the same outage reads the same whatever the shuffled order.
        detail = "; ".join(f"{addr}: {exc}" for addr, exc in sorted(failures.items()))
        raise type(last)(f"no name server answered ({detail})") from last

    def _namesrv_failed(self, addr: str, exc: RemotingError, *, more: bool) -> None:
        """Warn when ``addr`` stops answering or fails differently, not on every request:
        callers keep retrying, and a dead name server would otherwise flood the log."""
        error = str(exc)
        if self._namesrv_down.get(addr) == error:
            log.debug("name server %s still unreachable: %s", addr, error)
            return
        self._namesrv_down[addr] = error
        then = ", trying the next one" if more else ""
        log.warning("name server %s unreachable: %s%s", addr, error, then)

    async def get_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData | None:
        def make() -> RemotingCommand:
            return RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
                {"topic": topic, "acceptStandardJsonOnly": True},
            )

        addr, response = await self.invoke_namesrv(make, timeout_ms)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise BrokerError(response.code, response.remark, addr)
        bounded = bound_route(decode_topic_route(response.body))
        self._report_refused(topic, bounded)
        route = bounded.route
        for broker in route.broker_datas:
            for broker_addr in broker.broker_addrs.values():
                self._broker_names[broker_addr] = broker.broker_name
        return route

    def _report_refused(self, topic: str, bounded: BoundedRoute) -> None:
        refused = tuple(
            (q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in bounded.refused
        )
        if not refused:
            self._refused.pop(topic, None)
            return
        if self._refused.get(topic) == refused:
            return
        self._refused[topic] = refused
        described = ", ".join(f"{name} ({r} read, {w} write)" for name, r, w in refused)
        log.error(
            "route of topic %s: refused the queues of %s: a route may hold at most %d queues "
            "in all; the topic is used without them. Fix the topic's queue numbers on those "
            "brokers (updateTopic -r/-w)",
            topic,
            described,
            MAX_ROUTE_QUEUES,
        )
