"""rmqk's offset stores: where a push consumer keeps how far it has consumed.

Registered by name (``offset_store`` in a consumer's config, options in its
``offset_store_options`` table); when ``offset_store`` is not set the message
model picks one:

* ``remote-broker`` (CLUSTERING): Java's RemoteBrokerOffsetStore. Offsets are
  committed to, and read back from, the broker that owns each queue. Option:
  ``timeout_ms``.
* ``local-file`` (BROADCASTING): Java's LocalFileOffsetStore, with a portable JSON
  file written atomically and a ``.bak`` fallback. Options: ``dir``,
  ``persist_mode``.

Both follow :class:`rmqk.spi.contracts.OffsetStore`: an in-memory table updated as
messages are acknowledged (increase-only where Java's is), ``read_offset``
returning ``>= 0``, ``-1`` (nothing stored) or ``-2`` (the store could not be
asked), and persistence that logs its failures instead of raising them.
``remote-broker`` is also a :class:`rmqk.spi.contracts.BrokerOffsetStore`: it can
commit one offset now and report the outcome (the lite pull consumer's
``commit_sync``).
"""

from __future__ import annotations

from rmqk.plugins.offsets.local_file import (
    LocalFileOffsetStore,
    build_local_file_store,
    create_local_file_store,
)
from rmqk.plugins.offsets.options import LocalFileOptions, RemoteBrokerOptions
from rmqk.plugins.offsets.remote_broker import (
    RemoteBrokerOffsetStore,
    build_remote_broker_store,
    create_remote_broker_store,
)
from rmqk.plugins.offsets.table import OffsetTable
from rmqk.spi.factory import PluginFactory
from rmqk.spi.hookspecs import Register, hookimpl

__all__ = [
    "LocalFileOffsetStore",
    "OffsetTable",
    "RemoteBrokerOffsetStore",
    "create_local_file_store",
    "create_remote_broker_store",
    "rmqk_register_offset_stores",
]


@hookimpl
def rmqk_register_offset_stores(register: Register) -> None:
    # The offset_store_options each takes, declared: the kernel checks a consumer's table.
    register(PluginFactory("remote-broker", build_remote_broker_store, options=RemoteBrokerOptions))
    register(PluginFactory("local-file", build_local_file_store, options=LocalFileOptions))
