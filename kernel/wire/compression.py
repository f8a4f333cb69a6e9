"""Message body compression: the producer's deflate and a bounded inflate for consumers.

A stored body carries the COMPRESSED sysFlag bit and, from 4.9 producers on, the
codec in bits 8-10 (zlib; LZ4 and ZSTD with their optional packages).

Inflating is bounded: a body that would grow past ``max_size`` bytes is refused
after at most ``max_size`` bytes and one step were produced, a step at a time and
none of them kept, so a decompression bomb (a few hundred KiB that inflate to
gigabytes) costs one step of memory, never the cap and never the whole expansion.
A body within the cap costs itself and one step (zlib; see ``_inflate_zlib``).
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any

__all__ = ["BodyTooLarge", "inflate", "maybe_compress"]

_COMPRESSION_TYPE_MASK = 0x700


class BodyTooLarge(ValueError):
    """A compressed body that inflates past the consumer's limit."""


def _optional_module(name: str, package: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ValueError(
            f"body is {package.upper()}-compressed; install the optional {package!r} "
            "package to read it"
        ) from None


def _too_large(kind: str, max_size: int) -> BodyTooLarge:
    return BodyTooLarge(f"{kind} body inflates past max_decompressed_body_size ({max_size} bytes)")


# Inflating a step at a time bounds what one call holds: zlib's own output buffer
# grows in blocks and is copied whole into the result when the call returns, so one
# decompress(body, max_size + 1) held twice the cap at its end (a 100 KiB bomb cost
# 128 MiB beyond the process's baseline).
_STEP = 1 << 20
# Output kept from the first pass; a longer body is inflated again into a buffer of
# its exact size (see _inflate_zlib).
_KEEP = 4 << 20


def _inflate_zlib(body: bytes, max_size: int) -> bytes:
    inflater = zlib.decompressobj()
    kept: list[bytes] = []
    produced = 0
    data = body
    while not inflater.eof:
        out = inflater.decompress(data, _STEP)
        data = inflater.unconsumed_tail
        if not out and not data and not inflater.eof:
            # zlib.decompress's own complaint for a stream that stops early.
            raise ValueError("zlib body does not inflate: incomplete or truncated stream")
        produced += len(out)
        if produced > max_size:
            kept.clear()  # frees what was inflated before the error is raised
            raise _too_large("zlib", max_size)
        if produced <= _KEEP:
            kept.append(out)
        else:
            kept.clear()
    if produced <= _KEEP:
        return b"".join(kept)
    # A long body is measured first (above) and inflated again here into one buffer of
    # exactly its size, which zlib returns without the final copy: at no time is more
    # than the body itself and one step held.
    return zlib.decompress(body, zlib.MAX_WBITS, produced)


def _inflate_lz4(body: bytes, max_size: int) -> bytes:
    frame = _optional_module("lz4.frame", "lz4")
    out = bytes(frame.LZ4FrameDecompressor().decompress(body, max_length=max_size + 1))
    if len(out) > max_size:
        raise _too_large("LZ4", max_size)
    return out


def _inflate_zstd(body: bytes, max_size: int) -> bytes:
    zstd = _optional_module("zstandard", "zstandard")
    # A stream reader never allocates more than asked, whatever the frame header claims.
    with zstd.ZstdDecompressor().stream_reader(body) as reader:
        out = bytes(reader.read(max_size + 1))
    if len(out) > max_size:
        raise _too_large("ZSTD", max_size)
    return out


def inflate(body: bytes, sys_flag: int, max_size: int) -> bytes:
    """The body a compressed record stores; ValueError (BodyTooLarge past ``max_size``)."""
    kind = (sys_flag & _COMPRESSION_TYPE_MASK) >> 8
    try:
        if kind in (0, 3):  # 0: producers older than the compression-type bits
            return _inflate_zlib(body, max_size)
        # Java's LZ4 codec writes LZ4 frames and its ZSTD codec standard zstd frames.
        if kind == 1:
            return _inflate_lz4(body, max_size)
        if kind == 2:
            return _inflate_zstd(body, max_size)
    except zlib.error as exc:
        raise ValueError(f"zlib body does not inflate: {exc}") from None
    except ValueError:
        raise
    except Exception as exc:  # the optional codecs raise their own error types
        raise ValueError(f"compressed body (type {kind}) does not decompress: {exc}") from None
    raise ValueError(f"unknown compression type {kind} in sysFlag 0x{sys_flag & 0xFFFFFFFF:X}")


def maybe_compress(body: bytes, threshold: int = 4096) -> tuple[bytes, bool]:
    """Deflate a body of at least ``threshold`` bytes as the Java producer does (level 5).

    When the second item is True the sender must OR ``ZLIB_COMPRESSED_SYS_FLAG``
    into the message's sysFlag. Like Java, the compressed body is used even when it
    is not smaller.
    """
    if len(body) >= threshold:
        return zlib.compress(body, 5), True
    return body, False
