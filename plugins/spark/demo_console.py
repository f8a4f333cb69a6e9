"""What ``rmqk demo`` shows on the terminal, and where Spark's own output goes.

Spark's JVM writes to the file descriptors it inherits when it starts (log4j's
console appender, JDK warnings, ``[Stage ...]`` lines), past anything Python
can filter. The demo keeps them in a log file instead: while the JVM starts,
descriptors 1 and 2 point at the file, so that is what the JVM inherits, and the
demo's own lines go to copies of the original descriptors made beforehand.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from rmqk.console.termchart import CLEAR_EOL, progress_line, use_unicode

__all__ = ["DemoConsole", "ProgressBar", "jvm_output_to"]

# One redirect at a time: two would restore each other's descriptors.
_redirect_lock = threading.Lock()


def _copy_of(fd: int, like: Any) -> IO[str]:
    encoding = getattr(like, "encoding", None) or "utf-8"
    return os.fdopen(os.dup(fd), "w", encoding=encoding, errors="replace", buffering=1)


@contextlib.contextmanager
def jvm_output_to(path: str) -> Iterator[None]:
    """Point descriptors 1 and 2 at ``path`` (appended) for the duration: a JVM started
    inside inherits the file and keeps it."""
    with _redirect_lock:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = (os.dup(1), os.dup(2))
        log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, log_fd):
                os.close(fd)


class DemoConsole:
    """The demo's lines (stdout) and its transient status and progress lines (stderr,
    on a terminal only), written to copies of the descriptors the demo started with."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.out = out if out is not None else _copy_of(1, sys.stdout)
        self.err = err if err is not None else _copy_of(2, sys.stderr)
        self.live = bool(getattr(self.err, "isatty", lambda: False)())
        self.unicode = use_unicode(self.err) and use_unicode(self.out)
        self._transient = False

    def say(self, text: str) -> None:
        """A line that stays."""
        self.clear()
        self.out.write(text + "\n")
        self.out.flush()

    def status(self, text: str) -> None:
        """A line redrawn in place until the next one (nothing when not a terminal)."""
        if not self.live:
            return
        self.err.write("\r" + text + CLEAR_EOL)
        self.err.flush()
        self._transient = True

    def clear(self) -> None:
        if self._transient:
            self.err.write("\r" + CLEAR_EOL)
            self.err.flush()
            self._transient = False

    def progress(self, label: str) -> ProgressBar:
        return ProgressBar(label, self)

    def close(self) -> None:
        self.clear()
        for stream in (self.out, self.err):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


class ProgressBar:
    """A progress line redrawn in place at most ten times a second; it ends as a
    line that stays once ``done`` reaches ``total``."""

    def __init__(self, label: str, console: DemoConsole) -> None:
        self.label = label
        self.console = console
        self.started = time.monotonic()
        self._last = 0.0

    def line(self, done: int, total: int) -> str:
        rate = done / max(time.monotonic() - self.started, 1e-6)
        return progress_line(self.label, done, total, rate, unicode=self.console.unicode)

    def __call__(self, done: int, total: int) -> None:
        console = self.console
        if not console.live:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        text = self.line(done, total)
        if done >= total:
            console.clear()
            console.err.write(text + "\n")
            console.err.flush()
        else:
            console.status(text)
