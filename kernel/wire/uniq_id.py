"""Client message ids (the ``UNIQ_KEY`` property), laid out as Java's MessageClientIDSetter.

An id is upper-case hex of::

    ip (4 or 16 bytes) | pid:i16 | class-loader hash:i32 | ms since month start:i32 | counter:i16

so 32 characters with an IPv4 address. The first three parts are fixed per process
(Java's FIX_STRING); the class-loader hash, meaningless outside a JVM, is a random
int32 here, which keeps two processes with the same pid and address apart. The
month starts in local time, as Java's ``Calendar.getInstance()`` does.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["UniqIdGenerator", "create_uniq_id", "local_ip_bytes", "uniq_id_timestamp"]

# Java forgives a clock that stepped back by less than this (NTP corrections).
_CLOCK_STEP_TOLERANCE_MS = 1_000_000


def _month_bounds(now_ms: int) -> tuple[int, int]:
    """Epoch ms of the first instant of this month and of the next, in local time."""
    # Naive datetimes are local time, and their timestamp() honours DST changes.
    start = _dt.datetime.fromtimestamp(now_ms / 1000).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    following = start.replace(year=year, month=month)
    return round(start.timestamp() * 1000), round(following.timestamp() * 1000)


def local_ip_bytes() -> bytes:
    """This host's outward IPv4 address, or Java's fake address when there is none.

    Connecting a UDP socket sends nothing; it only asks the kernel which local
    address would route outward.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            address = probe.getsockname()[0]
        packed = socket.inet_aton(address)
        if packed != b"\x00\x00\x00\x00":
            return packed
    except OSError:
        pass
    # MessageClientIDSetter.createFakeIP: bytes 4..7 of the current time in ms.
    return (int(time.time() * 1000) & 0xFFFFFFFF).to_bytes(4, "big")


class UniqIdGenerator:
    """Creates ids for one process; thread-safe."""

    def __init__(
        self,
        ip: bytes | None = None,
        pid: int | None = None,
        loader_hash: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        ip = local_ip_bytes() if ip is None else ip
        if len(ip) not in (4, 16):
            raise ValueError(f"an IP address is 4 or 16 bytes, got {len(ip)}")
        pid = os.getpid() if pid is None else pid
        loader_hash = secrets.randbits(32) if loader_hash is None else loader_hash
        self._prefix = (
            (ip + (pid & 0xFFFF).to_bytes(2, "big") + (loader_hash & 0xFFFFFFFF).to_bytes(4, "big"))
            .hex()
            .upper()
        )
        self._clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start, self._next_month_start = _month_bounds(self._clock())

    def create(self) -> str:
        now = self._clock()
        if now >= self._next_month_start:
            with self._lock:
                if now >= self._next_month_start:
                    self._month_start, self._next_month_start = _month_bounds(now)
        diff = (now - self._month_start) & 0xFFFFFFFF
        # Java keeps the difference in an int: past ~24.8 days it wraps negative,
        # and only a small negative value (a clock stepped back) is clamped to 0.
        if diff >= 0x8000_0000 and diff - 0x1_0000_0000 > -_CLOCK_STEP_TOLERANCE_MS:
            diff = 0
        count = next(self._counter) & 0xFFFF
        return f"{self._prefix}{diff:08X}{count:04X}"


_default: UniqIdGenerator | None = None
_default_lock = threading.Lock()


def create_uniq_id() -> str:
    """A new client message id for this process (MessageClientIDSetter.createUniqID)."""
    global _default
    generator = _default
    if generator is None:
        with _default_lock:
            generator = _default
            if generator is None:
                generator = _default = UniqIdGenerator()
    return generator.create()


def uniq_id_timestamp(uniq_id: str, now_ms: int | None = None) -> int:
    """The approximate creation time (epoch ms) embedded in a client id.

    The id holds only the offset into its month, so, like Java's
    getNearlyTimeFromID, a time not before ``now`` is taken to be last month's.
    """
    try:
        raw = bytes.fromhex(uniq_id)
    except ValueError:
        raise ValueError(f"not a client message id (not hex): {uniq_id!r}") from None
    if len(raw) not in (16, 28):
        raise ValueError(f"not a client message id ({len(raw)} bytes, want 16 or 28): {uniq_id!r}")
    ip_len = 16 if len(raw) == 28 else 4
    span = int.from_bytes(raw[ip_len + 6 : ip_len + 10], "big")
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    month_start, _ = _month_bounds(now)
    if month_start + span >= now:
        previous = _dt.datetime.fromtimestamp(month_start / 1000) - _dt.timedelta(days=1)
        month_start, _ = _month_bounds(round(previous.timestamp() * 1000))
    return month_start + span
