"""The address a connection is opened to: ``host:port`` parsing, and why connecting failed."""

from __future__ import annotations

import os
import ssl

from rmqk.model.errors import RemotingConnectError

__all__ = ["connect_failure_reason", "split_address"]


def split_address(addr: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RemotingConnectError(f"address {addr!r} is not host:port")
    return host, int(port)


def connect_failure_reason(exc: BaseException) -> str:
    """The cause of a failed connect, without the address asyncio repeats in its text
    ("[Errno 111] Connect call failed ('127.0.0.1', 9876)" reads "connection refused")."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc)
