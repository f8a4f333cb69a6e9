"""A Spark session rmqk starts leaves nothing behind in the system temp directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

CHILD = """
import sys
from rmqk.plugins.spark.session import get_session, stop_session
session = get_session()
session.range(100).write.parquet(sys.argv[1])
stop_session()
"""


def _scratch_folders() -> set[str]:
    tmp = Path(tempfile.gettempdir())
    prefixes = ("spark-", "blockmgr-", "rmqk-spark-")
    return {p.name for p in tmp.iterdir() if p.name.startswith(prefixes)}


def test_local_session_scratch_folders_are_removed_at_exit(tmp_path: Path) -> None:
    # The JVM ignores TMPDIR and writes to the system temp directory, so the check is
    # there: no folder that was not there before the child ran.
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_DIRS"}
    env["PYSPARK_PYTHON"] = sys.executable
    out = tmp_path / "out.parquet"
    before = _scratch_folders()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(out)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(out.glob("*.parquet"))
    assert _scratch_folders() - before == set()
