"""The options each built-in offset store takes (a consumer's ``offset_store_options``).

Declared with :func:`rmqk.options.option`, so the config reference is generated
from here. Every mistake becomes one :class:`rmqk.model.errors.ConfigError` naming the
store, the option and what is allowed; the placeholder path ``<options>`` is
replaced by whoever knows the file.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from rmqk.model.errors import ConfigError
from rmqk.spi.options import OptionInvalid, OptionType, Where, load_options, option

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "OPTIONS_TABLE",
    "PERSIST_MODES",
    "STORE_OPTIONS",
    "LocalFileOptions",
    "RemoteBrokerOptions",
    "option_error",
    "parse_store_options",
]

OPTIONS_TABLE = "offset_store_options"
_WHERE = "<options>"
PERSIST_MODES = ("fsync", "no-fsync")
DEFAULT_TIMEOUT_MS = 5_000
T = TypeVar("T")


def _persist_mode(mode: str) -> str:
    if mode not in PERSIST_MODES:
        allowed = " or ".join(repr(m) for m in PERSIST_MODES)
        raise OptionInvalid(f"must be {allowed}, got {mode!r}")
    return mode


@attrs.frozen
class LocalFileOptions:
    dir: str | None = option(
        OptionType.PATH,
        "Directory the offsets go to, as <dir>/<client_id>/<group>/offsets.json.",
        None,
        default_text="$RMQK_LOCAL_OFFSET_STORE_DIR, else ~/.rocketmq_offsets (as Java)",
    )
    persist_mode: str = option(
        OptionType.STR,
        'fsync: file and directory are fsynced, a write survives power loss; "no-fsync": '
        "a write survives a crash of the process only.",
        "fsync",
        check=_persist_mode,
    )


@attrs.frozen
class RemoteBrokerOptions:
    timeout_ms: int = option(
        OptionType.INT,
        "Timeout of offset queries and commits sent to the broker.",
        DEFAULT_TIMEOUT_MS,
        minimum=1,
        unit="ms",
    )


# Store name -> its options, for the config reference.
STORE_OPTIONS: dict[str, type] = {
    "local-file": LocalFileOptions,
    "remote-broker": RemoteBrokerOptions,
}


def parse_store_options(store: str, cls: type[T], options: Any) -> T:
    """``options`` resolved into ``cls``, or a ConfigError listing every problem."""
    return load_options(cls, options, Where(_WHERE, OPTIONS_TABLE, prefix=f"{store}: "))


def option_error(store: str, key: str | None, message: str) -> ConfigError:
    return ConfigError([Where(_WHERE, OPTIONS_TABLE, prefix=f"{store}: ").problem(key, message)])
