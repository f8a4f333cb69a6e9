"""The ``sqlite`` sink's ``sink_options`` table, declared."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.spi.options import OptionInvalid, OptionType, Where, load_options, option

__all__ = ["SqliteOptions", "parse_sqlite_options"]

# The table name is put into SQL text (it cannot be a bound parameter): only plain names.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def _plain_name(name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise OptionInvalid(f"must be a plain SQL table name, got {name!r}")
    return name


@attrs.frozen
class SqliteOptions:
    path: str = option(
        OptionType.PATH,
        "The SQLite database file, created if missing.",
        required="the database file to write",
    )
    table: str = option(
        OptionType.STR,
        "The table the messages go to, created if missing; the offsets each flush committed "
        "go to <table>_offsets in the same transaction, so every message is written exactly once.",
        "messages",
        check=_plain_name,
    )


def parse_sqlite_options(options: Mapping[str, Any]) -> SqliteOptions:
    """The options, or a ConfigError listing every problem."""
    return load_options(SqliteOptions, options, Where("<sink_options>", "sqlite"))
