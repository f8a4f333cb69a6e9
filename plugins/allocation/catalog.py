"""The built-in strategies by their Java names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from rmqk.plugins.allocation import (
    average,
    circle,
    config,
    consistent_hash,
    machine_room,
    machine_room_nearby,
)
from rmqk.plugins.allocation.options import STRATEGY_OPTIONS
from rmqk.spi.contracts import AllocationStrategy
from rmqk.spi.options import declared_options

__all__ = ["BUILTIN_FACTORIES"]

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

# The allocate_options each takes: the kernel checks a consumer's table against them
# before the factory (which checks what the declarations cannot say) is called.
for _name, _factory in BUILTIN_FACTORIES.items():
    _factory.option_specs = declared_options(STRATEGY_OPTIONS[_name])  # type: ignore[attr-defined]
