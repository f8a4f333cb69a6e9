"""What the two Spark scenarios share: availability checks and ``key=value`` options."""

from __future__ import annotations

import argparse
import importlib.util

from rmqk.model.errors import RmqkError

__all__ = ["Pending", "key_values", "require_pyspark"]


class Pending(RmqkError):
    """The scenario cannot run yet: a piece it measures is missing (not a failure)."""


def require_pyspark() -> None:
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise Pending(f"needs {' and '.join(missing)}: pip install 'rocketmq-kernel[spark]'")


def key_values(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected key=value, got {item!r}")
        out[key.strip()] = value
    return out
