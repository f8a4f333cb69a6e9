"""rmqk.plugins.spark: the Spark sink, the ``rocketmq`` Spark source and ``rmqk demo``.

* sink ``spark`` (:class:`~rmqk.plugins.spark.sink.SparkSink`): group commits of
  consumed messages into Parquet or a table, acknowledged only once written,
  optionally exactly once;
* ``spark.readStream.format("rocketmq")`` / ``spark.read.format("rocketmq")``
  (:mod:`rmqk.plugins.spark.source`), available after :func:`register` or on
  any session from :func:`get_session`;
* ``rmqk demo``: an embedded broker, a dataset, a composed consumer writing
  Parquet through the sink, and a report read back with Spark.

Importing this package does not import pyspark: the plugin loads (for ``rmqk
plugins``, say) where Spark is not installed, and says what to install when a
Spark feature is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rmqk.plugins.spark.sink import SPARK_SINK, SparkSink
from rmqk.spi.hookspecs import Register, hookimpl

__all__ = ["SparkSink", "get_session", "register", "rmqk_register_commands", "rmqk_register_sinks"]


def register(spark: Any) -> None:
    """Register the ``rocketmq`` data source on a SparkSession."""
    from rmqk.plugins.spark.session import require_spark

    require_spark()
    from rmqk.plugins.spark.source import register as register_source

    register_source(spark)


def get_session(
    master: str | None = None,
    app_name: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """The process's SparkSession (started on first use), with ``rocketmq`` registered."""
    from rmqk.plugins.spark.session import get_session as _get_session

    return _get_session(master, app_name, conf)


@hookimpl
def rmqk_register_sinks(register: Register) -> None:
    register(SPARK_SINK)


@hookimpl
def rmqk_register_commands(register: Register) -> None:
    from rmqk.plugins.spark.demo import DEMO_COMMAND

    register("demo", DEMO_COMMAND)
