"""The house's size limits, as the style guide sets them: a module of a few hundred lines,
a function that fits a screen; the newcomer reads one without scrolling through three."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 500
FUNCTION_LINES = 80


def sources() -> list[Path]:
    return sorted([*(ROOT / "tuneup").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MODULE_LINES
    }
    assert long == {}, f"split these modules (lines): {long}"


def test_no_function_is_over_80_lines() -> None:
    long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, f"split these functions (lines): {long}"


def test_the_limits_see_what_they_guard(tmp_path: Path) -> None:
    # the walk finds the package's functions, nested ones too
    names = {
        node.name
        for path in sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef)
    }
    assert {"run_probe", "profile_again", "worker_costs"} <= names
