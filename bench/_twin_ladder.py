"""One ladder on the GPU twin: tuneup's own session, the twin answering each probe as the
recorded GPU did, a simulated clock moved by each probe's priced wall time.

bench/gpu_twin.py runs it (its docstring says what `legacy` prices); _twin_predict.py
runs it over seeds and the figures' ends.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)

from tuneup.cluster.job import JobEnv
from tuneup.costs.estimate import Habits, ProbeCosts, recorded_costs
from tuneup.costs.one_time import End, FirstUse, conv_key
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.durations import duration_text
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, Candidate, ProbeResult
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.search import paired
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.assembly import SessionRequest, assemble_new
from tuneup.tuning.session.control import OutOfTime, SessionInterrupted, SilentReporter
from tuneup.tuning.session.datakeep import base_values
from tuneup.tuning.session.engine import Engine
from twin.evidence import GATHER, read_json
from twin.model import Evidence, GpuTwin

# The measurement before issue 24 (presets/h200.yaml at 33c6488).
LEGACY = {"trial_steps": 20, "trials": 5, "warmup_max_steps": 60, "loss_steps": 20}


class SimClock:
    """Simulated seconds: a probe moves it by its wall time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TwinBackend(ProbeBackend):
    """The twin as a session's backend: each probe moves the simulated clock."""

    def __init__(self, twin: GpuTwin, clock: SimClock, legacy: bool, overhead_s: float) -> None:
        self.twin = twin
        self.overhead_s = overhead_s
        self.clock = clock
        self.legacy = legacy
        self.keys: set[Any] = set()
        self.pair: int | None = None

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        if self.legacy:  # every stage judged on FULL, every probe measured whole
            candidate = replace(candidate, judged="full", whole=True)
        result = self.twin(stage, candidate, values)
        if self.legacy and result.ok:
            result = replace(result, wall_s=self._legacy_wall(stage, candidate, values, result))
        self.clock.now += result.wall_s + self.overhead_s
        return result

    def _legacy_wall(
        self, stage: str, candidate: Candidate, values: dict[str, Any], result: ProbeResult
    ) -> float:
        """The probe as the step-counted plan measured it (bench/gpu_twin.py's --legacy)."""
        knobs = self.twin.knobs(values)
        fresh = stage == BASELINE_STAGE or (stage == CONFIRM_STAGE and candidate.pair != self.pair)
        self.pair = candidate.pair
        key = conv_key(knobs)
        if fresh:
            self.keys = set()
        new = key not in self.keys
        self.keys.add(key)
        use = FirstUse(fresh=fresh, conv=new)
        once = self.twin.evidence.costs.one_time(use, knobs, self.twin.end)
        start = once.get("spawn", once.get("setup", 0.0))
        first = (
            sum(v for k, v in once.items() if k not in ("spawn", "setup")) if fresh or new else 0.0
        )
        rates = self.twin.expected_sps(values)
        batch = knobs["global_batch_size"]
        full_step = batch / rates["full"]
        steps = LEGACY["trials"] * LEGACY["trial_steps"]
        timed = sum(steps * batch / rates[p] for p in ("io", "synthetic", "full"))
        warm = (LEGACY["loss_steps"] + LEGACY["warmup_max_steps"] / 2) * full_step
        return start + first + warm + timed


def _decide_as_before() -> None:
    """The decision rules before issue 24: two pairs at least, never one (no phase is ever
    known quiet, no pair decisive), and so two anchors around every stage's screens."""
    paired.NoiseTracker.quiet = property(lambda _self: False)  # type: ignore[method-assign,assignment]
    paired.DECISIVE = math.inf


def _on_full(plan: StagePlan) -> StagePlan:
    """A stage judged on FULL, as its re-proposals on later incumbents are."""
    again = plan.refresh
    refresh = None if again is None else (lambda values: _on_full(again(values)))
    return replace(plan, judged="full", refresh=refresh)


def recorded_machine(evidence: Evidence) -> MachineInfo:
    """The recorded machine: a gather's own record of it; else the first GPU run's node (one
    GPU, its CPUs, the compile toolchain, no DALI, no apex)."""
    recorded = read_json(evidence.folder / GATHER / "session.json").get("machine")
    if isinstance(recorded, dict):
        fields = {f.name for f in dataclasses.fields(MachineInfo)}
        known = {k: v for k, v in recorded.items() if k in fields}
        known["gpu_names"] = tuple(known.get("gpu_names") or ())
        return MachineInfo(**known)
    return MachineInfo(
        cuda=True, gpu_count=1, gpu_names=(evidence.gpu,), cpus_usable=evidence.cpus, dali=False
    )


def run_ladder(
    evidence: Evidence,
    seed: int,
    budget_s: float | None,
    legacy: bool,
    preset_name: str,
    keep: Path | None = None,
    end: End = "likely",
    compiled: Sequence[dict[str, Any]] = (),
    targets: bool = True,
) -> dict[str, Any]:
    """One ladder on the twin. Its plan and its time left are priced as `tuneup probe`
    prices them on the recorded machine (the preset's `probe.costs`, then what its probes
    took): its estimates are the ones a user is shown there; a preset without costs is
    priced from the twin's own figures. `targets` False: as a ladder ran before the
    tutorial got an answer of its own (issue 47), as the recorded H200 ladders did."""
    clock = SimClock()
    twin = GpuTwin(evidence, seed=seed, end=end, compiled=compiled)
    preset = load_preset(preset_name)
    if legacy:
        twin.budget = replace(twin.budget, max_trials=5, min_trials=5)
        _decide_as_before()
    else:
        twin.budget = preset.budget
    overhead = evidence.overhead.at(end)
    backend = TwinBackend(twin, clock, legacy, overhead)
    estimates: list[tuple[int, float, float]] = []  # (probes done, elapsed, said left)
    reporter = _Listener(clock, estimates)
    prices = (
        recorded_costs(preset.costs, preset.budget)
        if preset.costs is not None
        else twin.prior_costs(dict(base_values(preset, load_trainer("sim"), None, npy=False)))
    )
    ran = _run_session(
        backend, reporter, evidence, preset_name, prices, budget_s, targets=targets, keep=keep
    )
    start = evidence.start.at(end) if evidence.start is not None else 0.0
    return _ladder_record(ran, legacy, end, seed, overhead, start, estimates)


@dataclass(frozen=True)
class LadderRun:
    """What a ladder on the twin left: its summary, probes, what its clock learned, and
    how it ended."""

    summary: Summary
    probes: list[ProbeResult]
    learned: ProbeCosts  # the probes' typical costs, as the session's clock learned them
    habits: Habits  # how the ladder's stages decided (pairs, adoptions), at CONFIRM_STAGE
    notes: list[str]
    stopped: str
    finished: bool


def _run_session(
    backend: TwinBackend,
    reporter: _Listener,
    evidence: Evidence,
    preset_name: str,
    prices: ProbeCosts,
    budget_s: float | None,
    *,
    targets: bool,
    keep: Path | None,
) -> LadderRun:
    """tuneup's own session, assembled as `tuneup probe` would, on the twin's backend and
    the simulated clock, in a cache of its own."""
    twin, clock, legacy = backend.twin, backend.clock, backend.legacy
    machine = recorded_machine(evidence)

    def engine_factory(*_args: Any, **_kwargs: Any) -> Engine:
        return Engine(backend)

    with tempfile.TemporaryDirectory() as folder:
        # A cache of its own: no earlier ladder's record prices this one, and the
        # twin's simulated ladder leaves none in the user's cache.
        os.environ["TUNEUP_CACHE_DIR"] = str(Path(folder) / "cache")
        request = SessionRequest(preset=preset_name, trainer="sim", time_budget_s=budget_s)
        sim = load_trainer("sim")
        built = assemble_new(
            request,
            machine,
            adapter=sim if targets else replace(sim, targets=()),
            out=Path(folder) / "twin",
            reporter=reporter,
            job=JobEnv(
                source="local",
                hostname="twin",
                cpus_usable=evidence.cpus,
                gpus_on_node=1 if evidence.on_gpu else 0,
            ),
            engine_factory=engine_factory,
            monotonic=clock,
            # the plan prices the twin's probes as the twin does, not as the plain sim
            known_costs=prices,
        )
        built.session.clock.simulated = False  # the twin's probes take the machine's time
        built.session.clock.reprice(prices)
        if not legacy:  # the trials the plan fitted to the time budget (maybe shortened)
            twin.budget = built.session.preset.budget
        if legacy:  # every stage judged on FULL, as before issue 24
            built.session.plans = [_on_full(p) for p in built.session.plans]
            built.session.clock.plans = built.session.plans
        stopped = ""
        try:
            built.session.start(resume=False)
            outcome = built.session.run()
        except (OutOfTime, SessionInterrupted) as exc:
            stopped, outcome = str(exc), None
        finally:
            built.close()
        probes = built.results.results()
        ran = LadderRun(
            summary=built.results.summary(),
            probes=probes,
            learned=built.session.clock.typical_costs(),
            habits=built.session.clock.habits(CONFIRM_STAGE),
            notes=list(built.notes),
            stopped=stopped,
            finished=outcome is not None,
        )
        if keep is not None:
            keep.write_text("".join(json.dumps(p.to_journal(), default=str) + "\n" for p in probes))
    return ran


def _ladder_record(
    ran: LadderRun,
    legacy: bool,
    end: End,
    seed: int,
    overhead: float,
    start: float,
    estimates: list[tuple[int, float, float]],
) -> dict[str, Any]:
    """A ladder as the JSON says it: its wall time and probes, where the time went, what
    it decided, and how far the time left it said was from the end."""
    probes, summary = ran.probes, ran.summary
    total = start + sum(p.wall_s + overhead for p in probes)
    stages: dict[str, dict[str, float]] = {}
    for probe in probes:
        entry = stages.setdefault(probe.stage, {"probes": 0, "wall_s": 0.0})
        entry["probes"] += 1
        entry["wall_s"] = round(entry["wall_s"] + probe.wall_s + overhead, 1)
    said = next(((n, e, left) for n, e, left in estimates if n == 2), None)
    error = None if said is None else abs(said[1] + said[2] - total) / total
    return {
        "mode": "legacy" if legacy else "now",
        "end": end,
        "seed": seed,
        "wall_s": round(total, 1),
        "wall": duration_text(total),
        "probes": sum(1 for p in probes if p.status.value != "skipped"),
        "parts": ladder_parts([p.to_journal() for p in probes], overhead_s=overhead, start_s=start),
        "stages": stages,
        "decisions": [
            f"{s.stage}: {s.reason}"
            + (f"; not tried: {', '.join(s.not_tried)}" if s.not_tried else "")
            for s in summary.stages
        ],
        "headline": summary.recommendation.headline,
        "recommendation": dict(summary.recommendation.changes),
        "left_out": [s.stage for s in summary.stages if "left out" in s.reason],
        "estimate_after_2_probes_error": None if error is None else round(error, 3),
        "first_estimate_s": round(estimates[0][2], 1) if estimates else None,
        "estimates": [
            {
                "probes": n,
                "elapsed_s": round(e, 1),
                "said_left_s": round(left, 1),
                "error": round(abs(e + left - total) / total, 3),
            }
            for n, e, left in estimates
        ],
        "notes": ran.notes,
        "costs": _costs_record(ran.learned, ran.habits),
        "stopped": ran.stopped,
        "finished": ran.finished,
    }


def _costs_record(learned: ProbeCosts, habits: Habits) -> dict[str, Any]:
    """What the session's clock learned of the probes' costs, as the JSON says it."""
    return {
        "spawn_s": round(learned.spawn_s, 1),
        "setup_s": round(learned.setup_s, 1),
        "first_s": round(learned.first_s, 1),
        "kernel_s": None if learned.kernel_s is None else round(learned.kernel_s, 2),
        "step_s": {k: round(v, 4) for k, v in learned.step_s.items()},
        "trials": {k: round(v, 1) for k, v in learned.trials.items()},
        "scale": round(learned.scale, 3),
        "pairs_per_stage": round(habits.pairs_per_stage, 2),
        "adopt_rate": round(habits.adopt_rate, 2),
    }


PARTS = ("spawn", "setup", "first_steps", "compile", "graph_capture")


def ladder_parts(
    lines: Sequence[dict[str, Any]], *, overhead_s: float = 0.0, start_s: float = 0.0
) -> dict[str, float]:
    """Where a ladder's time went, part by part, from its journal lines: the one-time parts
    (process starts, set-ups, first steps, compiles, captures), the warm-ups and loss steps
    (the wall less the rest), the timed trials, the bookkeeping between probes, the start."""
    parts = {name: 0.0 for name in (*PARTS, "warmup_and_loss", "trials", "failed")}
    for line in lines:
        wall = float(line.get("wall_s") or 0.0)
        if line.get("status") != "ok":
            parts["failed"] += wall
            continue
        once = dict(line.get("one_time_s") or {})
        for name in PARTS:
            parts[name] += float(once.get(name, 0.0))
        timed = float(line.get("timed_s") or 0.0)
        parts["trials"] += timed
        parts["warmup_and_loss"] += max(0.0, wall - timed - sum(once.values()))
    parts["overhead"] = overhead_s * len(lines)
    parts["session_start"] = start_s
    return {k: round(v, 1) for k, v in parts.items()}


class _Listener(SilentReporter):
    """Hears the session's time left after each probe, on the simulated clock."""

    def __init__(self, clock: SimClock, estimates: list[tuple[int, float, float]]) -> None:
        self.clock = clock
        self.estimates = estimates
        self.done = 0

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.done += 1

    def time_left(self, seconds: float, basis: str) -> None:
        # said before probe_done: this figure follows probe number done + 1 (0: the start)
        done = self.done + (1 if self.estimates else 0)
        self.estimates.append((done, self.clock(), seconds))
