"""The optional compiled JSON header encoder and decoder (``_headers.c``) for frame.py.

Both take the common case and return None for the rest, which frame.py's Python
code writes, reads or refuses with its error. Absent when the extension was not
built or ``RMQK_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

from collections.abc import Callable

from rmqk.spi.extensions import extensions_disabled

__all__ = ["DECODE", "ENCODE"]

# code, ext_fields, flag, language (as sent), opaque, remark, version
HeaderParts = tuple[int, dict[str, str], int, "str | int | None", int, "str | None", int]
Encode = Callable[[int, dict[str, str], int, str, int, "str | None", int], "bytes | None"]
Decode = Callable[[bytes], "HeaderParts | None"]


def _load() -> tuple[Encode, Decode] | tuple[None, None]:
    if extensions_disabled():
        return None, None
    try:
        from rmqk.wire import _headers
    except ImportError:
        return None, None
    return _headers.json_header, _headers.decode_json_header


ENCODE, DECODE = _load()
