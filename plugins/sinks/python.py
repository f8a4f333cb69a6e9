"""The ``python`` sink: call a user function ``module:function`` with each batch.

The function receives ``(queue, messages)`` and may be ``async def``; returning
normally acknowledges the batch, raising retries it.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rmqk.model import MessageQueue
from rmqk.model.message import MessageExt
from rmqk.plugins.sinks.python_options import PythonSinkOptions, parse_python_sink_options
from rmqk.spi.contracts import SinkContext
from rmqk.spi.factory import PluginFactory

__all__ = ["PYTHON_SINK", "PythonSink", "resolve_callable"]


def resolve_callable(spec: str) -> Callable[..., Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable")
    return target  # type: ignore[no-any-return]


class PythonSink:
    def __init__(self, options: Mapping[str, Any] | PythonSinkOptions) -> None:
        if not isinstance(options, PythonSinkOptions):
            options = parse_python_sink_options(options)
        fn = options.function
        self.function = fn
        self.is_async = inspect.iscoroutinefunction(fn)

    async def start(self) -> None:
        return None

    async def write(self, queue: MessageQueue, messages: Sequence[MessageExt]) -> None:
        if self.is_async:
            await self.function(queue, list(messages))
        else:
            await asyncio.to_thread(self.function, queue, list(messages))

    async def close(self) -> None:
        return None


def build_python_sink(context: SinkContext, options: PythonSinkOptions) -> PythonSink:
    """The registered factory of ``python``."""
    return PythonSink(options)


# The sink_options it takes are declared: the kernel checks a consumer's table.
PYTHON_SINK: PluginFactory[SinkContext, PythonSink] = PluginFactory(
    "python", build_python_sink, options=PythonSinkOptions
)
