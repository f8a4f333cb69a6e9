"""The package list matches the folders, the kernel never imports plugins, and C headers ship."""

from __future__ import annotations

import ast
import re
import runpy
import tomllib
from pathlib import Path
from typing import Any

import pytest
import setuptools

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> tuple[list[str], dict[str, str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setup = data["tool"]["setuptools"]
    return setup["packages"], setup["package-dir"]


def test_packages_list_matches_folders() -> None:
    packages, package_dir = _declared()
    on_disk: set[str] = set()
    for import_name, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            parts = [import_name, *rel.parts] if rel.parts else [import_name]
            on_disk.add(".".join(parts))
    assert sorted(packages) == sorted(on_disk), (
        "pyproject.toml [tool.setuptools] packages must list every package folder; "
        f"missing: {sorted(on_disk - set(packages))}, stale: {sorted(set(packages) - on_disk)}"
    )


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_kernel_imports_nothing_from_plugins() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "kernel").rglob("*.py"))
        for line, name in _imports(path)
        if name == "rmqk.plugins" or name.startswith("rmqk.plugins.") or name.startswith("plugins")
    ]
    assert offenders == [], "the kernel must not import plugins:\n" + "\n".join(offenders)


def test_import_guard_sees_a_plugin_import(tmp_path: Path) -> None:
    # The guard above is only worth something if it recognises each import form.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import rmqk.plugins.broker\n"
        "from rmqk.plugins import allocation\n"
        "import importlib\nimportlib.import_module('rmqk.plugins.remoting')\n"
    )
    names = [n for _, n in _imports(sample)]
    assert "rmqk.plugins.broker" in names
    assert "rmqk.plugins" in names
    assert "rmqk.plugins.remoting" in names


def test_entry_points_name_existing_modules() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    _, package_dir = _declared()
    for name, target in data["project"]["entry-points"]["rmqk"].items():
        module = target.split(":")[0]
        _, _, rest = module.partition(".plugins")
        folder = package_dir["rmqk.plugins"] if rest or module == "rmqk.plugins" else "kernel"
        rel = rest.strip(".").replace(".", "/")
        base = ROOT / folder / rel if rel else ROOT / folder
        assert (base.with_suffix(".py")).exists() or (base / "__init__.py").exists(), (
            f"entry point {name} -> {target} names no module on disk"
        )


def _extensions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    captured: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    return list(captured["ext_modules"])


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def test_every_included_header_is_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    # A header missing from `depends` is left out of the sdist (the build from it
    # then fails) and editing it does not rebuild the extensions that include it.
    extensions = _extensions(monkeypatch)
    assert extensions
    for ext in extensions:
        declared = {Path(d) for d in ext.depends}
        todo = [Path(s) for s in ext.sources]
        seen: set[Path] = set()
        while todo:
            source = todo.pop()
            for name in _QUOTED_INCLUDE.findall((ROOT / source).read_text()):
                candidates = [source.parent / name, *(Path(d) / name for d in ext.include_dirs)]
                found = [c for c in candidates if (ROOT / c).is_file()]
                assert found, f"{ext.name}: {source} includes {name!r}, found nowhere"
                header = found[0]
                assert header in declared, f"{ext.name}: {header} is not in its depends"
                if header not in seen:
                    seen.add(header)
                    todo.append(header)
        assert all((ROOT / d).is_file() for d in declared), f"{ext.name}: a stale depends entry"
