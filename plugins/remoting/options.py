"""The options the ``tcp`` transport takes (a consumer's ``transport_options`` table).

Declared as the factory's ``option_specs``, so ``rmqk check`` and ``rmqk run``
refuse a key the transport would not read, as every other ``*_options`` table does.
"""

from __future__ import annotations

from rmqk.spi.options import OptionSpec, OptionType

__all__ = ["CLOSE_SOCKET_IF_TIMEOUT", "TCP_OPTION_SPECS", "VIP_CHANNEL_ENABLED"]

# Close a connection when a sync call on it times out.
CLOSE_SOCKET_IF_TIMEOUT = "client_close_socket_if_timeout"
# The consumer's vip_channel_enabled (ClientConfig's); the kernel sets it from that option.
VIP_CHANNEL_ENABLED = "vip_channel_enabled"

TCP_OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        name=CLOSE_SOCKET_IF_TIMEOUT,
        value_type=OptionType.BOOL,
        doc="Close a connection when a request on it times out (as Java 4.9.8).",
        default=True,
    ),
    OptionSpec(
        name=VIP_CHANNEL_ENABLED,
        value_type=OptionType.BOOL,
        doc="Send the requests Java sends through the broker's VIP channel (port - 2) there.",
        default=False,
    ),
)
