"""``rmqk admin``: Apache's mqadmin for a 4.x cluster, and the admin client it runs on.

:mod:`~rmqk.plugins.admin.admin_client` is ``AdminClient``, the MQAdmin calls (topics,
groups, offsets, messages, broker and name-server answers) over the ``tcp`` wire;
:mod:`~rmqk.plugins.admin.admin_cli` the command; :mod:`~rmqk.plugins.admin.dlq` and
:mod:`~rmqk.plugins.admin.reset_offset` two of its sub-commands. Its own plugin, apart
from the embedded broker: a user of a real cluster needs the one and not the other.
"""

from __future__ import annotations

from rmqk.spi.hookspecs import Register, hookimpl

__all__ = ["rmqk_register_commands"]


@hookimpl
def rmqk_register_commands(register: Register) -> None:
    from rmqk.plugins.admin.admin_cli import ADMIN_COMMAND

    register("admin", ADMIN_COMMAND)
