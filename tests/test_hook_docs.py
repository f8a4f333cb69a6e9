"""Every hook is documented in docs/hooks.md and has a test named test_hook_<name>."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rmqk import hookspecs

ROOT = Path(__file__).resolve().parent.parent


def hook_names() -> list[str]:
    return sorted(n for n in dir(hookspecs) if n.startswith("rmqk_"))


def test_there_are_hooks() -> None:
    assert "rmqk_register_allocation_strategies" in hook_names()
    assert len(hook_names()) >= 12


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_documented(name: str) -> None:
    docs = (ROOT / "docs" / "hooks.md").read_text()
    assert re.search(rf"^###\s+{name}\s*$", docs, re.M), f"docs/hooks.md has no section for {name}"


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
    docs = (ROOT / "docs" / "hooks.md").read_text()
    documented = set(re.findall(r"^###\s+(rmqk_\w+)\s*$", docs, re.M))
    assert documented == set(hook_names())
