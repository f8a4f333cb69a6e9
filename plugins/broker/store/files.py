"""Small file helpers shared by the store: atomic JSON documents and directory fsync."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["StoreError", "fsync_dir", "read_json_document", "write_json_document"]


class StoreError(Exception):
    """The message store met something it cannot work with (says what and where)."""


def fsync_dir(path: Path) -> None:
    """Make a file creation, rename or deletion in ``path`` survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_document(path: Path, document: Any) -> None:
    """Replace ``path`` atomically, keeping the previous version as ``<name>.bak``.

    Java's MixAll.string2File keeps a ``.bak`` too; here the new content goes to a
    temporary file that is fsynced and renamed over the old one, so a crash leaves
    either the old or the new document, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if path.exists():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json_document(path: Path) -> Any | None:
    """The document at ``path``, or its ``.bak`` when it is missing, empty or unreadable.

    Returns ``None`` when neither exists (or both are empty). Raises :class:`StoreError` when both
    exist and neither parses, because silently starting empty would lose state.
    """
    bak = path.with_name(path.name + ".bak")
    problems: list[str] = []
    for candidate in (path, bak):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            problems.append(f"{candidate}: empty")
            continue
        try:
            return json.loads(text)
        except ValueError as exc:
            problems.append(f"{candidate}: not valid JSON ({exc})")
    if any("not valid JSON" in p for p in problems):
        raise StoreError("cannot read store document: " + "; ".join(problems))
    return None
