"""Validation of a strategy's ``allocate_options`` table.

Factories are called as ``factory(**options)`` with what a consumer's TOML
``allocate_options`` table holds, so every mistake is reported as a
:class:`rmqk.errors.ConfigError` naming the option and what is allowed. The
config loader knows the file and the consumer table and may re-home the
problems; here they say ``[allocate_options] <key>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from typing import Any

from rmqk.errors import ConfigError, ConfigProblem

__all__ = [
    "OPTIONS_TABLE",
    "check_known_options",
    "load_object",
    "option_error",
    "require_int",
    "require_str",
    "require_str_list",
]

OPTIONS_TABLE = "allocate_options"
_WHERE = "<options>"


def option_error(strategy: str, key: str | None, message: str) -> ConfigError:
    """A ConfigError about one option of one strategy."""
    return ConfigError([ConfigProblem(_WHERE, OPTIONS_TABLE, key, f"{strategy}: {message}")])


def check_known_options(
    strategy: str, options: Mapping[str, Any], allowed: Collection[str]
) -> None:
    """Reject every option ``strategy`` does not take, all of them in one error."""
    unknown = sorted(set(options) - set(allowed))
    if not unknown:
        return
    takes = ", ".join(sorted(allowed)) if allowed else "no options"
    raise ConfigError(
        [
            ConfigProblem(
                _WHERE, OPTIONS_TABLE, key, f"{strategy}: unknown option; allowed: {takes}"
            )
            for key in unknown
        ]
    )


def require_int(strategy: str, key: str, value: object, *, minimum: int) -> int:
    # bool is an int subclass; `true` in TOML is never meant as a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise option_error(
            strategy, key, f"must be an integer >= {minimum}, got {type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise option_error(strategy, key, f"must be an integer >= {minimum}, got {value}")
    return value


def require_str(strategy: str, key: str, value: object, *, what: str = "a string") -> str:
    if not isinstance(value, str) or not value:
        raise option_error(strategy, key, f"must be {what} (non-empty), got {value!r}")
    return value


def require_str_list(strategy: str, key: str, value: object) -> list[str]:
    """A list (or tuple/set, from Python callers) of non-empty strings."""
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise option_error(strategy, key, f"must be a list of strings, got {value!r}")
    items: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise option_error(strategy, f"{key}[{i}]", f"must be a non-empty string, got {item!r}")
        items.append(item)
    return items


def load_object(strategy: str, key: str, spec: object) -> object:
    """Import what ``spec`` names: ``"package.module:attribute"`` or ``"package.module"``.

    Python callers may pass the object itself; anything that is not a string is
    returned unchanged.
    """
    if not isinstance(spec, str):
        return spec
    module_name, _, attribute = spec.partition(":")
    if not module_name or (":" in spec and not attribute):
        raise option_error(
            strategy, key, f"must look like 'package.module:attribute', got {spec!r}"
        )
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise option_error(strategy, key, f"cannot import module {module_name!r}: {exc}") from exc
    for part in attribute.split(".") if attribute else ():
        try:
            target = getattr(target, part)
        except AttributeError:
            raise option_error(
                strategy, key, f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return target
