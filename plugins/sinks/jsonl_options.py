"""The ``jsonl`` sink's ``sink_options`` table, declared."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.plugins.sinks.badbody import (
    BAD_BODY_ACTIONS,
    CORRUPT_RECORD_COLUMN,
    CORRUPT_RECORD_COLUMN_DOC,
    ON_BAD_BODY_DOC,
    check_column_name,
)
from rmqk.plugins.sinks.records import BODY_FORMATS, RECORD_KEYS
from rmqk.spi.options import OptionType, Where, option, parse_options

__all__ = ["JsonlOptions", "jsonl_option_problems", "parse_jsonl_options"]


@attrs.frozen
class JsonlOptions:
    path: str = option(OptionType.PATH, "The file to append to.", required="the file to append to")
    body_format: str = option(
        OptionType.STR,
        "How a body is written: text (UTF-8), json (parsed; a body that is not JSON is "
        "null, its text in corrupt_record_column, see on_bad_body) or base64.",
        "text",
        allowed=BODY_FORMATS,
    )
    on_bad_body: str = option(OptionType.STR, ON_BAD_BODY_DOC, "keep", allowed=BAD_BODY_ACTIONS)
    corrupt_record_column: str = option(
        OptionType.STR, CORRUPT_RECORD_COLUMN_DOC, CORRUPT_RECORD_COLUMN, check=check_column_name
    )
    fsync: bool = option(
        OptionType.BOOL, "fsync after each write, before the batch is acknowledged.", True
    )
    # The keys the table gave, for the checks across options below.
    given_keys: frozenset[str] = attrs.field(factory=frozenset, eq=False)


_WHERE = Where("<sink_options>", "jsonl")


def parse_jsonl_options(options: Mapping[str, Any]) -> JsonlOptions:
    """The options, or a ConfigError listing every problem."""
    parsed, problems = parse_options(JsonlOptions, options, _WHERE)
    problems += jsonl_option_problems(parsed)
    if problems:
        raise ConfigError(problems)
    return parsed


def jsonl_option_problems(parsed: JsonlOptions) -> list[ConfigProblem]:
    """What the declarations cannot say: the checks across options."""
    at = _WHERE
    problems: list[ConfigProblem] = []
    for key in ("on_bad_body", "corrupt_record_column"):
        if key in parsed.given_keys and parsed.body_format != "json":
            problems.append(at.problem(key, "only used with body_format = 'json'"))
    if parsed.corrupt_record_column in RECORD_KEYS:
        problems.append(
            at.problem(
                "corrupt_record_column",
                f"{parsed.corrupt_record_column!r} is a key every record has; "
                f"keys: {', '.join(RECORD_KEYS)}",
            )
        )
    return problems
