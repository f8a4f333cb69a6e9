"""Whether rmqk may use its optional compiled extensions.

Each extension (the record decoder, the process-queue loops, the JSON header codec,
the sink's Arrow column builder) has pure-Python code beside it that does the same;
``RMQK_NO_EXTENSIONS=1`` selects that code everywhere at once, as a build without a
compiler does.
"""

from __future__ import annotations

import os

__all__ = ["extensions_disabled"]


def extensions_disabled() -> bool:
    """True when ``RMQK_NO_EXTENSIONS`` is set to anything but empty or ``0``."""
    return os.environ.get("RMQK_NO_EXTENSIONS", "") not in ("", "0")
