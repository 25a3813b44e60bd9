"""The house's size limits, as the style guide sets them: a module of a few hundred lines,
a function that fits a screen; the newcomer reads one without scrolling through three.
They hold in the product, the GPU twin beside it (twin/) and the benchmarks (bench/);
bench's modules import one another without a cycle, and the product never imports them."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 500
FUNCTION_LINES = 80


def sources() -> list[Path]:
    """The product: the package and its built-in plugins, what the wheel installs."""
    return sorted([*(ROOT / "tuneup").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])


def bench_sources() -> list[Path]:
    """The benchmarks' code: every module under bench/, not the evidence in bench/results/."""
    bench = ROOT / "bench"
    return sorted(p for p in bench.rglob("*.py") if p.relative_to(bench).parts[0] != "results")


def newly_housed() -> list[Path]:
    """The folders issue 51 brought under the house's rules: the twin and the benchmarks."""
    return sorted([*(ROOT / "twin").rglob("*.py"), *bench_sources()])


def housed() -> list[Path]:
    """Everything held to the house's limits: the product, the GPU twin and the benchmarks."""
    return sorted([*sources(), *newly_housed()])


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Its `def` line to its last line, as the limit counts it."""
    return (node.end_lineno or node.lineno) - node.lineno + 1


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in housed()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MODULE_LINES
    }
    assert long == {}, f"split these modules (lines): {long}"


def test_no_function_is_over_80_lines() -> None:
    long = {}
    for path in housed():
        for node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            if (lines := function_lines(node)) > FUNCTION_LINES:
                long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, f"split these functions (lines): {long}"


AT_THE_LIMIT = "at the limit"  # the words a comment says beside code that sits there


def at_the_limit_unsaid(source: str) -> list[str]:
    """A module of exactly MODULE_LINES lines, or a function of exactly FUNCTION_LINES, with
    no comment saying why: one line more and the limit fails, so one that sits there says
    so ("at the limit", and why) in a comment: a module's anywhere, a function's on its
    `def` line or the line above it (above its decorators)."""
    comments = {
        token.start[0]: token.string.lower()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }

    def said(*lines: int) -> bool:
        return any(AT_THE_LIMIT in comments.get(line, "") for line in lines)

    unsaid = []
    if source.count("\n") == MODULE_LINES and not any(AT_THE_LIMIT in c for c in comments.values()):
        unsaid.append("the module")
    for node in functions(ast.parse(source)):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if function_lines(node) == FUNCTION_LINES and not said(node.lineno, first - 1):
            unsaid.append(node.name)
    return unsaid


def test_nothing_sits_at_the_limit_without_a_word() -> None:
    # held where issue 51 brought the rules; the product's own are its owners' to word
    unsaid = {
        str(path.relative_to(ROOT)): found
        for path in newly_housed()
        if (found := at_the_limit_unsaid(path.read_text(encoding="utf-8")))
    }
    assert unsaid == {}, f"say why each sits at the limit (# {AT_THE_LIMIT}: ...): {unsaid}"


def test_the_limit_rule_sees_a_function_at_the_limit() -> None:
    body = "".join(f"    x = {n}\n" for n in range(FUNCTION_LINES - 1))
    assert at_the_limit_unsaid(f"def full():\n{body}") == ["full"]
    assert at_the_limit_unsaid(f"def full():  # at the limit: one table\n{body}") == []
    assert at_the_limit_unsaid(f"# At the limit: one table\n@wrap\ndef full():\n{body}") == []
    assert at_the_limit_unsaid(f"def short():\n{body[: -len('    x = 0')]}") == []
    module = "x = 1\n" * MODULE_LINES
    assert at_the_limit_unsaid(module) == ["the module"]
    assert at_the_limit_unsaid("# at the limit: a table\n" + module[6:]) == []


def test_the_limits_see_what_they_guard(tmp_path: Path) -> None:
    # the walk finds the package's functions, nested ones too, the twin's and the benchmarks'
    names = {
        node.name
        for path in housed()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef)
    }
    assert {"run_probe", "profile_again", "worker_costs", "run_ladder", "measure_one"} <= names
    assert ROOT / "bench" / "gpu" / "suite.py" in bench_sources()
    assert not any("results" in p.relative_to(ROOT / "bench").parts for p in bench_sources())


# bench/ is no package: a script runs as `python bench/NAME.py` (bench/gpu/'s as
# `python bench/gpu/NAME.py`) and imports the modules beside it by their bare names, which
# import-linter cannot see. So its import graph is read here, with ast.


def imported_names(tree: ast.AST) -> Iterator[str]:
    """The top-level names a module imports, absolute imports only, in functions too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def sibling_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of one folder of bench/ and the modules beside it that it imports."""
    modules = {path.stem: path for path in folder.glob("*.py")}
    return {
        name: set(imported_names(ast.parse(path.read_text(encoding="utf-8")))) & set(modules)
        for name, path in modules.items()
    }


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every import cycle, each once (its modules from the least, in import order)."""
    found: set[tuple[str, ...]] = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.add(tuple(path))
            elif nxt not in path and nxt > path[0]:
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return sorted(list(c) for c in found)


def test_no_bench_module_imports_in_a_cycle() -> None:
    folders = {p.parent for p in bench_sources()}
    assert folders == {ROOT / "bench", ROOT / "bench" / "gpu"}
    found = {
        str(folder.relative_to(ROOT)): loops
        for folder in sorted(folders)
        if (loops := cycles(sibling_imports(folder)))
    }
    assert found == {}, f"move what both sides need into a module both import: {found}"


def test_the_cycle_guard_sees_a_cycle_and_reads_bench() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    code = "import fault_matrix as fm\ndef f():\n    from _record import record\n"
    assert set(imported_names(ast.parse(code))) == {"fault_matrix", "_record"}
    graph = sibling_imports(ROOT / "bench")
    assert "_fault_harness" in graph["fault_matrix"] and "_record" in graph["gpu_twin"]


def test_neither_the_product_nor_the_twin_imports_bench() -> None:
    """bench/ runs tuneup; tuneup never runs bench (it is not installed)."""
    bench_names = {"bench", *(p.stem for p in bench_sources())}
    found = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in [*sources(), *(ROOT / "twin").rglob("*.py")]
        if (names := set(imported_names(ast.parse(path.read_text(encoding="utf-8")))) & bench_names)
    }
    assert found == {}, f"the product imports these bench modules: {found}"


def test_the_import_contract_names_every_bench_helper() -> None:
    """lint-imports' `no-bench-in-product` forbids bench's helpers by their bare names (bench
    is no package): a new `bench/_*.py` joins the list, or this fails naming it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["id"] == "no-bench-in-product"]
    helpers = {p.stem for p in (ROOT / "bench").glob("_*.py")}
    assert helpers <= set(contract["forbidden_modules"]), helpers - set(
        contract["forbidden_modules"]
    )
    assert set(contract["source_modules"]) == {"tuneup", "tuneup_plugins", "twin"}


# A loader is one row of tuneup/config/loaders.py and one builder; everything else asks the
# row (`loader(name).dali`, `.reads`, `.on_gpu`, ...), never the name. The simulators keep
# their own speed per loader (a model of a machine, not a rule of tuneup).
LOADER_NAMES_ALLOWED = {
    "tuneup/config/loaders.py",
    "tuneup/unet/loaders.py",
    "plugins/sim_surface.py",
    "plugins/sim_ladder.py",
}


PHASES = ("full", "io", "synthetic")


def loader_name_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that compare a value with a loader's name, or test a name's prefix."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for side in sides:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
                # "synthetic" is a phase too: there, only a comparison that reads a loader
                if any(n not in PHASES or "loader" in ast.unparse(node) for n in named):
                    found.append(node.lineno)
                    break
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(
                isinstance(a, ast.Constant)
                and isinstance(a.value, str)
                and any(n.startswith(a.value) or n.endswith(a.value) for n in names)
                and len(a.value) >= 3
                for a in node.args
            )
        ):
            found.append(node.lineno)
    return found


def test_no_product_code_branches_on_a_loaders_name() -> None:
    from tuneup.config import LOADER_CHOICES

    names = set(LOADER_CHOICES)
    found = {}
    for path in sources():
        where = str(path.relative_to(ROOT))
        if where in LOADER_NAMES_ALLOWED:
            continue
        lines = loader_name_comparisons(ast.parse(path.read_text(encoding="utf-8")), names)
        if lines:
            found[where] = lines
    assert found == {}, f"ask the loader table (tuneup/config/loaders.py) instead: {found}"


def test_the_loader_name_guard_sees_a_branch() -> None:
    names = {"lowmem", "dali-lowmem"}
    code = 'if cfg.data_loader_config == "lowmem": pass\nif k.startswith("dali"): pass\n'
    assert loader_name_comparisons(ast.parse(code), names) == [1, 2]
    assert loader_name_comparisons(ast.parse("if loader(n).dali: pass\n"), names) == []
    synthetic = 'a = cfg.data_loader_config != "synthetic"\nb = phase == "synthetic"\n'
    assert loader_name_comparisons(ast.parse(synthetic), {"synthetic"}) == [1]


def test_every_knob_reaches_the_trainer() -> None:
    """A knob declared but read by nothing passes mypy and every other test (the scratch
    walkthrough of issue 36 added one): the trainer (unet/, worker/) must read each, unless it
    is a tutorial alias (config/coerce.py turns it into its knob) or the config derives from
    it (`TrainConfig`'s own properties)."""
    import dataclasses

    from tuneup.config import TrainConfig

    read: set[str] = set()
    for folder in ("unet", "worker"):
        for path in (ROOT / "tuneup" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute):
                    read.add(node.attr)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    read.add(node.value)
    own = {
        node.attr
        for node in ast.walk(ast.parse((ROOT / "tuneup/config/knobs.py").read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    unread = [
        f.name
        for f in dataclasses.fields(TrainConfig)
        if not f.metadata.get("tutorial") and f.name not in read | own
    ]
    assert unread == [], f"apply these knobs in the trainer (unet/, worker/): {unread}"
