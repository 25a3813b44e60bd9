"""How the house is built, in figures: module sizes, long functions, import cycles, lazy imports.

The figures issue 16 asks for, so a structural change can be judged before
and after on the same definitions:

- modules over 400 lines, functions over 80 lines (def line to last line);
- import cycles between modules, counting imports inside functions too (a
  cycle hidden in a function is still a cycle), and between folders
  (`tuneup.probe`, `tuneup.export`, ... ; a loose module counts as its own);
- imports inside functions, and how many of them import the project itself;
- mypy's error count, where mypy is installed (`--mypy`);
- issue 36's: the rooms inside `tuneup/tuning/` and the import contract that
  orders them (pyproject's import-linter contracts over `tuneup.tuning`); the
  places that spell out a probe's figure (`far_trials`, the issue's example:
  a class field, a dict key or a keyword argument naming it); the code loader
  names are compared in outside the loader table; and the call sites of
  `load_trainer` and `load_preset`.

Usage: python bench/structure.py [--root DIR] [--mypy] [--out FILE.json]
(DIR: a checkout; the current folder by default; reads tuneup/ and plugins/).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGES = {"tuneup": "tuneup", "plugins": "tuneup_plugins"}
LONG_MODULE = 400
LONG_FUNCTION = 80
# The libraries a lazy import may be for: slow to import, or starting a GPU runtime.
CLI, COMMANDS = "tuneup.cli", "tuneup.commands"
HEAVY = ("torch", "textual", "nvidia", "pynvml", "plotext", "h5py")


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages."""
    found: dict[str, Path] = {}
    for folder, name in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [name, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name an import statement may load (the module, and module.name)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (not those inside functions)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))


def _reaching(graph: dict[str, set[str]], seeds: set[str]) -> set[str]:
    """Modules whose import (at module level, transitively) loads one of `seeds`."""
    reached = set(seeds)
    changed = True
    while changed:
        changed = False
        for module, targets in graph.items():
            if module not in reached and targets & reached:
                reached.add(module)
                changed = True
    return reached


def _folder(module: str, known: dict[str, Path]) -> str:
    """The folder a module lives in (tuneup.probe), or the module itself when loose."""
    parts = module.split(".")
    if len(parts) >= 2 and known.get(".".join(parts[:2]), Path()).name == "__init__.py":
        return ".".join(parts[:2])
    return module


def figures(root: Path) -> dict[str, object]:
    known = modules(root)
    lines = {name: len(path.read_text().splitlines()) for name, path in known.items()}
    graph: dict[str, set[str]] = {name: set() for name in known}
    top_level: dict[str, set[str]] = {name: set() for name in known}
    heavy_direct: set[str] = set()
    long_functions: list[tuple[int, str]] = []
    lazy = lazy_own = 0
    lazy_project: list[tuple[str, list[str]]] = []
    own_roots = tuple(PACKAGES.values())
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(
                    t for t in _imported(node, name, is_package) if t in known and t != name
                )
        for node in _module_level_imports(tree):
            targets = list(_imported(node, name, is_package))
            top_level[name].update(t for t in targets if t in known and t != name)
            if any(t.split(".")[0] in HEAVY for t in targets):
                heavy_direct.add(name)
        for function in _functions(tree):
            length = (function.end_lineno or function.lineno) - function.lineno + 1
            if length > LONG_FUNCTION:
                long_functions.append((length, f"{name}.{function.name}"))
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    lazy += 1
                    targets = list(_imported(node, name, is_package))
                    if any(t.split(".")[0] in own_roots for t in targets):
                        lazy_own += 1
                        lazy_project.append(
                            (f"{name}:{node.lineno}", [t for t in targets if t in known])
                        )
    folders: dict[str, set[str]] = {}
    for name, targets in graph.items():
        here = _folder(name, known)
        folders.setdefault(here, set()).update(
            _folder(t, known) for t in targets if _folder(t, known) != here
        )
    heavy = _reaching(top_level, heavy_direct)
    # cli.py's dispatch loads a subcommand's module when it runs (a fast `--help`);
    # every other lazy import of ours must be of a module that loads a heavy library.
    unexplained = sorted(
        where
        for where, targets in lazy_project
        if not any(t in heavy for t in targets)
        and not (where.startswith(CLI + ":") and all(t.startswith(COMMANDS) for t in targets))
    )
    module_cycles = _strongly_connected(graph)
    folder_cycles = _strongly_connected(folders)
    largest = max(lines, key=lambda m: lines[m])
    return {
        "modules": len(known),
        "lines": sum(lines.values()),
        "largest_module": {"module": largest, "lines": lines[largest]},
        "modules_over_400_lines": {m: n for m, n in sorted(lines.items()) if n > LONG_MODULE},
        "functions_over_80_lines": {f: n for n, f in sorted(long_functions, reverse=True)},
        "module_import_cycles": module_cycles,
        "folder_import_cycles": folder_cycles,
        "imports_inside_functions": lazy,
        "of_which_import_the_project": lazy_own,
        "lazy_imports_of_light_project_modules": unexplained,
    }


FIGURE = "far_trials"  # issue 36's example of a figure declared five times
LOADER_NAMES = ("lowmem", "inmem", "dali-lowmem", "gpu")


def _spelled(tree: ast.AST, name: str) -> int:
    """Class fields, dict keys and keyword arguments named `name`."""
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += sum(
                1
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.target.id == name
            )
        elif isinstance(node, ast.Dict):
            found += sum(1 for k in node.keys if isinstance(k, ast.Constant) and k.value == name)
        elif isinstance(node, ast.Call):
            found += sum(1 for k in node.keywords if k.arg == name)
    return found


def issue36(root: Path, known: dict[str, Path]) -> dict[str, object]:
    """The rooms of tuning/, a figure's spellings, loader-name comparisons, loaders' calls."""
    tuning = root / "tuneup" / "tuning"
    rooms = sorted(p.name for p in tuning.iterdir() if (p / "__init__.py").is_file())
    contracts = re.findall(
        r'containers = \["tuneup\.tuning"\]\s*\nlayers = (\[.*?\])',
        (root / "pyproject.toml").read_text(),
    )
    spelled: dict[str, int] = {}
    compared: list[str] = []
    calls = {"load_trainer": 0, "load_preset": 0}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        if n := _spelled(tree, FIGURE):
            spelled[name] = n
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and not name.endswith(".loaders"):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Constant) and s.value in LOADER_NAMES for s in sides):
                    compared.append(f"{name}:{node.lineno}")
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Name) and called.id in calls:
                calls[called.id] += 1
    return {
        "tuning_rooms": rooms,
        "tuning_room_contracts": contracts,
        f"places_spelling_{FIGURE}": spelled,
        "loader_name_comparisons": compared,
        "call_sites": calls,
    }


def mypy_errors(root: Path) -> int | None:
    """mypy's error count on the packages, as CI runs it; None where mypy is missing."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "tuneup", "plugins"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    if "No module named mypy" in done.stderr:
        return None
    found = re.search(r"Found (\d+) errors?", done.stdout)
    return int(found.group(1)) if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--mypy", action="store_true", help="also count mypy's errors")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    result = figures(args.root)
    result.update(issue36(args.root, modules(args.root)))
    if args.mypy:
        result["mypy_errors"] = mypy_errors(args.root)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
