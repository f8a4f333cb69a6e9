"""The ``python`` sink's ``sink_options`` table, declared."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rmqk.spi.options import OptionInvalid, OptionType, Where, load_options, option

__all__ = ["PythonSinkOptions", "parse_python_sink_options"]


def _callable(target: object) -> object:
    if not callable(target):
        raise OptionInvalid(f"{target!r} is not callable")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return target  # a builtin without a signature: it can only be tried
    try:
        signature.bind(None, None)
    except TypeError:
        # Found at check, not as a TypeError on every batch once the run has started.
        raise OptionInvalid(
            f"{_name(target)}{signature} cannot be called with (queue, messages)"
        ) from None
    return target


def _name(target: object) -> str:
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{name}" if module else str(name)


@attrs.frozen
class PythonSinkOptions:
    function: Callable[..., Any] = option(  # noqa: RUF009
        OptionType.OBJECT,
        '"module:function", called with (queue, messages); may be async def. Returning '
        "acknowledges the batch, raising retries it.",
        None,
        required="a 'module:function' to call with (queue, messages)",
        check=_callable,
    )


def parse_python_sink_options(options: Mapping[str, Any]) -> PythonSinkOptions:
    """The options, or a ConfigError listing every problem."""
    return load_options(PythonSinkOptions, options, Where("<sink_options>", "python"))
