"""The ``jsonl`` sink's ``sink_options`` table, declared."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.options import OptionType, Where, load_options, option
from rmqk.plugins.sinks.records import BODY_FORMATS

__all__ = ["JsonlOptions", "parse_jsonl_options"]


@attrs.frozen
class JsonlOptions:
    path: str = option(OptionType.PATH, "The file to append to.", required="the file to append to")
    body_format: str = option(
        OptionType.STR,
        "How a body is written: text (UTF-8), json (parsed; text if it is not JSON) or base64.",
        "text",
        allowed=BODY_FORMATS,
    )
    fsync: bool = option(
        OptionType.BOOL, "fsync after each write, before the batch is acknowledged.", True
    )


def parse_jsonl_options(options: Mapping[str, Any]) -> JsonlOptions:
    """The options, or a ConfigError listing every problem."""
    return load_options(JsonlOptions, options, Where("<sink_options>", "jsonl"))
