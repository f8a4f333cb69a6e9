"""The layout of issue 26: moved module paths keep working, with a warning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rmqk._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_imports_the_new_module_with_a_deprecation_warning(old: str) -> None:
    # A fresh interpreter: in this one the old name may already be cached.
    code = (
        "import importlib, sys, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        f"assert new.__spec__.name == {MOVED[old]!r}, new.__spec__\n"
        "messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "print(messages)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert f"{old} moved to {MOVED[old]}" in out, out


def test_every_moved_path_is_gone_from_the_tree() -> None:
    """An alias never shadows a module that still exists at the old path."""
    import importlib.util

    for old in MOVED:
        spec = importlib.util.find_spec(old)
        assert spec is not None and spec.origin is None, (old, spec)
