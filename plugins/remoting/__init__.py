"""The ``tcp`` transport plugin: RocketMQ 4.9 remoting over asyncio TCP (and TLS).

Registered through the ``remoting`` entry point of group ``rmqk`` as a
:class:`rmqk.spi.factory.PluginFactory`: ``build_tcp_transport(config, options)``
where ``config`` is the :class:`rmqk.spi.transport.TransportConfig` (its ``hook``
is the plugin manager's hook relay, for the RPC hooks, or None) and ``options``
the ``transport_options`` table, checked against :data:`TCP_OPTION_SPECS` by the
kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rmqk.model.errors import ConfigError
from rmqk.plugins.remoting.options import TCP_OPTION_SPECS
from rmqk.spi.factory import PluginFactory
from rmqk.spi.hookspecs import Register, hookimpl
from rmqk.spi.options import Where
from rmqk.spi.transport import TransportConfig

if TYPE_CHECKING:
    from rmqk.plugins.remoting.client import TcpTransport

__all__ = [
    "TCP_TRANSPORT",
    "build_tcp_transport",
    "create_tcp_transport",
    "rmqk_register_transports",
]


def build_tcp_transport(config: TransportConfig, options: Mapping[str, Any]) -> TcpTransport:
    """The registered factory of ``tcp``; connections open on first use."""
    # Imported here so loading the plugin (for `rmqk plugins`, say) stays cheap.
    from rmqk.plugins.remoting.client import TcpTransport

    return TcpTransport(attrs.evolve(config, options=options), config.hook)


def create_tcp_transport(config: TransportConfig, hook: Any | None = None) -> TcpTransport:
    """The ``tcp`` transport from Python, its options read from ``config.options``.

    Options it does not take are refused here too, as the kernel refuses them for
    the registered factory: a key is never silently left unread.
    """
    where = Where("<options>", "transport_options", prefix="transport 'tcp': ")
    options, problems = TCP_TRANSPORT.parse_options(config.options, where)
    if problems:
        raise ConfigError(problems)
    return build_tcp_transport(attrs.evolve(config, hook=hook), options)


# What transport_options may hold: rmqk check and rmqk run refuse any other key.
TCP_TRANSPORT: PluginFactory[TransportConfig, TcpTransport] = PluginFactory(
    "tcp", build_tcp_transport, options=TCP_OPTION_SPECS
)


@hookimpl
def rmqk_register_transports(register: Register) -> None:
    register(TCP_TRANSPORT)
