"""The private scratch folders of local Spark sessions: made, marked, removed.

A process that starts a local session gets one folder ``rmqk-spark-*`` in the
system temp directory (see :mod:`rmqk.plugins.spark.session`), removed when the
process exits. A process that never reaches its exit handlers cannot remove it:
SIGKILL (of the process, or of its whole process group, JVM included), a
supervisor's kill after its stop timeout, ``os._exit``. So each folder holds an
owner file naming the process that made it, and a process that makes a folder
removes those whose owner is gone, when it makes its own and when it exits.
Folders without that file (made by someone else, or by an older rmqk) are never
touched.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["OWNER_FILE", "PREFIX", "private_folder", "sweep"]

PREFIX = "rmqk-spark-"
OWNER_FILE = ".rmqk-owner.json"

# (pid, folder): a forked child inherits this list, and must neither reuse nor
# remove its parent's folder, which the parent's JVM is still writing into.
_made: list[tuple[int, str]] = []

# A JVM whose session was not stopped keeps running until this process has
# exited, and may still be writing into the folder while it is removed.
_REMOVE_DELAYS = (0.0, 0.05, 0.25)


def private_folder() -> str:
    """This process's scratch folder; the first call makes it, after a sweep."""
    pid = os.getpid()
    for owner, folder in _made:
        if owner == pid:
            return folder
    base = tempfile.gettempdir()
    sweep(base)
    folder = tempfile.mkdtemp(prefix=PREFIX, dir=base)
    _write_owner(folder, _identity(pid))
    _made.append((pid, folder))
    return folder


def sweep(base: str) -> list[str]:
    """Remove the rmqk scratch folders in ``base`` whose owning process is gone."""
    removed: list[str] = []
    if os.name != "posix":
        return removed  # os.kill(pid, 0) there is not a probe but a Ctrl-C
    uid = os.getuid()
    here = _here()
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            if not entry.name.startswith(PREFIX):
                continue
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                owner = json.loads((Path(entry.path) / OWNER_FILE).read_text())
            except (OSError, ValueError):
                continue  # not rmqk's, or its owner file is still being written
            if isinstance(owner, dict) and _owner_gone(owner, here):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


@atexit.register
def _remove_own() -> None:
    pid = os.getpid()
    bases = set()
    for owner, folder in _made:
        if owner == pid:
            _remove(folder, pid)
            bases.add(os.path.dirname(folder))
    # A process that ran for long (a test run, a parent of consumers) may have
    # seen others killed since it swept: take their folders now rather than
    # leave them until some later session starts.
    for base in bases:
        sweep(base)


def _remove(folder: str, pid: int) -> None:
    for delay in _REMOVE_DELAYS:
        time.sleep(delay)
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
    # The owner file may be gone with part of the rest: put it back so that the
    # next sweep, which only takes marked folders, still takes this one.
    with contextlib.suppress(OSError):
        _write_owner(folder, _identity(pid))


def _write_owner(folder: str, identity: dict[str, Any]) -> None:
    Path(folder, OWNER_FILE).write_text(json.dumps(identity))


def _identity(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": _start_ticks(pid), **_here()}


def _here() -> dict[str, str]:
    """Where pids mean the same process: a pid seen from another host or pid
    namespace sharing this temp directory says nothing about that process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return {"host": socket.gethostname(), "pidns": namespace}


def _start_ticks(pid: int) -> int | None:
    """When the process started (Linux), which tells a reused pid from its first owner."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 2, the command name, may hold spaces and ')': count from its end.
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _owner_gone(owner: dict[str, Any], here: dict[str, str]) -> bool:
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if owner.get("host") != here["host"] or owner.get("pidns") != here["pidns"]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's: not ours to judge
    started = owner.get("start")
    return started is not None and _start_ticks(pid) not in (None, started)
