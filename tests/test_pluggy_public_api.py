"""rmqk uses pluggy through its public API only (issue 26, step 6).

The source of rmqk (kernel, plugins, bench) is scanned: no attribute private to
pluggy (``_call_history``, ``_hookimpls``, ``_hookexec``, ... taken from the
installed pluggy's own source), no import from pluggy's private modules, and no
rewriting of a hook implementation (``impl.function = ...`` or
``setattr(impl, "function", ...)``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pluggy

ROOT = Path(__file__).resolve().parent.parent


def _sources(folders: tuple[str, ...]) -> Iterator[tuple[str, ast.AST]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _private_names(trees: Iterator[tuple[str, ast.AST]]) -> set[str]:
    """Single-underscore names a module defines: attributes, functions, classes."""
    names: set[str] = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = node.name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            elif isinstance(node, ast.arg):
                name = node.arg
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def _pluggy_private() -> set[str]:
    package = Path(pluggy.__file__).parent
    trees = ((p.name, ast.parse(p.read_text())) for p in sorted(package.glob("*.py")))
    return _private_names(trees)


def test_the_scan_knows_pluggys_private_names() -> None:
    private = _pluggy_private()
    # The ones rmqk once used.
    assert {"_call_history", "_hookimpls", "_hookexec"} <= private


def test_no_private_pluggy_attribute_and_no_rewritten_hook_implementation() -> None:
    folders = ("kernel", "plugins", "bench")
    # A name rmqk defines itself (its own ``_lock``, say) is rmqk's, not pluggy's.
    ours = _private_names(_sources(folders))
    private = _pluggy_private() - ours
    found: list[str] = []
    for where, tree in _sources(folders):
        for node in ast.walk(tree):
            at = f"{where}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr in private:
                found.append(f"{at}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pluggy._"):
                found.append(f"{at}: from {node.module} import")
            if isinstance(node, ast.Import):
                found += [
                    f"{at}: import {a.name}" for a in node.names if a.name.startswith("pluggy._")
                ]
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                # An object's own ``self.function`` is not a hook implementation's.
                own = isinstance(target, ast.Attribute) and (
                    isinstance(target.value, ast.Name) and target.value.id == "self"
                )
                if isinstance(target, ast.Attribute) and target.attr == "function" and not own:
                    found.append(f"{at}: .function assigned")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "function"
            ):
                found.append(f"{at}: setattr(..., 'function', ...)")
    assert found == []
