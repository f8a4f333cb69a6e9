"""The process's one SparkSession, built with the settings rmqk needs.

:func:`get_session` starts it on first use (a blocking call of several
seconds: from async code run it with ``asyncio.to_thread``) and returns the same
session afterwards. Before starting it sets, unless the user already did:

* ``PYSPARK_PYTHON`` to this interpreter, so Python workers find pyarrow and
  rmqk (they default to ``python3`` on PATH, usually another environment);
* ``SPARK_LOCAL_IP`` to ``127.0.0.1``;
* ``spark.ui.enabled=false`` and ``spark.ui.showConsoleProgress=false``;
* for a ``local`` master, ``spark.local.dir`` and the driver's ``java.io.tmpdir`` to
  a private folder of the system temp directory, removed when the process exits
  (or, if it is killed, by the next process that starts one: see
  :mod:`rmqk.plugins.spark.scratch`): Spark's JVM ends without running its
  clean-up, and would leave its ``spark-*`` and ``blockmgr-*`` folders behind on
  every run. (A user who sets ``spark.local.dir`` or ``SPARK_LOCAL_DIRS`` keeps
  their own.)

The ``rocketmq`` data source is registered on the session it returns.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from rmqk.errors import ClientError
from rmqk.plugins.spark.scratch import private_folder

__all__ = ["DEFAULT_CONF", "get_session", "require_spark", "stop_session"]

log = logging.getLogger("rmqk.plugins.spark")

DEFAULT_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}

_lock = threading.Lock()
_session: Any = None
_settings: dict[str, str] = {}


def require_spark() -> None:
    """Raise a clear error when pyspark or pyarrow is missing."""
    missing = []
    for name in ("pyspark", "pyarrow"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ClientError(
            f"the spark plugin needs {' and '.join(missing)}: "
            "pip install 'rocketmq-kernel[spark]' (pyspark>=4.0, pyarrow>=18, and Java 17+)"
        )


def get_session(
    master: str | None = None,
    app_name: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """The process's SparkSession, started with these settings if none is running.

    A session that is already running (started by rmqk or by the user) is
    returned as it is; settings that differ from it are logged, not applied,
    since most of them are fixed once the JVM runs.
    """
    global _session
    require_spark()
    from pyspark.sql import SparkSession

    explicit = dict(conf or {})
    if master:
        explicit["spark.master"] = master
    if app_name:
        explicit["spark.app.name"] = app_name
    wanted = dict(DEFAULT_CONF)
    wanted.update(explicit)
    if "spark.master" not in wanted:
        # Under spark-submit the master is the one it was given, not our default.
        wanted["spark.master"] = _submitted_master() or "local[2]"
    wanted.setdefault("spark.app.name", "rmqk")
    with _lock:
        active = SparkSession.getActiveSession()
        if _session is not None and _is_alive(_session):
            session = _session
        elif active is not None and _is_alive(active):
            session = active
        else:
            session = None
        if session is not None:
            _warn_differences(session, explicit)
            _register(session)
            return session
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        _private_scratch(wanted)
        builder = SparkSession.builder
        for key, value in wanted.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        _session = session
        _settings.clear()
        _settings.update(wanted)
        _register(session)
        log.info(
            "spark session started: master %s, app %s",
            wanted["spark.master"],
            wanted["spark.app.name"],
        )
        return session


def stop_session() -> None:
    """Stop the session :func:`get_session` started (a later call starts a new one)."""
    global _session
    with _lock:
        session, _session = _session, None
        _settings.clear()
    if session is not None:
        session.stop()


def _submitted_master() -> str | None:
    """The master spark-submit (or the pyspark shell) started this process with, if any."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    master: str | None = SparkConf().get("spark.master", None)
    return master


def _private_scratch(wanted: dict[str, str]) -> None:
    """Point a local session's scratch space at a folder rmqk removes (see the module doc)."""
    if not wanted["spark.master"].startswith("local") or "spark.local.dir" in wanted:
        return
    if "SPARK_LOCAL_DIRS" in os.environ:
        return
    # One folder per process: the JVM outlives a stopped session, and its
    # java.io.tmpdir is fixed when it starts.
    folder = private_folder()
    wanted["spark.local.dir"] = folder
    java_options = wanted.get("spark.driver.extraJavaOptions", "")
    if "java.io.tmpdir" not in java_options:
        tmpdir = f"-Djava.io.tmpdir={folder}"
        wanted["spark.driver.extraJavaOptions"] = f"{java_options} {tmpdir}".strip()


def _is_alive(session: Any) -> bool:
    try:
        sc = session.sparkContext
        return sc._jsc is not None and not sc._jsc.sc().isStopped()
    except Exception:
        return False


def _warn_differences(session: Any, wanted: Mapping[str, str]) -> None:
    for key, value in wanted.items():
        try:
            current = session.conf.get(key, None)
        except Exception:
            current = None
        if current is not None and current != value:
            log.warning(
                "the running Spark session has %s=%s; the sink's %s=%s is not applied "
                "(one session per process, configured by whoever starts it first)",
                key,
                current,
                key,
                value,
            )


def _register(session: Any) -> None:
    from rmqk.plugins.spark.source import register

    register(session)
