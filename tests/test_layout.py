"""The layout of issue 26: moved module paths keep working, with a warning."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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


# -- the import rules of the layout (docs/architecture.md) ---------------------------------

ROOT = Path(__file__).resolve().parent.parent

# What a plugin may import from the kernel: the public API (``rmqk`` itself), the
# contracts, the value objects, the codecs and the helpers sub-commands share.
PLUGIN_MAY_IMPORT = ("rmqk.spi", "rmqk.model", "rmqk.wire", "rmqk.console")

# The edges that break that rule today, each with why; the test fails on a new one
# and on one that is gone (so this list only shrinks).
KNOWN_EDGES: dict[tuple[str, str], str] = {
    ("rmqk.plugins.admin", "rmqk.plugins.trace"): "rmqk admin trace is an rmqk admin command",
    ("rmqk.plugins.admin", "rmqk.plugins.remoting"): (
        "the admin client signs with the process's default account, which the acl plugin holds"
    ),
    ("rmqk.plugins.admin", "rmqk.plugins.broker"): (
        "the admin client talks over the broker plugin's remoting connection, not a transport"
    ),
    ("rmqk.plugins.trace", "rmqk.plugins.admin"): "trace lookups query brokers by the admin client",
    ("rmqk.plugins.spark", "rmqk.plugins.sinks"): (
        "the Spark sink is built on the sinks plugin's exactly-once commit log and group commit"
    ),
    ("rmqk.plugins.spark", "rmqk.plugins.broker"): "rmqk demo starts an embedded broker",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    parts = ["rmqk", *parts[1:]] if parts[0] == "kernel" else ["rmqk", "plugins", *parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(path: Path, *, top_level_only: bool) -> list[tuple[int, str]]:
    """The rmqk modules ``path`` imports: (line, module), relative imports resolved."""
    tree = ast.parse(path.read_text())
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: list[tuple[int, str]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, m) for line, m in found if m == "rmqk" or m.startswith("rmqk.")]


def _modules() -> dict[str, Path]:
    files = [*(ROOT / "kernel").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    return {_module_name(path): path for path in files}


def _edge_owner(module: str) -> str:
    """``rmqk.plugins.spark.sink`` -> ``rmqk.plugins.spark``; ``rmqk.app.cli`` -> ``rmqk.app``."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1] == "plugins" else parts[:2])


def test_plugins_import_only_the_spi_the_model_the_wire_and_their_own_package() -> None:
    modules = _modules()
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        if not name.startswith("rmqk.plugins."):
            continue
        own = _edge_owner(name)
        for line, target in _imported(path, top_level_only=False):
            if target not in modules and target.rpartition(".")[0] in modules:
                target = target.rpartition(".")[0]  # ``from x import name``: the module x
            if target == "rmqk" or target.startswith(PLUGIN_MAY_IMPORT):
                continue
            if target == own or target.startswith(own + "."):
                continue
            if target == "rmqk.plugins":
                continue
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            edges.setdefault((own, _edge_owner(target)), []).append(where)
    new = {edge: where for edge, where in edges.items() if edge not in KNOWN_EDGES}
    assert new == {}, "plugins reach past rmqk.spi/model/wire:\n" + "\n".join(
        w for where in new.values() for w in where
    )
    gone = sorted(set(KNOWN_EDGES) - set(edges))
    assert gone == [], f"no longer imported; remove from KNOWN_EDGES: {gone}"


def test_no_plugin_imports_the_engine_or_the_app() -> None:
    # Not even as a known edge: what a plugin needs of them is the public API (rmqk).
    assert not {e for e in KNOWN_EDGES if e[1].startswith(("rmqk.engine", "rmqk.app"))}
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in (ROOT / "plugins").rglob("*.py")
        for line, target in _imported(path, top_level_only=False)
        if target.startswith(("rmqk.engine", "rmqk.app"))
    ]
    assert found == []


KNOWN_CONTRACT_EDGES: set[tuple[str, str]] = set()


def test_the_contracts_model_and_wire_never_import_the_engine_or_the_app() -> None:
    edges = {
        (name, target if target in modules else target.rpartition(".")[0])
        for modules in [_modules()]
        for name, path in modules.items()
        if name.startswith(("rmqk.spi", "rmqk.model", "rmqk.wire", "rmqk.options", "rmqk.console"))
        and name != "rmqk.spi.registry"  # the door to the plugin manager, by design
        for _, target in _imported(path, top_level_only=True)
        if target.startswith(("rmqk.engine", "rmqk.app", "rmqk.plugins"))
    }
    assert edges == KNOWN_CONTRACT_EDGES


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _module_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for _, target in _imported(path, top_level_only=True):
            if target in modules:
                targets.add(target)
            elif target.rpartition(".")[0] in modules:
                targets.add(target.rpartition(".")[0])
        targets.discard(name)
        graph[name] = targets
    return graph


def test_no_import_cycle_among_module_level_imports() -> None:
    graph = _module_graph()
    # ``from pkg import sub`` lists both pkg and pkg.sub; only the submodule runs.
    for name, targets in graph.items():
        for target in list(targets):
            if any(t.startswith(target + ".") for t in targets) and target != name:
                targets.discard(target)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_kernel_proper_stays_small_enough_to_read_in_a_sitting() -> None:
    """rmqk.spi + rmqk.model + the plugin manager with its registries: what a plugin
    author reads (issue 26). The deprecated forms kept for one release (rmqk._moved,
    rmqk._deprecated) are not part of it."""
    files = [
        *(ROOT / "kernel" / "spi").glob("*.py"),
        *(ROOT / "kernel" / "model").glob("*.py"),
        ROOT / "kernel" / "pluginmanager.py",
        ROOT / "kernel" / "hookcalls.py",
        ROOT / "kernel" / "registries.py",
    ]
    lines = sum(len(path.read_text().splitlines()) for path in files)
    assert lines < 5000, f"the kernel proper has grown to {lines} lines"


def test_the_command_helpers_still_import_from_the_spi_with_a_warning() -> None:
    from rmqk.console import commandline
    from rmqk.spi import commands

    with pytest.warns(DeprecationWarning, match=r"moved to rmqk.console.commandline"):
        helper = commands.positive_int
    assert helper is commandline.positive_int
    with pytest.raises(AttributeError):
        _ = commands.no_such_helper
