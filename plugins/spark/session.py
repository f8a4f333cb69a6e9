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

For a sink that writes a table (``catalog=True``), the session's catalog is Spark's
Hive catalog with its embedded Derby metastore, in one folder (``catalog_dir``, the
working directory by default): ``metastore_db`` and ``derby.log`` beside the warehouse
``spark-warehouse``, Spark's own layout. Spark's default catalog lives in memory: a
table registered there is gone with the session, and no other session can read it.
Settings the user gives for these keys win.

With ``jvm_log``, a JVM this call launches writes its stdout and stderr (Spark's
startup notices and its log) to that file, appended, for as long as it runs; rmqk's
own output stays where it was.

The ``rocketmq`` data source is registered on the session it returns.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from rmqk.model.errors import ClientError
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
    *,
    catalog: bool = False,
    catalog_dir: str | None = None,
    jvm_log: str | None = None,
) -> Any:
    """The process's SparkSession, started with these settings if none is running.

    A session that is already running (started by rmqk or by the user) is
    returned as it is; settings that differ from it are logged, not applied,
    since most of them are fixed once the JVM runs. ``catalog`` asks for the
    Hive catalog in ``catalog_dir`` (see the module doc): given explicitly, a
    running session with another catalog is logged like any other setting.
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
    derby_home = None
    if catalog or catalog_dir is not None:
        settings, derby_home = catalog_settings(catalog_dir)
        for key, value in settings.items():
            if key not in explicit:
                wanted[key] = value
                if catalog_dir is not None:
                    explicit[key] = value
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
        if derby_home is not None and wanted.get("spark.sql.catalogImplementation") == "hive":
            # derby.log goes to derby.system.home: the catalog's folder, not wherever
            # the process was started.
            os.makedirs(derby_home, exist_ok=True)
            _add_java_option(wanted, "derby.system.home", derby_home)
        launched = _launch_jvm(wanted, jvm_log) if jvm_log else None
        builder = SparkSession.builder
        for key, value in wanted.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        _session = session
        _settings.clear()
        _settings.update(wanted)
        _register(session)
        log.info(
            "spark session started: master %s, app %s, catalog %s%s",
            wanted["spark.master"],
            wanted["spark.app.name"],
            wanted.get("spark.sql.catalogImplementation", "in-memory"),
            f"; the JVM's output goes to {launched}" if launched else "",
        )
        return session


def catalog_settings(catalog_dir: str | None) -> tuple[dict[str, str], str]:
    """The Spark settings of the Hive catalog in ``catalog_dir`` (the working directory
    when None), and the folder Derby's own files go to.

    Absolute paths: the metastore must be the same one whichever folder a reader
    starts in. A reader gives the same three settings (docs/spark.md shows them).
    """
    folder = os.path.abspath(catalog_dir if catalog_dir is not None else ".")
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": os.path.join(folder, "spark-warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={os.path.join(folder, 'metastore_db')};create=true"
        ),
    }, folder


def _add_java_option(wanted: dict[str, str], name: str, value: str) -> None:
    """``-Dname=value`` in the driver's Java options, unless the user set ``name`` there."""
    java_options = wanted.get("spark.driver.extraJavaOptions", "")
    if f"-D{name}=" not in java_options:
        wanted["spark.driver.extraJavaOptions"] = f"{java_options} -D{name}={value}".strip()


def _launch_jvm(wanted: Mapping[str, str], jvm_log: str) -> str | None:
    """Start Spark's JVM with its stdout and stderr appended to ``jvm_log``, as
    SparkContext would start it (spark-submit with these settings); the path, or None
    when there is no JVM to start here (one runs already, or spark-submit started
    this process and its JVM). The file, not this process's descriptors: rmqk's own
    output is not touched, even for a moment."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway as untyped_launch

    # Through a Callable, not a type: ignore: pyspark's launcher is untyped where pyspark
    # is installed and absent (Any) in the lint env, so an ignore is unused in one of them.
    launch: Callable[..., Any] = untyped_launch

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    path = os.path.abspath(jvm_log)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    conf = SparkConf(loadDefaults=False)
    for key, value in wanted.items():
        conf.set(key, value)
    with open(path, "ab") as out:
        # The child keeps its own copy of the descriptor; ours closes here.
        gateway = launch(conf, popen_kwargs={"stdout": out, "stderr": out})
    SparkContext._ensure_initialized(gateway=gateway)
    return path


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
        if current is not None and not _same_setting(key, current, value):
            log.warning(
                "the running Spark session has %s=%s; the sink's %s=%s is not applied "
                "(one session per process, configured by whoever starts it first)",
                key,
                current,
                key,
                value,
            )


def _same_setting(key: str, current: str, wanted: str) -> bool:
    if key == "spark.sql.warehouse.dir":
        # Spark keeps the warehouse as a qualified URI (file:/path) of the path given.
        return os.path.normpath(urlparse(current).path) == os.path.normpath(urlparse(wanted).path)
    return current == wanted


def _register(session: Any) -> None:
    from rmqk.plugins.spark.source import register

    register(session)
