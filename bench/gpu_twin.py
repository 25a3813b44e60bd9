"""Predict the default GPU ladder on a CPU: the GPU twin replays a recorded GPU's costs.

    python bench/gpu_twin.py --evidence ../shared/gpu-evidence/h200-2026-11-26
    python bench/gpu_twin.py --evidence DIR --json              # one object: wall_s, probes, ...
    python bench/gpu_twin.py --evidence DIR --budget 10m        # a ladder planned to a budget
    python bench/gpu_twin.py --evidence DIR --legacy            # the plan before: in hours
    python bench/gpu_twin.py --evidence DIR --against RUN/speed/00/journal.jsonl  # probe by probe
    python bench/gpu_twin.py --evidence DIR --seeds 5 --out bench/results/gpu_twin_h200.json

The ladder is tuneup's own, assembled as `tuneup probe --preset h200` would
assemble it (its stages, plan, search, confirmation and time budget), with the
`sim` trainer's GPU twin (plugins/twin.py) answering each probe as the recorded
GPU did, and a simulated clock that moves by each probe's priced wall time
(the estimate's model, tuneup.probe.estimate, the one the session's time left
uses). So it predicts the plan, the probe count and the wall time, in seconds,
and checks the estimate against them: what the session said was left after
its first two probes, against what was left.

--legacy prices the same ladder as the measurement before issue 24 did: every
probe measured IO, SYNTHETIC and FULL, 5 trials of 20 steps each, a warm-up of
up to 60 steps after 20 loss steps, every stage judged on FULL, each baseline
probe and confirmation pair in a fresh process, two pairs at least for every
decision (none known quiet, none decisive). The real H200 run's own estimate
of that ladder was about 6 hours (132 probes, its old model); this replays
it probe by probe.

What the evidence does not hold is assumed (plugins/twin.py, ASSUMED), and the
output lists the assumptions: these are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from _record import record
from tuneup_plugins.twin import (
    Evidence,
    GpuTwin,
    assumed_rates,
    measured_rates,
    read_evidence,
)
from tuneup_plugins.twin_against import probe_by_probe
from tuneup_plugins.twin_evidence import GATHER, read_journal, read_json
from tuneup_plugins.twin_learned import RecordedFailure
from twin_gather import gather

from tuneup.cluster.job import JobEnv
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.costmodel import ENDS, End, FirstUse, conv_key
from tuneup.probe.durations import duration_text, parse_duration
from tuneup.probe.estimate import recorded_costs
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, Candidate, ProbeResult
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.search import paired
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.assembly import SessionRequest, assemble_new
from tuneup.tuning.session.control import OutOfTime, SessionInterrupted, SilentReporter
from tuneup.tuning.session.datakeep import base_values
from tuneup.tuning.session.engine import Engine

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
        """The probe as the step-counted plan measured it (the module docstring)."""
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


def gathered_compiles(evidence: Evidence) -> list[dict[str, Any]]:
    """The configurations a gather compiled: a ladder run after it finds their graphs in the
    disk caches."""
    journal = evidence.folder / GATHER / "journal.jsonl"
    if not journal.is_file():
        return []
    configs = [dict(line.get("config") or {}) for line in read_journal(journal)]
    return [c for c in configs if c.get("jit") == "compile"]


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
    machine = recorded_machine(evidence)
    estimates: list[tuple[int, float, float]] = []  # (probes done, elapsed, said left)
    reporter = _Listener(clock, estimates)

    def engine_factory(*_args: Any, **_kwargs: Any) -> Engine:
        return Engine(backend)

    prices = (
        recorded_costs(preset.costs, preset.budget)
        if preset.costs is not None
        else twin.prior_costs(dict(base_values(preset, load_trainer("sim"), None, npy=False)))
    )
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
        summary = built.results.summary()
        probes = built.results.results()
        learned = built.session.clock.typical_costs()
        habits = built.session.clock.habits(CONFIRM_STAGE)
        if keep is not None:
            keep.write_text("".join(json.dumps(p.to_journal(), default=str) + "\n" for p in probes))
    start = evidence.start.at(end) if evidence.start is not None else 0.0
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
        "notes": list(built.notes),
        "costs": {
            "spawn_s": round(learned.spawn_s, 1),
            "setup_s": round(learned.setup_s, 1),
            "first_s": round(learned.first_s, 1),
            "kernel_s": None if learned.kernel_s is None else round(learned.kernel_s, 2),
            "step_s": {k: round(v, 4) for k, v in learned.step_s.items()},
            "trials": {k: round(v, 1) for k, v in learned.trials.items()},
            "scale": round(learned.scale, 3),
            "pairs_per_stage": round(habits.pairs_per_stage, 2),
            "adopt_rate": round(habits.adopt_rate, 2),
        },
        "stopped": stopped,
        "finished": outcome is not None,
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


def predict(
    evidence: Evidence,
    *,
    preset: str,
    seeds: int = 1,
    budget_s: float | None = None,
    legacy: bool = False,
    keep: Path | None = None,
    compile_cache: str = "auto",
    targets: bool = True,
) -> dict[str, Any]:
    """The ladder predicted at every figure's likely end, and at its low and high ends, each
    over `seeds` noise seeds (medians): `wall_s`, `wall_s_low`, `wall_s_high`; the parts
    at each end are seed 0's."""
    warm = compile_cache == "warm" or (compile_cache == "auto" and bool(evidence.table))
    compiled = gathered_compiles(evidence) if warm else []

    def ladder(seed: int, end: End) -> dict[str, Any]:
        return run_ladder(
            evidence,
            seed,
            budget_s,
            legacy,
            preset,
            keep if seed == 0 and end == "likely" else None,
            end,
            compiled,
            targets,
        )

    runs = [ladder(seed, "likely") for seed in range(seeds)]
    # each end over the same seeds (a ladder's path is the seed's: seed 0's low end alone
    # once said 80 s under a likely 77 s)
    ends = {end: [ladder(seed, end) for seed in range(seeds)] for end in ENDS if end != "likely"}
    first = runs[0]
    figures = evidence.figures()
    return {
        **first,
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "wall": duration_text(statistics.median(r["wall_s"] for r in runs)),  # not seed 0's
        "wall_s_low": statistics.median(r["wall_s"] for r in ends["low"]),
        "wall_s_high": statistics.median(r["wall_s"] for r in ends["high"]),
        "probes": statistics.median(r["probes"] for r in runs),
        "probes_low": statistics.median(r["probes"] for r in ends["low"]),
        "probes_high": statistics.median(r["probes"] for r in ends["high"]),
        "probes_range": [min(r["probes"] for r in runs), max(r["probes"] for r in runs)],
        "parts_low": ends["low"][0]["parts"],
        "parts_high": ends["high"][0]["parts"],
        "runs": [{k: r[k] for k in ("seed", "wall_s", "probes", "headline")} for r in runs],
        "evidence": str(evidence.folder),
        "preset": preset,
        "compile_cache": "warm (the gather's graphs)" if compiled else "cold",
        "figures": {name: cost.to_dict() for name, cost in figures.items()},
        "unsettled": {name: cost.settle for name, cost in figures.items() if not cost.measured},
        "recorded_stage_probes": dict(evidence.recorded_stages),
        "assumed": assumed_rates(evidence),
        "measured_rates": measured_rates(evidence),
        "recorded_failures": [recorded_failure(f) for f in evidence.failures],
        "predicted": "by the twin, from the evidence and the assumptions",
    }


def recorded_failure(failure: RecordedFailure) -> dict[str, Any]:
    """A recorded crash as the JSON says it."""
    return {
        "variant": dict(failure.variant),
        "row": failure.row,
        "wall_s": failure.wall_s,
        "reason": failure.reason,
        "worker_serves_on": failure.survived,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=Path, help="an evidence folder")
    parser.add_argument(
        "--journal-evidence",
        type=Path,
        action="append",
        default=[],
        metavar="JOURNAL",
        help="a tuneup journal.jsonl whose probes' costs are read too (repeatable)",
    )
    parser.add_argument(
        "--gather",
        type=Path,
        metavar="DIR",
        help="measure this machine's evidence into DIR without running a ladder, then stop",
    )
    parser.add_argument("--preset", default="h200")
    parser.add_argument("--budget", help="a time budget (10m, 600s): the ladder plans to it")
    parser.add_argument("--legacy", action="store_true", help="price the plan before issue 24")
    parser.add_argument("--seeds", type=int, default=1, help="noise seeds to run (medians)")
    parser.add_argument(
        "--compile-cache",
        choices=("auto", "warm", "cold"),
        default="auto",
        help="whether the ladder finds the gather's compiled graphs on disk (auto: where a "
        "gather made them)",
    )
    parser.add_argument(
        "--targets",
        choices=("all", "none"),
        default="all",
        help="none: the ladder as it ran before the tutorial got an answer of its own "
        "(issue 47), as the recorded H200 ladders ran",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also record the result under bench/results")
    parser.add_argument("--journal", type=Path, help="keep the first run's journal here")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="JOURNAL",
        help="a real ladder's journal.jsonl: the first run's probes against its, probe by probe",
    )
    args = parser.parse_args()
    if args.gather is not None:
        folder = gather(args.gather, args.preset)
        print(
            f"gathered: {folder} (predict with: python bench/gpu_twin.py --evidence "
            f"{args.gather} --preset {args.preset})"
        )
        return
    if args.evidence is None:
        parser.error("--evidence DIR is needed (or --gather DIR to make one)")
    try:
        budget_s = parse_duration(args.budget) if args.budget else None
        evidence = read_evidence(args.evidence, args.journal_evidence)
        with tempfile.TemporaryDirectory() as folder:
            against = args.against is not None
            keep = args.journal or (Path(folder) / "journal.jsonl" if against else None)
            result = predict(
                evidence,
                preset=args.preset,
                seeds=args.seeds,
                budget_s=budget_s,
                legacy=args.legacy,
                keep=keep,
                compile_cache=args.compile_cache,
                targets=args.targets == "all",
            )
            if against and keep is not None:
                result["against"] = {
                    "journal": str(args.against),
                    **probe_by_probe(read_journal(keep), read_journal(args.against)),
                }
    except (UsageError, ValueError, OSError) as exc:
        print(f"gpu_twin: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(result)
    if args.out:
        record("gpu_twin", args.out, **{k: v for k, v in result.items() if k != "notes"})


def show(result: dict[str, Any]) -> None:
    print(f"twin of {result['evidence']} ({result['mode']}, preset {result['preset']}):")
    for note in result["notes"]:
        print(f"  {note}")
    print(
        f"  predicted wall time: {duration_text(result['wall_s'])} ({result['wall_s']:.0f} s; "
        f"low {result['wall_s_low']:.0f} s, high {result['wall_s_high']:.0f} s), "
        f"{result['probes']:.0f} probes"
    )
    if result["wall_s_high"] < result["wall_s_low"]:
        # under a budget the dearer figures leave out more: a shorter ladder, not a faster one
        print(
            f"  the budget leaves out more at the figures' high end: {result['probes_high']:.0f}"
            f" probes there, {result['probes_low']:.0f} at the low end"
        )
    if result.get("first_estimate_s") is not None:
        print(
            f"  tuneup probe there says first: {duration_text(result['first_estimate_s'])}"
            " (the preset's probe.costs)"
        )
    print(
        "  where the time goes (likely): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in result["parts"].items() if v)
    )
    for stage, entry in result["stages"].items():
        print(f"  {stage:14s} {entry['probes']:3.0f} probes {entry['wall_s']:8.1f} s")
    for line in result["decisions"]:
        print(f"  {line}")
    print(f"  {result['headline']}")
    if result["estimate_after_2_probes_error"] is not None:
        print(
            f"  the estimate after 2 probes was off by "
            f"{100 * result['estimate_after_2_probes_error']:.0f}%"
        )
    print("  cost figures (likely, low-high; m: measured):")
    for name, figure in result["figures"].items():
        mark = "m" if figure["measured"] else " "
        print(
            f"   {mark} {name:24s} {figure['likely']:8.2f} ({figure['low']:.2f}-"
            f"{figure['high']:.2f})  {figure['source']}"
        )
    if result["unsettled"]:
        print("  what would settle each assumed figure:")
        for name, settle in result["unsettled"].items():
            print(f"    {name}: {settle}")
    for what, why in result.get("measured_rates", {}).items():
        print(f"  measured rate, {what}: {why}")
    for failure in result.get("recorded_failures", []):
        print(
            f"  recorded failure, {failure['variant']} in {failure['row']}: "
            f"{failure['wall_s']:.1f} s, {failure['reason'][:80]}"
        )
    for what, why in result["assumed"].items():
        print(f"  assumed rate, {what}: {why}")
    if "against" in result:
        show_against(result["against"])


def show_against(against: dict[str, Any]) -> None:
    print(
        f"  against {against['journal']}: {against['matched']} probes both ran, measured "
        f"{against['measured_s']:.0f} s, predicted {against['predicted_s']:.0f} s "
        f"({100 * (against['error'] or 0):+.0f}%; {against['only_measured']} probes only "
        f"measured, {against['only_predicted']} only predicted)"
    )
    for row in against["probes"]:
        variant = json.dumps(row["variant"], sort_keys=True)
        print(
            f"    {row['stage']:12s} {variant[:44]:44s} measured {row['measured_s']:6.1f} s"
            f"  predicted {row['predicted_s']:6.1f} s  ({row['miss_s']:+.1f} s, "
            f"{row['missed_in']})"
        )


if __name__ == "__main__":
    main()
