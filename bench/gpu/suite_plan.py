"""The suite's plan on a GPU: what each step takes there, from a recorded run, and what fits.

A device window is short (15 minutes with the machine's start, 10 a command), so
a run takes its steps in rank order while they fit its budget, and names the rest
for a later run into the same folder. What a step takes on the GPU comes from an
evidence folder (bench/gpu/EVIDENCE.md; the first H200 run by default), each
figure with where it came from:

- doctor: its run in run.log, plus the first step of the preset's baseline it now
  times (knobs.json's baseline row);
- gpu-tests: pytest's own time in pytest.out, and the app's GPU test added since
  (APP_TEST_S: a worker's start and a tiny model's one-stage ladder; not yet measured);
- knobs: one warm process (a fresh start, the baseline's first step, each further
  precision or layout's first step less what every process pays, then the timed
  steps at each row's step time) and the two knobs that need a process of their own;
- honesty: two repeats of a probe worker and a bare loop, each a fresh process
  (the session's spawn, bf16's first step, the timed steps);
- ladder: `tuneup probe --budget` on what is left, LADDER_MIN_S at least (below
  it the ladder is a baseline alone: the GPU twin at a 3 minute budget keeps three
  stages);
- speed: the default ladder whole, as the GPU twin predicts it.

Pure but for reading the folder.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from tuneup.config import first_uses

HERE = Path(__file__).resolve().parent
EVIDENCE = HERE.parent / "results" / "gpu-h200-2026-11-26"
TWIN = HERE.parent / "results" / "gpu_twin_h200.json"

LADDER_MIN_S = 180.0
# torch.compile's cold compile and TorchScript's scripting, as the jit knob declares them
COMPILE_COLD_S = first_uses({"jit": "compile"})[("jit", "compile")]
SCRIPT_S = first_uses({"jit": "script"})[("jit", "script")]
CAPTURE_S = 2.0  # a CUDA graph's capture
KNOB_STEPS = 10 + 3 * 10  # knobs.py on a GPU: 10 warm-up steps, 3 trials of 10
APP_TEST_S = 45.0
HONESTY_PROCESSES = 4  # 2 repeats x (the worker, the bare loop)
HONESTY_STEPS = 3 * 20


@dataclass(frozen=True)
class Planned:
    """A step's place in a run: its estimated GPU seconds, and whether it fits."""

    name: str
    seconds: float
    fits: bool
    source: str


def read_figures(folder: Path = EVIDENCE) -> dict[str, Any]:
    """What the estimates need from an evidence folder: step times, first steps, step times
    per knob, the spawn. Missing pieces are absent (the estimates then say so)."""
    figures: dict[str, Any] = {"folder": str(folder)}
    log = _text(folder / "run.log")
    marks = [(int(t), what) for t, what in re.findall(r"^\[(\d+)s\] (.+)$", log, re.MULTILINE)]
    for (at, what), (after, _) in itertools.pairwise(marks):
        if what.startswith("doctor"):
            figures["doctor_s"] = float(after - at)
            break
    tests = re.search(r" in ([\d.]+)s", _text(folder / "pytest.out"))
    if tests:
        figures["gpu_tests_s"] = float(tests.group(1))
    knobs = _json(folder / "knobs.json")
    rows = [r for r in (knobs or {}).get("rows", []) if r.get("status") == "pass"]
    figures["first_step_s"] = {
        r["knob"]: float(r["first_step_s"])
        for r in rows
        if r.get("first_step_s") and r.get("process", "fresh") == "fresh"
    }
    figures["ms_per_step"] = {r["knob"]: float(r["ms_per_step"]) for r in rows}
    spawns = []
    for line in _text(folder / "session" / "journal.jsonl").splitlines():
        entry = _loads(line)
        if entry.get("stage") == "baseline" and "spawn" in entry.get("one_time_s", {}):
            spawns.append(float(entry["one_time_s"]["spawn"]))
    if spawns:
        figures["spawn_s"] = median(spawns)
    twin = _json(TWIN)
    if twin and twin.get("wall_s"):
        figures["default_ladder_s"] = float(twin["wall_s"])
    return figures


def gpu_estimates(figures: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Each step's GPU seconds, with where the figure came from."""
    first: dict[str, float] = figures.get("first_step_s", {})
    ms: dict[str, float] = figures.get("ms_per_step", {})
    spawn = figures.get("spawn_s", 8.0)
    base_first = first.get("baseline", 34.0)
    floor = min(first.values(), default=12.0)  # what every process pays on its first step
    base_ms = ms.get("baseline", 63.0)
    out: dict[str, tuple[float, str]] = {}
    if "doctor_s" in figures:
        said = "run.log's doctor + its baseline's first step"
        out["doctor"] = (figures["doctor_s"] + base_first, said)
    if "gpu_tests_s" in figures:
        said = "pytest.out's time + its start + the app's test"
        out["gpu-tests"] = (figures["gpu_tests_s"] + 5.0 + APP_TEST_S, said)
    # One warm process: each knob's first step beyond the floor where its kernels are new.
    shared = [
        ("baseline", base_first),
        ("amp bf16", max(0.0, first.get("amp bf16", floor) - floor)),
        ("amp fp16", max(0.0, first.get("amp fp16", floor) - floor)),
        ("channels_last", max(0.0, first.get("channels_last", base_first) - floor)),
        ("fused Adam", 0.0),
        ("jit script", SCRIPT_S),
        ("cuda_graphs", CAPTURE_S),
        ("bf16+cl+fused+graphs", max(0.0, first.get("amp bf16", floor) - floor) + CAPTURE_S),
        ("jit compile", COMPILE_COLD_S),
    ]
    timed = sum(KNOB_STEPS * ms.get(name, base_ms) / 1000 for name, _ in shared)
    knobs = spawn + sum(seconds for _, seconds in shared) + timed
    for name in ("tf32 off", "cudnn benchmark off"):  # processes of their own
        knobs += spawn + first.get(name, base_first) + KNOB_STEPS * ms.get(name, base_ms) / 1000
    out["knobs"] = (knobs, "knobs.json's first steps and step times, one warm process")
    bf16_first = first.get("amp bf16", floor)
    bf16_steps = HONESTY_STEPS * ms.get("amp bf16", base_ms) / 1000
    honesty = HONESTY_PROCESSES * (spawn + bf16_first + bf16_steps)
    out["honesty"] = (honesty, "the session's spawn, bf16's first step and step time")
    out["ladder"] = (LADDER_MIN_S, "tuneup probe --budget: what is left, 3 min at least")
    if "default_ladder_s" in figures:
        out["speed"] = (figures["default_ladder_s"], "the GPU twin's default ladder")
    return out


def plan(
    names: list[str], budget_s: float, estimates: dict[str, tuple[float, str]], reserve_s: float
) -> list[Planned]:
    """The steps in rank order: each fits while the estimates so far leave it room."""
    left = budget_s - reserve_s
    planned = []
    for name in names:
        seconds, source = estimates.get(name, (0.0, "no estimate"))
        fits = seconds <= left
        if fits:
            left -= seconds
        planned.append(Planned(name, seconds, fits, source))
    return planned


TAKES_THE_REST = "ladder"  # its --budget is what the run has left: nothing runs after it


def plan_lines(
    planned: list[Planned], budget_s: float, folder: str, reserve_s: float = 0.0
) -> list[str]:
    """The plan as the suite prints it before the first step, and the later runs the steps
    it leaves out need (as many as fit each window, in rank order)."""
    kept = [p for p in planned if p.fits]
    total = sum(p.seconds for p in kept)
    lines = [
        f"plan for {budget_s / 60:.0f} min on the GPU (estimates from {Path(folder).name}): "
        + ", ".join(f"{p.name} ~{p.seconds:.0f}s" for p in kept)
        + f" = {total:.0f}s"
    ]
    windows: list[list[Planned]] = []
    room = 0.0
    for step in (p for p in planned if not p.fits):
        if not windows or step.seconds > room:
            windows.append([])
            room = budget_s - reserve_s
        windows[-1].append(step)
        room = 0.0 if step.name == TAKES_THE_REST else room - step.seconds
    for window in windows:
        names = ",".join(p.name for p in window)
        lines.append(
            f"a later run: bash bench/gpu/run.sh --steps {names} --budget {budget_s:.0f}s "
            f"({', '.join(f'{p.name} ~{p.seconds:.0f}s' for p in window)})"
        )
    return lines


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _json(path: Path) -> Any:
    return _loads(_text(path)) or None


def _loads(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
