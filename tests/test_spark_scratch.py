"""A Spark scratch folder outlives a killed process only until the next local session starts.

A process killed with SIGKILL (here with its whole process group, JVM included, as
the crash tests and a supervisor's stop timeout do) runs no exit handler, so its
``rmqk-spark-*`` folder stays. The next process that makes one removes it (so
does a process that made one, when it exits), and never a folder whose owner
still runs or that rmqk did not mark as its own. The children get a private
TMPDIR: the check sees only their folders, and touches nobody else's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqk.plugins.spark import scratch

CRASHING = """
import sys, time
from rmqk.plugins.spark.session import get_session
session = get_session(conf={"spark.driver.memory": "512m"})
session.sparkContext.setLogLevel("ERROR")
# A shuffle, so that the JVM fills the folder (blockmgr-*, spark-*) as a sink does.
df = session.range(1000).repartition(3)
assert len(df.groupBy(df.id % 7).count().collect()) == 7
print(session.sparkContext.getConf().get("spark.local.dir"), flush=True)
time.sleep(3600)  # the test kills the process group here
"""

NEXT_SESSION = """
from rmqk.plugins.spark.session import get_session, stop_session
session = get_session(conf={"spark.driver.memory": "512m"})
assert session.range(10).count() == 10
print(session.sparkContext.getConf().get("spark.local.dir"), flush=True)
stop_session()
"""

FOLDER_ONLY = """
from rmqk.plugins.spark.session import _private_scratch
wanted = {"spark.master": "local[2]"}
_private_scratch(wanted)
print(wanted["spark.local.dir"], flush=True)
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_DIRS"}
    env["TMPDIR"] = str(tmp)
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _run(code: str, env: dict[str, str]) -> Path:
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_folder_of_a_killed_process_is_removed_by_the_next_session(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    foreign = tmp / "rmqk-spark-not-marked"  # like bench's rmqk-spark-standalone-*
    foreign.mkdir()
    (foreign / "keep").write_text("not rmqk's session folder")
    env = _env(tmp)
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        crashed = Path(proc.stdout.readline().strip())
        assert crashed.parent == tmp and crashed.name.startswith("rmqk-spark-"), crashed
        assert any(crashed.glob("blockmgr-*"))
        # While its owner runs, another process's sweep leaves the folder alone.
        other = _run(FOLDER_ONLY, env)
        assert crashed.is_dir() and not other.exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    _wait_for_group_gone(proc.pid)
    assert crashed.is_dir(), "SIGKILL ran no exit handler: the folder is the crash's leftover"
    following = _run(NEXT_SESSION, env)
    assert following.parent == tmp
    assert sorted(tmp.glob("rmqk-spark-*")) == [foreign]
    assert (foreign / "keep").exists()


EXITING = """
import sys
from rmqk.plugins.spark.session import _private_scratch
wanted = {"spark.master": "local[2]"}
_private_scratch(wanted)
print(wanted["spark.local.dir"], flush=True)
sys.stdin.readline()
"""


def test_a_process_takes_folders_of_processes_killed_while_it_ran(tmp_path: Path) -> None:
    """The folder of a consumer killed during a long run goes when the run ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", EXITING],
        env=_env(tmp),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    own = Path(proc.stdout.readline().strip())
    killed = _marked(
        tmp, "killed-meanwhile", {"pid": _dead_pid(), "start": None, **scratch._here()}
    )
    proc.communicate("\n", timeout=60)
    assert proc.returncode == 0
    assert own.parent == tmp and not own.exists()
    assert not killed.exists()


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def _wait_for_group_gone(pgid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process group {pgid} still runs after SIGKILL")


def _marked(base: Path, name: str, owner: dict[str, object]) -> Path:
    folder = base / f"{scratch.PREFIX}{name}"
    folder.mkdir()
    (folder / "data").write_text("x")
    (folder / scratch.OWNER_FILE).write_text(json.dumps(owner))
    return folder


def test_sweep_takes_only_marked_folders_whose_owner_is_gone(tmp_path: Path) -> None:
    dead_pid = _dead_pid()
    here = scratch._here()
    me = scratch._identity(os.getpid())
    dead = _marked(tmp_path, "dead", {"pid": dead_pid, "start": None, **here})
    alive = _marked(tmp_path, "alive", me)
    reused = _marked(tmp_path, "reused", {**me, "start": -1})  # our pid, an earlier process
    elsewhere = _marked(
        tmp_path,
        "elsewhere",
        {"pid": dead_pid, "start": None, "host": here["host"] + "-other", "pidns": here["pidns"]},
    )
    broken = _marked(tmp_path, "broken", {"pid": dead_pid, **here})
    (broken / scratch.OWNER_FILE).write_text('{"pid": ')  # still being written
    unmarked = tmp_path / f"{scratch.PREFIX}unmarked"
    unmarked.mkdir()
    expected = {str(dead)} | ({str(reused)} if me["start"] is not None else set())
    assert set(scratch.sweep(str(tmp_path))) == expected
    assert not dead.exists()
    assert reused.exists() == (me["start"] is None)  # without /proc a reused pid looks alive
    assert alive.is_dir() and elsewhere.is_dir() and broken.is_dir() and unmarked.is_dir()
