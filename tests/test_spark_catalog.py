"""A table the Spark sink writes is readable by another process, as docs/spark.md says;
the JVM's own output goes to spark.log, not the terminal (issue 28 #2 and #4).

``examples/spark-table.toml`` runs as a user runs it, ``rmqk run`` with stderr to a
file, against an embedded broker; then docs/spark.md's snippets of "Tables" run
verbatim in fresh interpreters started in the same folder: pandas while ``rmqk run``
still runs, PySpark (SQL included) refused the locked catalog then, and reading the
table once it has stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import module_broker, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent
ORDERS = 300

broker = module_broker()


def _until(what: Callable[[], bool], seconds: float, why: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting: {why}")


def _snippets() -> dict[str, str]:
    """The python blocks of the "Tables" part of docs/spark.md: pyspark and pandas."""
    page = (ROOT / "docs" / "spark.md").read_text()
    section = page.split("### Tables", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 2, blocks
    return {"pyspark": blocks[0], "pandas": blocks[1]}


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _rows_written(table: Path) -> int:
    import pyarrow.dataset as ds

    if not table.is_dir():
        return 0
    return int(ds.dataset(table, format="parquet").count_rows())


def test_the_table_is_read_back_by_another_process(broker: Any, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    ns = broker.namesrv_addr
    sent = produce(ns, "Orders", "--count", str(ORDERS), "--tags", "paid")
    assert sent.returncode == 0, sent.stderr
    config = tmp_path / "spark-table.toml"
    text = (ROOT / "examples" / "spark-table.toml").read_text()
    config.write_text(text.replace('"127.0.0.1:9876"', json.dumps(ns)))
    work = tmp_path / "work"
    work.mkdir()
    snippets = _snippets()
    log = tmp_path / "rmqk.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmqk.cli", "run", str(config)],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        try:
            _until(
                lambda: _rows_written(work / "spark-warehouse" / "orders_raw") >= ORDERS,
                300,
                f"{ORDERS} rows in the table",
            )
            # While rmqk run holds the catalog: pandas reads the files; Spark's embedded
            # metastore admits one process, so a second session is refused.
            pandas_meanwhile = _python(snippets["pandas"], work)
            locked = _python(snippets["pyspark"], work)
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            out, _ = proc.communicate(timeout=300)
    said = log.read_text()
    assert proc.returncode == 0, said
    assert pandas_meanwhile.returncode == 0, pandas_meanwhile.stderr
    assert f"{ORDERS} rows" in pandas_meanwhile.stdout
    assert locked.returncode != 0
    assert "Another instance of Derby may have already booted the database" in locked.stderr

    # The terminal shows rmqk's lines only; the JVM's startup notices are in spark.log.
    assert out == ""
    lines = said.splitlines()
    assert len(lines) == 2, said
    assert "running 1 consumer(s)" in lines[0] and "consumer stopped: orders" in lines[1], said
    jvm = (work / "spark.log").read_text()
    assert "NativeCodeLoader" in jvm and "NativeCodeLoader" not in said
    # The catalog is in the working directory, Spark's own layout.
    assert (work / "metastore_db").is_dir() and (work / "derby.log").is_file()

    # Stopped: another process opens the same catalog and finds the table.
    read = _python(snippets["pyspark"], work)
    assert read.returncode == 0, read.stderr
    assert f"{ORDERS} rows" in read.stdout
    assert re.search(rf"\|\s*paid\s*\|\s*{ORDERS}\s*\|", read.stdout), read.stdout
    pandas_after = _python(snippets["pandas"], work)
    assert pandas_after.returncode == 0, pandas_after.stderr
    assert f"{ORDERS} rows" in pandas_after.stdout and "paid" in pandas_after.stdout


def test_a_table_in_the_embedded_metastore_is_refused_with_processes(tmp_path: Path) -> None:
    """docs/spark.md: each worker would start its own Spark, and Derby admits one."""
    pytest.importorskip("pyspark")
    config = tmp_path / "c.toml"
    config.write_text(
        "[consumers.orders]\n"
        'group = "g-table-two"\n'
        'namesrv_addr = "127.0.0.1:9876"\n'
        'subscription = { Orders = "*" }\n'
        "processes = 2\n"
        'sink = "spark"\n'
        '[consumers.orders.sink_options]\ntable = "orders_raw"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "rmqk.cli", "run", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("rmqk: error: worker orders#"), result.stderr
    assert (
        "table orders_raw with processes = 2: each worker process starts its own Spark, and "
        "the embedded metastore admits one" in last
    ), result.stderr
    # Refused before any Spark started: no catalog, no JVM output.
    assert not (tmp_path / "metastore_db").exists() and not (tmp_path / "spark.log").exists()


def test_catalog_options_are_checked_and_laid_out_in_one_folder(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from rmqk.model.errors import ConfigError
    from rmqk.plugins.spark.options import parse_sink_options
    from rmqk.plugins.spark.session import catalog_settings

    defaults = parse_sink_options({"table": "t"})
    assert defaults.catalog_dir is None and defaults.spark_log == "spark.log"
    with pytest.raises(ConfigError, match="catalog_dir: only used with table"):
        parse_sink_options({"path": "out", "catalog_dir": "cat"})
    with pytest.raises(ConfigError, match="catalog_dir: must not be empty"):
        parse_sink_options({"table": "t", "catalog_dir": ""})
    with pytest.raises(ConfigError, match="spark_log: must be a file name, or false"):
        parse_sink_options({"table": "t", "spark_log": ""})
    assert parse_sink_options({"table": "t", "spark_log": False}).spark_log is None

    folder = tmp_path / "cat"
    settings, derby_home = catalog_settings(str(folder))
    assert derby_home == str(folder)
    assert settings == {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": f"{folder}/spark-warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder}/metastore_db;create=true"
        ),
    }
    # Unset: the working directory, absolute, as the docs' readers give it.
    assert catalog_settings(None)[1] == os.getcwd()


SINK_START = """
import asyncio, sys
from rmqk.plugins.spark.sink import SparkSink

async def main():
    sink = SparkSink({"path": "out", "writer": "spark", "master": "local[1]", **OPTIONS})
    await sink.start()
    await sink.close()
    print("started", file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("spark_log", ["logs/jvm.log", False])
def test_spark_log_names_where_the_jvm_output_goes(tmp_path: Path, spark_log: Any) -> None:
    """A file (relative to the working directory), or false for the terminal."""
    pytest.importorskip("pyspark")
    code = SINK_START.replace("OPTIONS", repr({"spark_log": spark_log}))
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.rstrip().endswith("started")
    if spark_log:
        assert "NativeCodeLoader" in (tmp_path / "logs" / "jvm.log").read_text()
        assert done.stderr == "started\n"
    else:
        assert "NativeCodeLoader" in done.stderr
        assert not (tmp_path / "spark.log").exists()
