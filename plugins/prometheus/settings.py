"""The ``[prometheus]`` table of a config file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmqk.model.errors import ConfigError, ConfigProblem
from rmqk.spi.options import describe_value, unknown_key_message

__all__ = ["TABLE", "PrometheusSettings"]

TABLE = "prometheus"
_KEYS = ("host", "port", "scrape_timeout")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464
DEFAULT_SCRAPE_TIMEOUT = 5.0


@attrs.frozen
class PrometheusSettings:
    """Where the metrics endpoint listens and how long a scrape may take."""

    host: str = DEFAULT_HOST
    # 0 picks a free port, logged at INFO as "serving metrics on http://host:port/metrics".
    port: int = DEFAULT_PORT
    # Seconds a scrape waits for one consumer's figures (its brokers' max offsets).
    scrape_timeout: float = DEFAULT_SCRAPE_TIMEOUT

    @classmethod
    def from_table(cls, table: object, path: str = "<config>") -> PrometheusSettings:
        """Validate the table; every mistake is reported at once, naming its key."""

        def problem(key: str | None, message: str) -> ConfigProblem:
            return ConfigProblem(path, TABLE, key, message)

        if not isinstance(table, Mapping):
            raise ConfigError(
                [problem(None, f"must be a table ([{TABLE}]), got {describe_value(table)}")]
            )
        problems = [problem(k, unknown_key_message(k, _KEYS)) for k in table if k not in _KEYS]
        values: dict[str, Any] = {}
        host = table.get("host", DEFAULT_HOST)
        if not isinstance(host, str) or not host.strip():
            problems.append(
                problem("host", f"must be an address to listen on, got {describe_value(host)}")
            )
        else:
            values["host"] = host
        port = table.get("port", DEFAULT_PORT)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            problems.append(
                problem(
                    "port",
                    f"must be a port number in [0, 65535] (0 picks a free one), "
                    f"got {describe_value(port)}",
                )
            )
        else:
            values["port"] = port
        timeout = table.get("scrape_timeout", DEFAULT_SCRAPE_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            problems.append(
                problem(
                    "scrape_timeout",
                    f"must be a positive number of seconds, got {describe_value(timeout)}",
                )
            )
        else:
            values["scrape_timeout"] = float(timeout)
        if problems:
            raise ConfigError(problems)
        return cls(**values)
