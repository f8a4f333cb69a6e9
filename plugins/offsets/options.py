"""Validation of a consumer's ``offset_store_options`` table.

Every mistake becomes a :class:`rmqk.errors.ConfigError` that names the store,
the option and what is allowed; the config loader may re-home the problems
under the file and consumer table they came from.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rmqk.errors import ConfigError, ConfigProblem

__all__ = ["OPTIONS_TABLE", "check_known_options", "option_error", "require_positive_int"]

OPTIONS_TABLE = "offset_store_options"
_WHERE = "<options>"


def option_error(store: str, key: str | None, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(_WHERE, OPTIONS_TABLE, key, f"{store}: {message}")])


def check_known_options(store: str, options: object, allowed: Collection[str]) -> Mapping[str, Any]:
    """``options`` as a mapping; every key ``store`` does not take is reported at once."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise option_error(store, None, f"options must be a table, got {options!r}")
    unknown = sorted(str(k) for k in options if k not in allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) if allowed else "no options"
        raise ConfigError(
            [
                ConfigProblem(
                    _WHERE, OPTIONS_TABLE, key, f"{store}: unknown option; allowed: {takes}"
                )
                for key in unknown
            ]
        )
    return options


def require_positive_int(store: str, key: str, value: object) -> int:
    # bool is an int subclass; `true` in TOML is never meant as a duration.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise option_error(store, key, f"must be an integer >= 1, got {value!r}")
    return value
