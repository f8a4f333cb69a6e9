"""The host fields of a stored message record: raw ip+port bytes and their ``ip:port`` text.

A record holds BORNHOST and STOREHOST as a 4- or 16-byte ip and an i32 port. The
text of each distinct raw host is made once (``HOST_TEXTS``), since a pull
answer repeats the same few hosts in every record.
"""

from __future__ import annotations

import functools
import ipaddress
import socket

__all__ = ["HOST_TEXTS", "BadHost", "host_bytes", "host_text"]

HOST_TEXTS: dict[bytes, str] = {}


class BadHost(Exception):
    """A host field Java's InetSocketAddress would refuse."""


def host_text(raw: bytes) -> str:
    text = HOST_TEXTS.get(raw)
    if text is None:
        port = int.from_bytes(raw[-4:], "big", signed=True)
        if not 0 <= port <= 0xFFFF:
            # Java's InetSocketAddress refuses it, and so fails the whole record.
            raise BadHost(f"host port {port} is outside 0..65535")
        if len(raw) == 8:
            text = f"{socket.inet_ntoa(raw[:4])}:{port}"
        else:
            text = f"[{ipaddress.IPv6Address(raw[:16])}]:{port}"
        if len(HOST_TEXTS) >= 4096:  # a bound, not an LRU: distinct hosts are few
            HOST_TEXTS.clear()
        HOST_TEXTS[raw] = text
    return text


@functools.lru_cache(maxsize=1024)
def host_bytes(host: str) -> bytes:
    ip, sep, port_text = host.rpartition(":")
    try:
        if not sep:
            raise ValueError("no port")
        port = int(port_text)
        if not 0 <= port <= 0xFFFF:
            raise ValueError(f"port {port} out of range")
        if ip.startswith("[") and ip.endswith("]"):
            packed = ipaddress.IPv6Address(ip[1:-1]).packed
        else:
            packed = ipaddress.ip_address(ip).packed
    except ValueError as exc:
        raise ValueError(f"host {host!r} is not 'ip:port' or '[ipv6]:port': {exc}") from None
    return packed + port.to_bytes(4, "big", signed=True)
