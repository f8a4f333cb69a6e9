"""The cluster a scenario runs against: the embedded broker, or any one by address.

``process`` (the default) runs the embedded name server and broker as
``python -m rmqk.cli broker --port 0`` in a child process, so the broker and the
client under test each have their own interpreter and GIL (on this 2-core
machine they still share the cores). ``thread`` runs it on its own event loop in
a thread of the benchmark process, sharing the GIL with the client: cheaper to
start, slower to serve. ``--namesrv HOST:PORT`` skips both and uses a running
cluster (Apache's or an embedded one started by hand).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rmqk.model import MessageQueue
from rmqk.model.errors import RmqkError
from rmqk.pluginmanager import get_plugin_manager, registries
from rmqk.spi.transport import Transport, TransportConfig

__all__ = ["BROKER_MODES", "Cluster", "make_transport", "queues_of"]

BROKER_MODES = ("process", "thread")
_NAMESRV_LINE = re.compile(r"name server listening on (\S+)")
_BROKER_LINE = re.compile(r"broker \S+ \(cluster \S+\) listening on (\S+)")


def make_transport(namesrv_addr: str, **config: Any) -> Transport:
    """A ``tcp`` transport of the plugin registry, with the RPC hooks wired as the engine does."""
    transport: Transport = registries().transports.create(
        "tcp",
        TransportConfig(namesrv_addrs=(namesrv_addr,), hook=get_plugin_manager().hook, **config),
    )
    return transport


async def queues_of(transport: Transport, topic: str) -> list[tuple[MessageQueue, str]]:
    """Every readable queue of ``topic`` with its master broker's address."""
    route = await transport.get_route(topic, 5000)
    if route is None:
        raise RmqkError(f"topic {topic} has no route on the name server")
    masters = {b.broker_name: b.broker_addrs.get(0) for b in route.broker_datas}
    out: list[tuple[MessageQueue, str]] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(qd.broker_name)
        if addr is None:
            continue
        out.extend(
            (MessageQueue(topic, qd.broker_name, i), addr) for i in range(qd.read_queue_nums)
        )
    return out


class Cluster:
    """A name server address plus the means to create topics on every master broker.

    Use as an async context manager; it starts (and stops) the embedded broker
    unless ``namesrv_addr`` names a running cluster.
    """

    def __init__(
        self,
        namesrv_addr: str | None = None,
        *,
        mode: str = "process",
        data_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if namesrv_addr is None and mode not in BROKER_MODES:
            raise RmqkError(f"broker mode must be one of {', '.join(BROKER_MODES)}, got {mode!r}")
        self.mode = "external" if namesrv_addr else mode
        self._namesrv_addr = namesrv_addr
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._own_dir: str | None = None
        self._start_timeout = start_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._thread: Any = None
        self.broker_pid: int | None = None

    @property
    def namesrv_addr(self) -> str:
        if self._namesrv_addr is None:
            raise RmqkError("the cluster is not started")
        return self._namesrv_addr

    def describe(self) -> str:
        if self.mode == "external":
            return f"cluster at {self._namesrv_addr}"
        return f"embedded broker ({self.mode})"

    async def __aenter__(self) -> Cluster:
        if self.mode == "external":
            return self
        if self._data_dir is None:
            self._own_dir = tempfile.mkdtemp(prefix="rmqk-bench-")
            self._data_dir = Path(self._own_dir)
        if self.mode == "process":
            await asyncio.get_running_loop().run_in_executor(None, self._start_process)
        else:
            from rmqk.plugins.broker import EmbeddedBroker

            self._thread = EmbeddedBroker.run_in_thread(
                self._data_dir, namesrv_port=0, broker_port=0, start_timeout=self._start_timeout
            )
            self._namesrv_addr = self._thread.namesrv_addr
            self.broker_pid = os.getpid()
        return self

    def _start_process(self) -> None:
        assert self._data_dir is not None
        cmd = [
            sys.executable,
            "-m",
            "rmqk.cli",
            "broker",
            "--port",
            "0",
            "--data",
            str(self._data_dir),
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.broker_pid = self._proc.pid
        found: dict[str, str] = {}
        seen: list[str] = []

        def read() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            for line in self._proc.stdout:
                seen.append(line.rstrip())
                if m := _NAMESRV_LINE.search(line):
                    found["namesrv"] = m.group(1)
                if m := _BROKER_LINE.search(line):
                    found["broker"] = m.group(1)
                if len(found) == 2:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self._start_timeout)
        if len(found) < 2:
            self._stop_process()
            output = "\n".join(seen[-20:]) or "(no output)"
            raise RmqkError(
                f"the embedded broker ({' '.join(cmd)}) did not report its ports within "
                f"{self._start_timeout:.0f} s; its output:\n{output}"
            )
        self._namesrv_addr = found["namesrv"]
        # Keep draining its output so the broker never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        with contextlib.suppress(ValueError, OSError):
            for _ in proc.stdout:
                pass

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    async def __aexit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        if self._proc is not None:
            await loop.run_in_executor(None, self._stop_process)
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await loop.run_in_executor(None, thread.stop)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    async def create_topic(self, topic: str, queues: int, timeout: float = 30.0) -> None:
        """Create ``topic`` with ``queues`` read and write queues on every master broker,
        and wait until the name server's route shows them."""
        from rmqk.plugins.admin.admin_client import AdminClient

        async with AdminClient(self.namesrv_addr, timeout=5.0) as admin:
            masters = [b.master for b in await admin.masters() if b.master is not None]
            if not masters:
                raise RmqkError(f"no master broker registered at {self.namesrv_addr}")
            for addr in masters:
                await admin.create_topic(
                    addr, topic, read_queues=queues, write_queues=queues, perm=6, order=False
                )
        # AdminClient.close() does not wait for its connections' read tasks; give them
        # a moment to see the close, or asyncio reports them destroyed while pending.
        await asyncio.sleep(0.05)
        transport = make_transport(self.namesrv_addr)
        await transport.start()
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(RmqkError):
                    if len(await queues_of(transport, topic)) >= queues * len(masters):
                        return
                if time.monotonic() > deadline:
                    raise RmqkError(
                        f"topic {topic} has no route with {queues} queues after {timeout} s"
                    )
                await asyncio.sleep(0.2)
        finally:
            await transport.close()
