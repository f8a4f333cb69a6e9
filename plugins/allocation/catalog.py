"""The built-in strategies by their Java names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from rmqk.plugins.allocation import (
    average,
    circle,
    config,
    consistent_hash,
    machine_room,
    machine_room_nearby,
)
from rmqk.plugins.allocation.options import STRATEGY_OPTIONS
from rmqk.spi.contracts import AllocationStrategy, AllocationStrategyContext
from rmqk.spi.factory import PluginFactory

__all__ = ["BUILTIN_FACTORIES", "BUILTIN_STRATEGIES"]

# From Python: each builds its strategy from keyword options, checked as the kernel does.
BUILTIN_FACTORIES: Mapping[str, Callable[..., AllocationStrategy]] = MappingProxyType(
    {
        average.NAME: average.create_averagely,
        circle.NAME: circle.create_averagely_by_circle,
        consistent_hash.NAME: consistent_hash.create_consistent_hash,
        config.NAME: config.create_by_config,
        machine_room.NAME: machine_room.create_by_machine_room,
        machine_room_nearby.NAME: machine_room_nearby.create_machine_room_nearby,
    }
)

_BUILDERS: Mapping[str, Callable[[AllocationStrategyContext, Any], AllocationStrategy]] = {
    average.NAME: average.build_averagely,
    circle.NAME: circle.build_averagely_by_circle,
    consistent_hash.NAME: consistent_hash.build_consistent_hash,
    config.NAME: config.build_by_config,
    machine_room.NAME: machine_room.build_by_machine_room,
    machine_room_nearby.NAME: machine_room_nearby.build_machine_room_nearby,
}

# What the plugin registers: each strategy's allocate_options declared (the kernel checks
# a consumer's table against them), its factory given them resolved.
BUILTIN_STRATEGIES: Mapping[str, PluginFactory[AllocationStrategyContext, AllocationStrategy]] = (
    MappingProxyType(
        {
            name: PluginFactory(name, build, options=STRATEGY_OPTIONS[name])
            for name, build in _BUILDERS.items()
        }
    )
)
