"""The broker's VIP channel: a second listener on the broker port minus 2.

Apache's broker runs a ``fastRemotingServer`` on ``listenPort - 2`` beside its
main server, and clients with ``vipChannelEnabled`` send most non-pull requests
there (``MixAll.brokerVIPChannel``). It registers every processor but the pull
processor, so a pull sent there reaches the default (admin) processor, which
answers REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from rmqk.model.errors import RmqkError
from rmqk.plugins.broker.commands import make_response
from rmqk.wire.protocol import RemotingCommand, RequestCode, ResponseCode

__all__ = ["Listeners", "listen", "refusing_pulls"]

log = logging.getLogger("rmqk.broker")

# Tries at a free broker port whose VIP port (minus 2) is free too.
PORT_PAIR_ATTEMPTS = 50

Handler = Callable[[Any, RemotingCommand, int], Awaitable[Any]]


def refusing_pulls(handle: Handler) -> Handler:
    """``handle`` for the VIP listener: pulls answered as Apache's default processor does."""

    async def vip_handle(conn: Any, request: RemotingCommand, serialize_type: int) -> Any:
        if request.code == RequestCode.PULL_MESSAGE:
            return make_response(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        return await handle(conn, request, serialize_type)

    return vip_handle


@attrs.frozen
class Listeners:
    """The broker's main listener and its VIP one (None when there is none)."""

    main: Any
    vip: Any


async def listen(
    make_server: Callable[[str, Handler], Any],
    handle: Handler,
    host: str,
    port: int,
    *,
    vip: bool,
) -> Listeners:
    """Start the broker's listener on ``port`` (0: a free one) and, with ``vip``, its VIP one.

    With ``port`` 0 a port is chosen whose VIP port is free too. A chosen port whose
    VIP port is taken is served without the VIP channel (logged): Apache would not
    start, but every client that leaves vip_channel_enabled off is still served.
    """
    for _attempt in range(PORT_PAIR_ATTEMPTS):
        main = make_server("broker", handle)
        bound: int = await main.start(host, port)
        if not vip or bound <= 2:
            return Listeners(main, None)
        fast = make_server("broker-vip", refusing_pulls(handle))
        try:
            await fast.start(host, bound - 2)
        except OSError as exc:
            if port != 0:
                log.warning(
                    "broker: cannot listen on the VIP channel port %d (%s); clients "
                    "with vip_channel_enabled will not reach this broker", bound - 2, exc,
                )  # fmt: skip
                return Listeners(main, None)
            await fast.stop()
            await main.stop()
            continue
        return Listeners(main, fast)
    raise RmqkError(
        f"no free port pair for the broker and its VIP channel in {PORT_PAIR_ATTEMPTS} "
        "attempts; give broker_port or vip_channel=False"
    )
