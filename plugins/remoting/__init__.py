"""The ``tcp`` transport plugin: RocketMQ 4.9 remoting over asyncio TCP (and TLS).

Registered through the ``remoting`` entry point of group ``rmqk``. The factory is
``(config: TransportConfig, hook) -> TcpTransport`` where ``hook`` is the plugin
manager's hook relay (``pm.hook``) used for the RPC hooks, or None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmqk.model.errors import ConfigError
from rmqk.plugins.remoting.options import TCP_OPTION_SPECS
from rmqk.spi.hookspecs import Register, hookimpl
from rmqk.spi.options import Where, plugin_option_problems
from rmqk.spi.transport import TransportConfig

if TYPE_CHECKING:
    from rmqk.plugins.remoting.client import TcpTransport

__all__ = ["create_tcp_transport", "rmqk_register_transports"]


def create_tcp_transport(config: TransportConfig, hook: Any | None = None) -> TcpTransport:
    """Build the ``tcp`` transport; connections open on first use.

    Options it does not take are refused here too, not only by ``rmqk check``: a
    consumer or producer made in Python (``transport_options={...}``) gets the same
    error instead of a key that is silently never read.
    """
    # Imported here so loading the plugin (for `rmqk plugins`, say) stays cheap.
    from rmqk.plugins.remoting.client import TcpTransport

    problems = plugin_option_problems(
        "transport 'tcp'", TCP_OPTION_SPECS, config.options, Where("<options>", "transport_options")
    )
    if problems:
        raise ConfigError(problems)
    return TcpTransport(config, hook)


# What transport_options may hold: rmqk check and rmqk run refuse any other key.
create_tcp_transport.option_specs = TCP_OPTION_SPECS  # type: ignore[attr-defined]


@hookimpl
def rmqk_register_transports(register: Register) -> None:
    register("tcp", create_tcp_transport)
