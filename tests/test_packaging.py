"""The package list matches the folders, and the kernel never imports plugins."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

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
