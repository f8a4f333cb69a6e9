"""Old module paths that moved in the 0.2 layout keep working, with a DeprecationWarning.

So do the codecs that lived in the remoting and broker plugins and are now
``rmqk.wire``. The layout (docs/architecture.md): ``rmqk.spi`` is what a plugin imports,
``rmqk.model`` the value objects, ``rmqk.wire`` the codecs, ``rmqk.options`` every
option table, ``rmqk.engine`` the clients and ``rmqk.app`` the command line. A
program that imports a module by its old path gets the module at its new path
(the same module object, so ``isinstance`` and pickling agree) and one warning
naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "rmqk.aioutil": "rmqk.spi.aio",
    "rmqk.builtin_commands": "rmqk.app.commands",
    "rmqk.client_options": "rmqk.spi.client_options",
    "rmqk.config": "rmqk.app.config",
    "rmqk.consume_host": "rmqk.spi.consume",
    "rmqk.consumer_options": "rmqk.options.consumer",
    "rmqk.contexts": "rmqk.spi.contexts",
    "rmqk.contracts": "rmqk.spi.contracts",
    "rmqk.engine.consume_tool": "rmqk.app.consume_tool",
    "rmqk.engine.lite_pull.options": "rmqk.options.lite_pull",
    "rmqk.engine.produce_tool": "rmqk.app.produce_tool",
    "rmqk.engine.producer_options": "rmqk.options.producer",
    "rmqk.errors": "rmqk.model.errors",
    "rmqk.extensions": "rmqk.spi.extensions",
    "rmqk.hookspecs": "rmqk.spi.hookspecs",
    "rmqk.logsetup": "rmqk.app.logsetup",
    "rmqk.message": "rmqk.model.message",
    "rmqk.names": "rmqk.model.names",
    "rmqk.namespace": "rmqk.model.namespace",
    "rmqk.offsets_reset": "rmqk.model.offsets_reset",
    "rmqk.optionspec": "rmqk.spi.options",
    "rmqk.optiontext": "rmqk.spi.option_text",
    "rmqk.plugin_choices": "rmqk.options.plugin_choices",
    "rmqk.plugins.broker.jsonwire": "rmqk.wire.jsonwire",
    "rmqk.plugins.remoting.bodies": "rmqk.wire.bodies",
    "rmqk.plugins.remoting.compiled_headers": "rmqk.wire.compiled_headers",
    "rmqk.plugins.remoting.compression": "rmqk.wire.compression",
    "rmqk.plugins.remoting.frame": "rmqk.wire.frame",
    "rmqk.plugins.remoting.hosts": "rmqk.wire.hosts",
    "rmqk.plugins.remoting.javajson": "rmqk.wire.javajson",
    "rmqk.plugins.remoting.message_codec": "rmqk.wire.message_codec",
    "rmqk.plugins.remoting.record_layout": "rmqk.wire.record_layout",
    "rmqk.plugins.remoting.tls": "rmqk.wire.tls",
    "rmqk.preflight": "rmqk.app.preflight",
    "rmqk.progress": "rmqk.console.progress",
    "rmqk.app.progress": "rmqk.console.progress",
    "rmqk.protocol": "rmqk.wire.protocol",
    "rmqk.runtime": "rmqk.app.runtime",
    "rmqk.subscription_table": "rmqk.options.subscription",
    "rmqk.summary_line": "rmqk.app.summary_line",
    "rmqk.supervisor": "rmqk.app.supervisor",
    "rmqk.termchart": "rmqk.console.termchart",
    "rmqk.app.termchart": "rmqk.console.termchart",
    "rmqk.transport": "rmqk.spi.transport",
    "rmqk.uniq_id": "rmqk.wire.uniq_id",
    "rmqk.model.uniq_id": "rmqk.wire.uniq_id",
    "rmqk.worker": "rmqk.app.worker",
    "rmqk.workers": "rmqk.spi.workers",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; import it from there "
            "(the old path will be removed in a later release)",
            DeprecationWarning,
            stacklevel=3,
        )
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The module is the new path's, already executed. The import system stamped
        # the old path's spec on it in between: give it back its own, then the old
        # name is recorded in sys.modules beside the new one.
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


_FINDER = _MovedFinder()


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import rmqk`` does)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
