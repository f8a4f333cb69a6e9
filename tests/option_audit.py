"""Does a test exercise an option? Read from the test's own source, not run.

The option audit (``tests/test_option_audit.py``) names, for each option, the
tests that show its effect; this module checks that each named test exists and
that its body gives the option a value other than the default: a keyword
argument (``pull_batch_size=5``), a mapping key (``{"pull_batch_size": 5}``) or
a TOML line (``pull_batch_size = 5``). A value that is not a literal (a
variable, a call) counts, since the test chose it; a literal equal to the
default, or one the option rejects, does not.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from rmqk.spi.options import OptionInvalid, OptionSpec

__all__ = ["TESTS_DIR", "exercised_values", "find_test", "is_exercised"]

TESTS_DIR = Path(__file__).resolve().parent
_NOT_LITERAL = object()


@cache
def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def find_test(node_id: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a node id (``tests/test_x.py::TestY::test_z[param]``) names, or None."""
    file, _, rest = node_id.partition("::")
    path = TESTS_DIR.parent / file
    if not rest or not path.is_file():
        return None
    names = re.sub(r"\[.*\]$", "", rest).split("::")
    body: list[ast.stmt] = _module(path).body
    found: ast.AST | None = None
    for name in names:
        found = next(
            (
                n
                for n in body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == name
            ),
            None,
        )
        if found is None:
            return None
        body = found.body if isinstance(found, ast.ClassDef) else []
    if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) and found.name.startswith("test"):
        return found
    return None


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def exercised_values(function: ast.AST, key: str) -> Iterator[Any]:
    """Every value ``function`` gives ``key`` (``_NOT_LITERAL`` for a computed one)."""
    toml_line = re.compile(rf"^\s*{re.escape(key)}\s*=\s*(.+?)\s*$", re.M)
    for node in ast.walk(function):
        if isinstance(node, ast.keyword) and node.arg == key:
            yield _literal(node.value)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == key:
                    yield _literal(v)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in toml_line.finditer(node.value):
                try:
                    yield tomllib.loads(f"v = {match.group(1)}")["v"]
                except tomllib.TOMLDecodeError:
                    yield _NOT_LITERAL


def _differs(spec: OptionSpec, value: Any) -> bool:
    if value is _NOT_LITERAL:
        return True
    try:
        converted = spec.convert(value)
    except (OptionInvalid, ValueError, TypeError):
        return False  # a test of the option's validation, not of its effect
    return bool(converted != spec.default)


def is_exercised(node_id: str, spec: OptionSpec) -> bool:
    """Whether the test ``node_id`` gives the option ``spec`` a value other than its default."""
    function = find_test(node_id)
    if function is None:
        return False
    keys = {spec.name, spec.attr} - {""}
    return any(_differs(spec, v) for key in keys for v in exercised_values(function, key))
