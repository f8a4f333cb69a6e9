"""Every hook is documented in the hook reference and has a test named test_hook_<name>.

The reference (docs/hook-reference.md) is generated from the hook specs into the page
(``python docs/_ext/rmqk_reference.py --write``), so a hook is documented when its spec
has a docstring that says when it is called; these tests check the page as the code
generates it and the docstrings (tests/test_docs.py checks the committed page is fresh).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rmqk.spi import hookspecs

ROOT = Path(__file__).resolve().parent.parent


def hook_reference() -> str:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import rmqk_reference

        text: str = rmqk_reference.expand((ROOT / "docs" / "hook-reference.md").read_text())
        return text
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


def hook_names() -> list[str]:
    return sorted(n for n in dir(hookspecs) if n.startswith("rmqk_"))


def test_there_are_hooks() -> None:
    assert "rmqk_register_allocation_strategies" in hook_names()
    assert len(hook_names()) >= 12


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_documented(name: str) -> None:
    docs = hook_reference()
    assert re.search(rf"^###\s+{name}\s*$", docs, re.M), f"the hook reference has no {name}"


@pytest.mark.parametrize("name", hook_names())
def test_hook_has_docstring(name: str) -> None:
    doc = getattr(hookspecs, name).__doc__ or ""
    assert len(doc.split()) >= 15, f"hook spec {name} needs a docstring saying when it is called"


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_tested(name: str) -> None:
    pattern = re.compile(rf"def test_hook_{name}\b")
    for path in (ROOT / "tests").rglob("test_*.py"):
        if pattern.search(path.read_text()):
            return
    pytest.fail(f"no test named test_hook_{name} in tests/")


def test_documented_hooks_exist() -> None:
    docs = hook_reference()
    documented = set(re.findall(r"^###\s+(rmqk_\w+)\s*$", docs, re.M))
    assert documented == set(hook_names())
