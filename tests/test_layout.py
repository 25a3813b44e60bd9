"""The house's size limits, as the style guide sets them: a module of a few hundred lines,
a function that fits a screen; the newcomer reads one without scrolling through three."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 500
FUNCTION_LINES = 80


def sources() -> list[Path]:
    """The product: the package and its built-in plugins, what the wheel installs."""
    return sorted([*(ROOT / "tuneup").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])


def housed() -> list[Path]:
    """Everything held to the house's limits: the product and the GPU twin beside it."""
    return sorted([*sources(), *(ROOT / "twin").rglob("*.py")])


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
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, f"split these functions (lines): {long}"


def test_the_limits_see_what_they_guard(tmp_path: Path) -> None:
    # the walk finds the package's functions, nested ones too, and the twin's
    names = {
        node.name
        for path in housed()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef)
    }
    assert {"run_probe", "profile_again", "worker_costs"} <= names


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
