"""A Spark standalone cluster on loopback, started from the installed pyspark package.

One master and N workers (one core each by default), each a JVM launched with
``<pyspark>/bin/spark-class`` in its own process group, so that killing a
worker's group (:meth:`StandaloneCluster.kill_worker`) takes its executors and
their Python workers with it, as a machine that dies would. ``stop`` kills
every group and removes the folder holding the work dirs and the logs.

Used by ``python -m bench spark-source --master standalone-2`` and by
tests/test_spark_cluster.py; docs/spark.md has the same recipe as shell commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs

from rmqk.model.errors import RmqkError

__all__ = ["StandaloneCluster", "WorkerProcess", "app_executors", "free_port", "spark_home"]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spark_home() -> Path:
    """The installed pyspark package: it is a complete Spark distribution (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@attrs.define
class WorkerProcess:
    index: int
    work_dir: Path
    webui_port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1; a context manager."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        root: Path | None = None,
        start_timeout: float = 240.0,
    ) -> None:
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="rmqk-spark-standalone-"))
        self.port = free_port()
        self.webui_port = free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[WorkerProcess] = []

    @property
    def url(self) -> str:
        """The master URL a driver connects to (``--master``)."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home())
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        # Keep the daemons small: they only schedule; executors get their own heap.
        env.setdefault("SPARK_DAEMON_MEMORY", "256m")
        return env

    def _launch(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                cwd=self.root,
                start_new_session=True,  # its own group: kill_worker takes its executors too
            )

    def start(self) -> StandaloneCluster:
        try:
            self.master = self._launch(
                [
                    MASTER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
                self.root / "master.log",
            )
            for i in range(self.worker_count):
                self.workers.append(self._start_worker(i))
            self.wait_for_workers(self.worker_count)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self, index: int) -> WorkerProcess:
        work_dir = self.root / f"worker-{index}"
        work_dir.mkdir(parents=True, exist_ok=True)
        webui_port = free_port()
        log = self.root / f"worker-{index}.log"
        proc = self._launch(
            [
                WORKER_CLASS,
                self.url,
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(webui_port),
                "--work-dir",
                str(work_dir),
            ],
            log,
        )
        return WorkerProcess(index, work_dir, webui_port, log, proc)

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, their cores in use, applications)."""
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as response:
            data: dict[str, Any] = json.load(response)
            return data

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._check_alive()
            with contextlib.suppress(OSError, ValueError):
                if self.state().get("aliveworkers", 0) >= count:
                    return
            if time.monotonic() > deadline:
                raise RmqkError(
                    f"the standalone cluster has not {count} live workers after "
                    f"{self.start_timeout:.0f} s; logs in {self.root}\n{self.logs_tail()}"
                )
            time.sleep(0.5)

    def _check_alive(self) -> None:
        procs = [self.master] + [w.proc for w in self.workers]
        if any(p is None or p.poll() is not None for p in procs):
            raise RmqkError(f"a Spark daemon exited early; logs in {self.root}\n{self.logs_tail()}")

    def logs_tail(self, chars: int = 2000) -> str:
        out = []
        for log in sorted(self.root.glob("*.log")):
            text = log.read_text(errors="replace")
            out.append(f"--- {log.name}\n{text[-chars:]}")
        return "\n".join(out)

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker, its executors and their Python workers, as if its machine died.

        The executors share the worker's process group; PySpark's daemon makes a group of
        its own, so every descendant is found (before the kill) and killed too.
        """
        worker = self.workers[index]
        doomed = _descendants(worker.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.proc.wait(30)

    def stop(self) -> None:
        """Kill every daemon's process group (executors included) and remove the folder."""
        procs = [w.proc for w in self.workers] + ([self.master] if self.master else [])
        doomed = [pid for proc in procs for pid in _descendants(proc.pid)]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        self.workers.clear()
        self.master = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            for path in self.root.glob("worker-*"):
                shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; none found elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name may hold spaces and parentheses: the ppid follows the last ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def app_executors(ui_url: str, app_id: str) -> list[dict[str, Any]]:
    """A driver's executors, dead ones too, from its REST API (``spark.ui.enabled``)."""
    url = f"{ui_url.rstrip('/')}/api/v1/applications/{app_id}/allexecutors"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            data: list[dict[str, Any]] = json.load(response)
            return data
    except urllib.error.URLError as exc:
        raise RmqkError(f"no executor list at {url}: {exc}") from exc
