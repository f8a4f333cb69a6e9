"""The ``rmqk`` console script's entry point, also run as ``python -m rmqk.cli``.

The command line itself is :mod:`rmqk.app.cli`; a sub-command's contract is
:class:`rmqk.spi.commands.Command` (still importable from here).
"""

from __future__ import annotations

from rmqk.app.cli import main
from rmqk.spi.commands import Command

__all__ = ["Command", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
