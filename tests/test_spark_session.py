"""A Spark session rmqk starts leaves nothing behind in the system temp directory.

Spark's JVM ends without running its clean-up, so its ``spark-*`` and ``blockmgr-*``
folders stay wherever it made them. rmqk points a local session's scratch space
(``spark.local.dir`` and the driver's ``java.io.tmpdir``) at one private folder and
removes that folder at exit. The check reads where the child's JVM really put its
scratch space, so other processes using the same temp directory cannot disturb it.
"""

from __future__ import annotations

import json
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
import json, sys
from rmqk.plugins.spark.session import get_session, stop_session
session = get_session()
session.range(100).write.parquet(sys.argv[1])
jvm = session.sparkContext._jvm
print(json.dumps({
    "tmpdir": jvm.System.getProperty("java.io.tmpdir"),
    "local_dir": session.sparkContext.getConf().get("spark.local.dir", ""),
}))
stop_session()
"""


def test_local_session_scratch_space_is_private_and_removed_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_DIRS"}
    env["PYSPARK_PYTHON"] = sys.executable
    out = tmp_path / "out.parquet"
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(out)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(out.glob("*.parquet"))
    where = json.loads(result.stdout.strip().splitlines()[-1])
    system_tmp = Path(tempfile.gettempdir()).resolve()
    scratch = Path(where["local_dir"])
    # Both the JVM's temp directory and Spark's local dir are the one private folder...
    assert where["local_dir"], "spark.local.dir was left to Spark's default (the system temp)"
    assert Path(where["tmpdir"]) == scratch
    assert scratch.parent.resolve() == system_tmp and scratch.name.startswith("rmqk-spark-")
    # ...and it is gone once the process exited, with everything Spark put in it.
    assert not scratch.exists()
