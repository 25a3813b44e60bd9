"""The suite's plan on a GPU: what each step takes there, from a recorded run, and what fits.

A device window is short (15 minutes with the machine's start, 10 a command), so
a run takes its steps in rank order while they fit its budget, and names the rest
for a later run into the same folder. The whole default ladder (`speed`) comes
first: it is the claim a window tests. What a step takes on the GPU comes from an
evidence folder (bench/gpu/EVIDENCE.md; the first H200 run by default), each
figure with where it came from:

- speed: the default ladder whole, as the GPU twin predicted it for this run
  (prediction.json, made before the run started), else as its recorded prediction
  (bench/results/gpu_twin_h200.json) says;
- doctor: its run in run.log, plus the first step of the preset's baseline it now
  times (knobs.json's baseline row);
- gpu-tests: pytest's own time in pytest.out, and the app's GPU test added since
  (APP_TEST_S: a worker's start and a tiny model's one-stage ladder; not yet measured),
  or where more, the tests as a later run's stopped part took them (GPU_TESTS_STOPPED);
- knobs: one warm process (a fresh start, the baseline's first step, each further
  precision or layout's first step less what every process pays, then the timed
  steps at each row's step time) and the two knobs that need a process of their own;
- honesty: two repeats of a probe worker and a bare loop, each a fresh process
  (the session's spawn, bf16's first step, the timed steps);
- ladder (only with --steps ladder): `tuneup probe --budget` on what is left,
  LADDER_MIN_S at least (below it the ladder is a baseline alone: the GPU twin at
  a 3 minute budget keeps three stages).

Pure but for reading the folder.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from tuneup.config import first_uses

HERE = Path(__file__).resolve().parent
EVIDENCE = HERE.parent / "results" / "gpu-h200-2026-11-26"
# The whole-ladder runs recorded after it: the twin reads their journals beside it
LADDER_JOURNALS = tuple(
    HERE.parent / "results" / name / "speed" / "00" / "journal.jsonl"
    for name in (
        "gpu-h200-2026-11-27",
        "gpu-h200-2026-11-27b",
        "gpu-h200-2026-11-27c",
        "gpu-h200-2026-11-27d",
    )
)
TWIN = HERE.parent / "results" / "gpu_twin_h200.json"

LADDER_MIN_S = 180.0
# torch.compile's cold compile and TorchScript's scripting, as the jit knob declares them
COMPILE_COLD_S = first_uses({"jit": "compile"})[("jit", "compile")]
SCRIPT_S = first_uses({"jit": "script"})[("jit", "script")]
CAPTURE_S = 2.0  # a CUDA graph's capture
KNOB_STEPS = 10 + 3 * 10  # knobs.py on a GPU: 10 warm-up steps, 3 trials of 10
APP_TEST_S = 45.0
# The gpu tests on the H200, 2026-11-27d: stopped at their 123 s limit with 7 of 24 passed
# (two full doctor runs among them, now one). Until a window runs them whole, the rest are
# priced as those seven took, a test each: (seconds, tests done, tests run).
GPU_TESTS_STOPPED = (122.9, 7, 24)
HONESTY_PROCESSES = 4  # 2 repeats x (the worker, the bare loop)
HONESTY_STEPS = 3 * 20


@dataclass(frozen=True)
class Planned:
    """A step's place in a run: its estimated GPU seconds, whether it fits, and the seconds
    it is planned to take (`taken`: less than `seconds` where the run's end will cut it)."""

    name: str
    seconds: float
    fits: bool
    source: str
    taken: float = 0.0

    @property
    def cut(self) -> bool:
        return self.fits and self.taken < self.seconds


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


def gpu_estimates(
    figures: dict[str, Any], predicted: Mapping[str, float] | None = None
) -> dict[str, tuple[float, str]]:
    """Each step's GPU seconds, with where the figure came from; `predicted`: the GPU twin's
    figures for this run's whole ladder (suite_predict.predicted), which price `speed`."""
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
        stopped_s, done, run = GPU_TESTS_STOPPED
        if stopped_s * run / done > out["gpu-tests"][0]:
            said = f"{done} of {run} tests took {stopped_s:.0f}s on the H200 (27d), the rest alike"
            out["gpu-tests"] = (stopped_s * run / done, said)
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
    if predicted and predicted.get("wall_s"):
        low, high = predicted.get("wall_s_low"), predicted.get("wall_s_high")
        said = "the GPU twin's prediction for this run (prediction.json)"
        if low is not None and high is not None:
            said += f", {low:.0f}-{high:.0f}s"
        out["speed"] = (predicted["wall_s"], said)
    elif "default_ladder_s" in figures:
        out["speed"] = (figures["default_ladder_s"], f"the GPU twin's record ({TWIN.name})")
    return out


def plan(
    names: list[str],
    budget_s: float,
    estimates: dict[str, tuple[float, str]],
    reserve_s: float,
    floors: Mapping[str, float] | None = None,
) -> list[Planned]:
    """The steps in rank order: each fits while the estimates so far leave it room.

    A step with a floor (the whole ladder: what it needs to say something) fits when its
    floor does, and takes what it is estimated to or all there is: stopped at the run's
    end, it still gives its time so far, a lower bound.
    """
    left = budget_s - reserve_s
    planned = []
    for name in names:
        seconds, source = estimates.get(name, (0.0, "no estimate"))
        floor = (floors or {}).get(name)
        fits = (seconds if floor is None else min(seconds, floor)) <= left
        taken = min(seconds, left) if fits else 0.0
        left -= taken
        planned.append(Planned(name, seconds, fits, source, taken))
    return planned


TAKES_THE_REST = "ladder"  # its --budget is what the run has left: nothing runs after it
WHOLE = "speed"  # the whole default ladder: the claim, first


def plan_lines(
    planned: list[Planned], budget_s: float, folder: str, reserve_s: float = 0.0
) -> list[str]:
    """The plan as the suite prints it before the first step, and the later runs the steps
    it leaves out need (as many as fit each window, in rank order)."""
    kept = [p for p in planned if p.fits]
    total = sum(p.taken for p in kept)
    lines = [
        f"plan for {budget_s / 60:.0f} min on the GPU (estimates from {Path(folder).name}): "
        + ", ".join(
            f"{p.name} ~{p.seconds:.0f}s" + (f" (cut to {p.taken:.0f}s)" if p.cut else "")
            for p in kept
        )
        + f" = {total:.0f}s"
    ]
    first = planned[0] if planned else None
    if first is not None and first.name == WHOLE and first.fits:
        said = f"first the whole default ladder ({WHOLE} ~{first.seconds:.0f}s: {first.source})"
        if first.cut:
            said += (
                f", more than the {first.taken:.0f}s this run has: it runs to the run's end "
                "(its time so far then a lower bound)"
            )
        said += ", with tuneup monitor beside it; then what fits of the rest, in rank order"
        lines.append(said)
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
