"""The plugin manager as a plugin sees it: the registries and the idle tests.

A plugin that looks up another kind's registrations (the Spark source choosing a
transport, a command listing sinks), checks a table's choice of plugins by name, or
tells the kernel a hook has nothing to do goes through here, never through
:mod:`rmqk.pluginmanager` itself.
"""

from __future__ import annotations

from rmqk.hookcalls import all_idle, idle_when
from rmqk.options.plugin_choices import PluginChoice, check_plugin_names
from rmqk.pluginmanager import Registries, check_hook_plugins, get_plugin_manager, registries

__all__ = [
    "PluginChoice",
    "Registries",
    "all_idle",
    "check_hook_plugins",
    "check_plugin_names",
    "get_plugin_manager",
    "idle_when",
    "registries",
]
