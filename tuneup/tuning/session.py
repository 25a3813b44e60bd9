"""A probe session: the ladder of a preset, measured, guarded, journaled and summarised.

The search is pure (search.py); this module supplies its `measure`: it runs
the trainer backend (the U-Net worker in a child process, or the `sim`
surface), applies the loss guard against the baseline, journals every result
as it arrives and reuses journaled results when a session is resumed.

A probe is known by its stage, its knob values and its ranks (the
candidate's own, else the session's world size), so a resumed multi-rank
session tells the 1-rank reference apart from the N-rank probe of the same
values.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tuneup import __version__
from tuneup.config import first_uses
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset
from tuneup.probe.backend import ProbeBackend, as_backend
from tuneup.probe.estimate import (
    LadderShape,
    ProbeKind,
    StageShape,
    confirmation_pairs,
    duration_text,
    stage_shape,
)
from tuneup.probe.stats import median
from tuneup.probe.types import (
    BASELINE_STAGE,
    CONFIRM_STAGE,
    Candidate,
    ProbeResult,
    Status,
)
from tuneup.telemetry.sampler import Sampler
from tuneup.tuning.attempts import BASELINE_ATTEMPTS, attempt_again, place_of, replay_plan
from tuneup.tuning.control import (
    OutOfTime,
    Reporter,
    SessionControl,
    SessionInterrupted,
    SilentReporter,
)
from tuneup.tuning.grid import grid_search
from tuneup.tuning.guard import loss_verdict
from tuneup.tuning.journal import ResultsDir
from tuneup.tuning.ladder_record import LadderRecord, machine_tag
from tuneup.tuning.load import LoadBound
from tuneup.tuning.planner import LadderPlan
from tuneup.tuning.scaling_report import scaling_summary
from tuneup.tuning.search import partial_outcome, staged_search
from tuneup.tuning.search_records import SearchOutcome, SearchProgress, StageCut, StagePlan
from tuneup.tuning.summary_document import summary_dict
from tuneup.tuning.time_left import LadderClock

# A probe is started only with this much time to spare (SLURM then sends SIGTERM and,
# KillWait later, SIGKILL); the slowest probe so far is stretched by TIME_STRETCH.
TIME_MARGIN_S = 15.0
TIME_STRETCH = 1.25


@dataclass
class ProbeSession:
    """Runs one ladder; construct it with its backend, results folder and reporter."""

    preset: ProbePreset
    trainer: str
    backend: ProbeBackend  # a plain callable given here is wrapped once (as_backend)
    results: ResultsDir
    machine: MachineInfo
    base_values: dict[str, Any]
    plans: list[StagePlan]
    reporter: Reporter = field(default_factory=SilentReporter)
    search: str = "staged"
    seed: int = 0
    fresh_processes: bool = False  # as asked: recorded, so a resume runs probes alike
    confirm_pairs: int = 2
    # Two baseline probes: their pooled trials carry the probe-to-probe noise
    # (a new process, new allocations), not only the trial-to-trial noise.
    baseline_repeats: int = 2
    stop_requested: Callable[[], bool] = lambda: False
    control: SessionControl = field(default_factory=SessionControl)
    sampler: Sampler | None = None  # started by start(), stopped when run() ends
    # How the probes run on several GPUs, for session.json and the reporter: the
    # scheduler's job (JobEnv.to_dict()) and the launch, e.g. {"nproc": 4,
    # "nodes": 1, "world_size": 4, "launcher": "torchrun"}. None: not known.
    job: dict[str, Any] | None = None
    launch: dict[str, Any] | None = None
    # Seconds left in the allocation (None: no limit known); a probe that could not
    # finish in them is not started (OutOfTime).
    time_left: Callable[[], float | None] | None = None
    # The ladder's time budget in seconds from start() (the user's --budget, or the
    # allocation's time left; None: none), and the plan fitted to it (planner.py): stages
    # left out before the first probe, and kept to as the ladder goes (stage_gate).
    time_budget_s: float | None = None
    ladder_plan: LadderPlan | None = None
    # Why the ladder was stopped (a signal), for a partial summary; set by the front end.
    stop_reason: str = ""
    monotonic: Callable[[], float] = time.monotonic
    # Run before each probe: the data files are there (made again if tuneup's own, said);
    # raises DataGone when they are not and cannot be. None: no files to check.
    data_check: Callable[[], str | None] | None = None
    # On a resume: measure again every journaled failure (measure_again); else only those
    # whose cause may be gone.
    retry_failed: bool = False
    _journaled: dict[tuple[str, str], list[ProbeResult]] = field(default_factory=dict)
    _served: Counter = field(default_factory=Counter)
    # Journaled probes measured again on this resume, by place: why, in order
    _replacing: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    _baseline_losses: list[float] | None = None
    # Where this machine's ladder costs are kept for the next estimate (None: nowhere).
    record: LadderRecord | None = None
    _walls: list[float] = field(default_factory=list)
    # (knob, value) pairs with a first-use cost some probe of this session has paid
    _used: set[tuple[str, Any]] = field(default_factory=set)
    _done: int = 0
    _total: int = 0
    _deadline: float | None = None
    _progress: SearchProgress = field(default_factory=SearchProgress)
    _load: LoadBound = field(default_factory=LoadBound)

    def __post_init__(self) -> None:
        self.backend = as_backend(self.backend)
        planned = self.ladder_plan
        self.clock = LadderClock(
            trainer=self.trainer,
            preset=self.preset,
            # the stages the time budget's plan keeps (those it left out are priced at nothing)
            plans=[p for p in self.plans if planned is None or planned.reason(p.name) is None],
            search=self.search,
            baseline_repeats=self.baseline_repeats,
            confirm_pairs=self.confirm_pairs,
            shares_processes=not self.fresh_processes and self.machine.world_size == 1,
            machine=machine_tag(self.machine),
            record=self.record,
        )

    def session_info(self) -> dict[str, Any]:
        info = {
            "preset": self.preset.name,
            "preset_source": self.preset.source or self.preset.name,
            # kept whole, so the session resumes when the preset's file has moved away
            "preset_document": self.preset.document,
            "trainer": self.trainer,
            "search": self.search,
            "seed": self.seed,
            "fresh_processes": self.fresh_processes,
            "stages": [p.name for p in self.plans],
            "machine": self.machine.to_dict(),
            "base_config": self.base_values,
            "budget": self.preset.budget.to_dict(),
            "hints": self.preset.hints,
            "job": self.job,
            "launch": self.launch,
            "tuneup_version": __version__,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        section = self.preset.sections.get(self.trainer)
        if section is not None and self.trainer not in info:  # the trainer's, as measured
            info[self.trainer] = dict(section)
        return info

    def start(self, resume: bool) -> None:
        """Create the results folder, or check a resumed one matches and load its journal."""
        if resume:
            previous = self.results.session()
            for key, mine in (("preset", self.preset.name), ("trainer", self.trainer)):
                if previous.get(key) != mine:
                    raise UsageError(
                        f"cannot resume {self.results.path}: it was a {key} "
                        f"'{previous.get(key)}' session, not '{mine}' (drop --{key} or "
                        "start a new session with --out)"
                    )
            self.results.repair()
            replay = replay_plan(self.results.results(), self.retry_failed)
            self._journaled, self._replacing = replay.journaled, replay.replacing
            note = replay.note(self.retry_failed)
            if note:
                self._note(note)
        else:
            self.results.create(self.session_info())
        if self.time_budget_s is not None:
            self._deadline = self._now() + self.time_budget_s
        left = self.clock.left(None, self.clock.costs())
        self._total = left.probes
        # what a busy machine may spoil: as long again as the ladder's estimate (load.py)
        estimate = self.ladder_plan.estimate_s if self.ladder_plan is not None else None
        if estimate is None:
            estimate = self.clock.seconds_left(None)[0]
        self._load = LoadBound.for_estimate(estimate, say=self._note)
        self.reporter.session_start(self.session_info(), self._total)
        if not self._journaled:  # a resume's replayed probes take no time: said after a real one
            self._say_time_left(None)
        if self.sampler is not None:
            self.sampler.start()

    def _note(self, line: str) -> None:
        """A line for the user, where the front end has a place for one."""
        note = getattr(self.reporter, "note", None)
        if note is not None:
            note(line)

    def _check_data(self) -> bool:
        """The data check before a probe (data_check); True when the data was made again."""
        if self.data_check is None:
            return False
        said = self.data_check()
        if said:
            self._note(said)
        return bool(said)

    def measure(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        """The search's measure: reuse a journaled probe, or run, guard and journal one."""
        ranks = candidate.ranks or self.machine.world_size
        key = place_of(stage, values, ranks)
        served = self._served[key]
        self._served[key] += 1
        earlier = self._journaled.get(key, [])
        if served < len(earlier):
            result = earlier[served]
            self.backend.replayed(stage, candidate, values)  # one that keeps count follows
            self._remember_baseline(stage, result)
            self._walls.append(result.wall_s)
            self._report(stage, result, reused=True)
            return result
        self.control.wait_if_paused()
        if self.stop_requested() or self.control.stopped:
            raise SessionInterrupted
        self._check_time(stage, values)
        self.control.current_stage = stage
        if self.control.skipping(stage):
            result = ProbeResult(
                stage,
                dict(candidate.values),
                values,
                Status.SKIPPED,
                "skipped by the user",
                ranks=ranks,
            )
            self._report(stage, result, reused=False)
            return result
        self._check_data()
        attempts = [self._run(stage, candidate, values, ranks)]
        while attempt_again(stage, attempts) or (
            # the data it reads went and was made again: once more, never without end
            not attempts[-1].ok and len(attempts) <= BASELINE_ATTEMPTS and self._check_data()
        ):
            failed = replace(attempts[-1], retried=True)
            self.results.append(failed)
            self._report(stage, failed, reused=False)
            self._check_time(stage, values)
            attempts.append(self._run(stage, candidate, values, ranks, again=failed.reason))
        result = attempts[-1]
        replacing = self._replacing.get(key)
        if replacing:
            result = replace(result, replaces=replacing.pop(0))
        self._used.update(first_uses(values))
        if not candidate.reference:  # noddp changes the arithmetic on purpose
            result = self._guard(stage, result, values)
        self._remember_baseline(stage, result)
        self.results.append(result)
        self._report(stage, result, reused=False)
        return result

    def _run(
        self, stage: str, candidate: Candidate, values: dict[str, Any], ranks: int, again: str = ""
    ) -> ProbeResult:
        label = f"{candidate.label} (again, after: {again})" if again else candidate.label
        self.reporter.probe_start(stage, label)
        # the probe's own files (its spec, its logs) may be refused by the storage
        with self.results.storing("probes", "a probe's files in"):
            result = self.backend(stage, candidate, values)
        if self.stop_requested() or self.control.stopped:
            raise SessionInterrupted  # the probe was cut short: not journaled
        if result.ranks == 1 and not result.rank_sps:
            # A backend that does not report ranks (a failed launch, a plain command):
            # journal what was asked for, so a resume finds this probe again.
            result = replace(result, ranks=ranks)
        self._walls.append(result.wall_s)
        return result

    def _check_time(self, stage: str = "", values: dict[str, Any] | None = None) -> None:
        """Refuse to start a probe the allocation's time limit or the time budget would cut
        short. Under the time budget a stage's probe ends its stage (StageCut: the
        confirmation keeps its time), the confirmation's ends the confirmation with the pairs
        it has (StageCut: unresolved), the baseline's ends the ladder (OutOfTime); so does any
        probe the allocation's end would cut (a resume in a new allocation goes on)."""
        measured = [w for w in self._walls if w > 0]
        left = self.time_left() if self.time_left is not None else None
        if left is not None:
            # The backend's own limit where it has one (the command trainer's command.limit_s).
            limit = self.backend.limit_s or self.preset.budget.limit_s
            need = TIME_STRETCH * max(measured) if measured else limit
            if left < need + TIME_MARGIN_S:
                raise OutOfTime(max(left, 0.0), need, bool(measured))
        if self._deadline is None or not measured:
            return
        budget_left = self._deadline - self._now()
        # A value whose first use costs extra (a cold torch.compile) and that no probe of
        # this session used yet: its cost, as its knob declares it, on top of a probe's.
        fresh = {k: s for k, s in first_uses(values or {}).items() if k not in self._used}
        need = TIME_STRETCH * median(measured[-5:]) + sum(fresh.values())
        if stage == BASELINE_STAGE:
            if budget_left < need:
                raise OutOfTime(max(budget_left, 0.0), need, True, "in the time budget")
            return
        if stage == CONFIRM_STAGE:
            if budget_left < need:
                raise StageCut(
                    f"{duration_text(max(budget_left, 0.0))} left in the time budget, a probe "
                    f"takes about {duration_text(need)}"
                )
            return
        reserve = self._confirmation_s()
        if budget_left < need + reserve:
            raise StageCut(
                f"the time budget has {duration_text(max(budget_left, 0.0))} left, kept for "
                f"the confirmation (about {duration_text(reserve)})"
            )

    def _now(self) -> float:
        """The time-budget clock: a simulated trainer's is its probes' own simulated time
        (so `--budget` rehearses what the ladder would leave out), else `monotonic`."""
        if self.clock.simulated:
            return sum(self._walls)
        return self.monotonic()

    def _confirmation_s(self) -> float:
        """The confirmation's expected time, kept back from the stages under a time budget."""
        costs = self.clock.costs()
        pairs = confirmation_pairs(self.confirm_pairs, self.clock.habits(CONFIRM_STAGE))
        shape = LadderShape({ProbeKind(("full",)): 2.0 * pairs})
        return shape.seconds(self.preset.budget, costs)

    def stage_gate(self, plan: StagePlan) -> str | None:
        """Why a stage is left out when its turn comes: it does not fit the time budget's
        remainder, less the confirmation's time (or the plan made before the first probe
        left it out); None to run it."""
        planned = self.ladder_plan.reason(plan.name) if self.ladder_plan is not None else None
        if planned is not None:
            return planned
        if self._deadline is None or not self._walls:
            return None
        left = self._deadline - self._now()
        costs = self.clock.costs()
        shape = StageShape(plan.name, len(plan.candidates), plan.judged, plan.expected_gain)
        need = stage_shape(shape, self.clock.habits(plan.name)).seconds(self.preset.budget, costs)
        firsts: dict[tuple[str, Any], float] = {}
        for cand in plan.candidates:
            firsts.update(first_uses(cand.values))
        need += sum(s for k, s in firsts.items() if k not in self._used)
        reserve = self._confirmation_s()
        if left >= need + reserve:
            return None
        return (
            f"left out: the time budget has {duration_text(max(left, 0.0))} left, and the "
            f"stage needs about {duration_text(need)} besides the confirmation's "
            f"{duration_text(reserve)}"
        )

    def _report(self, stage: str, result: ProbeResult, reused: bool) -> None:
        self._done += 1
        self.clock.heard(stage, result)
        left = self.clock.left(stage, self.clock.costs())
        total = self._done + left.probes
        if total != self._total:  # said before the line that would have run past it
            self._total = total
            self.reporter.total_changed(total)
        if not reused:
            self._say_time_left(stage)
        self.reporter.probe_done(result, reused=reused)

    def _say_time_left(self, stage: str | None) -> None:
        """Tell the reporter the time left after one of `stage` (None: before the first);
        never for a simulated trainer."""
        if not self.clock.simulated:
            seconds, basis = self.clock.seconds_left(stage)
            self.reporter.time_left(seconds, basis)

    def _guard(self, stage: str, result: ProbeResult, values: dict[str, Any]) -> ProbeResult:
        """The loss guard, applied here, before journaling, so the journal says `diverged`;
        the search is told so (`guard=False`) and does not judge the loss again."""
        if not result.ok:
            return result
        baseline = None if stage == "baseline" else self._baseline_losses
        reason = loss_verdict(result.losses, values, baseline, self.base_values)
        if not reason:
            return result
        return replace(result, status=Status.DIVERGED, reason=reason)

    def _remember_baseline(self, stage: str, result: ProbeResult) -> None:
        if stage == "baseline" and result.ok and self._baseline_losses is None:
            self._baseline_losses = list(result.losses)

    def run(self) -> SearchOutcome:
        """Run the ladder and write summary.json; a ladder stopped before its end (a signal,
        the time budget, the allocation) writes one too, marked partial, with the best
        configuration its stages' pairs upheld so far, and re-raises."""
        try:
            if self.search == "grid":
                outcome = grid_search(self.base_values, self.plans, self.measure, guard=False)
            else:
                outcome = staged_search(
                    self.base_values,
                    self.plans,
                    self.measure,
                    confirm_pairs=self.confirm_pairs,
                    baseline_repeats=self.baseline_repeats,
                    guard=False,  # measure() guards, before journaling
                    progress=self._progress,
                    before_stage=self.stage_gate,
                    load=self._load,
                )
        except SessionInterrupted as stop:
            self._write_partial(stop)
            raise
        finally:
            self.backend.close()  # the ladder is over: a serving worker it kept goes
            if self.sampler is not None:
                self.sampler.stop()
        if self._total != self._done:  # the ladder is over: the count is exact now
            self._total = self._done
            self.reporter.total_changed(self._done)
        self.clock.keep()
        self._write_summary(outcome)
        return outcome

    def _write_summary(self, outcome: SearchOutcome) -> None:
        summary = summary_dict(outcome)
        summary["preset"] = self.preset.name
        summary["preset_source"] = self.preset.source or self.preset.name  # a resume finds it
        summary["trainer"] = self.trainer
        summary["scaling"] = scaling_summary(
            summary.get("ddp"),
            outcome.best_values,
            self.preset.hints,
            nodes=self.machine.nodes,
            ranks_per_node=self.machine.ranks_per_node,
        )
        if self.ladder_plan is not None:
            summary["time_budget"] = {
                "limit_s": self.ladder_plan.limit_s,
                "estimate_s": self.ladder_plan.estimate_s,
                "left_out": list(outcome.left_out),
                "planned_out": [name for name, _, _ in self.ladder_plan.left_out],
                "trial_s": self.ladder_plan.budget.trial_s,
            }
        self.results.write_summary(summary)

    def _write_partial(self, stop: SessionInterrupted) -> None:
        """summary.json of a ladder stopped before its end (the staged search's progress)."""
        if self.search != "staged":
            return
        why = self.stop_reason or "stopped by the user"
        if isinstance(stop, OutOfTime):
            why = f"stopped: {stop.left_s:.0f} s were left {stop.where}"
        stage = self._progress.stage
        if stage in (BASELINE_STAGE, CONFIRM_STAGE):
            why += f" during the {stage}"
        elif stage is not None:
            why += f" during stage {stage}"
        outcome = partial_outcome(self._progress, why, [p.name for p in self.plans])
        if outcome is not None:
            self._write_summary(outcome)
