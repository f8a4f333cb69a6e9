"""The ``tcp`` transport: MQClientAPIImpl over RocketMQ 4.9 remoting frames.

:class:`TcpTransport` implements :class:`rmqk.spi.transport.Transport` by composing
the calls of each role over one :class:`~rmqk.plugins.remoting.rpc.RemotingClient`:

* ``rpc``: connections, RPC hooks, raw calls, broker-pushed requests (``inbound``);
* ``namesrv_calls``: the name server list, failover and routes;
* ``consumer_calls``: pulls, offsets, heartbeats, locks, send-back;
* ``producer_calls``: sends;
* ``admin_calls``: queue offsets and times, a message by offset, topic creation.

Each API method builds the request header Java's client sends (the same
``extFields`` names), sends it through the
:class:`~rmqk.plugins.remoting.connection.ConnectionPool`, and turns the response
into kernel value types, raising :class:`~rmqk.model.errors.BrokerError` for an error
code as ``MQClientAPIImpl`` throws ``MQBrokerException``.
"""

from __future__ import annotations

from rmqk.plugins.remoting.admin_calls import AdminCalls
from rmqk.plugins.remoting.consumer_calls import ConsumerCalls
from rmqk.plugins.remoting.inbound import exception_simple_desc
from rmqk.plugins.remoting.namesrv_calls import NameServerCalls
from rmqk.plugins.remoting.producer_calls import DEFAULT_REGION_ID, ProducerCalls
from rmqk.plugins.remoting.rpc import CLOSE_SOCKET_IF_TIMEOUT

__all__ = ["CLOSE_SOCKET_IF_TIMEOUT", "DEFAULT_REGION_ID", "TcpTransport", "exception_simple_desc"]


class TcpTransport(NameServerCalls, ConsumerCalls, ProducerCalls, AdminCalls):
    """The client side of the remoting protocol over TCP (optionally TLS).

    Connections open on first use (``start`` is optional); ``close`` fails what is
    in flight and refuses later calls. ``timeout_ms=None`` means
    ``config.request_timeout_ms``. ``config.options`` may hold
    ``client_close_socket_if_timeout`` (default true, as Java 4.9.8).

    Messages decoded from pulls carry the broker name that the routes fetched
    through :meth:`get_route` give their address. Broker-pushed requests are
    answered as :mod:`rmqk.plugins.remoting.inbound` describes.
    """
