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
from tuneup.probe.batches import config_batch
from tuneup.probe.confine import confinement_line
from tuneup.probe.types import (
    BASELINE_STAGE,
    CONFIRM_STAGE,
    USER_SKIP,
    Candidate,
    ProbeResult,
    Status,
)
from tuneup.telemetry.sampler import Sampler
from tuneup.trainers.adapters import TrainerAdapter
from tuneup.tuning.clock.ladder_record import LadderRecord, machine_tag
from tuneup.tuning.clock.planner import SHORTEST_TRIAL_SHARE
from tuneup.tuning.clock.time_left import LadderClock, known_costs
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.journal_check import SESSION_ID, new_session_id
from tuneup.tuning.results.scaling_report import scaling_summary
from tuneup.tuning.results.summary_document import summary_dict, targets_block
from tuneup.tuning.search.grid import grid_search
from tuneup.tuning.search.guard import loss_verdict
from tuneup.tuning.search.load import LoadBound
from tuneup.tuning.search.search_records import SearchOutcome, SearchProgress, StagePlan
from tuneup.tuning.search.staged import partial_outcome, staged_search
from tuneup.tuning.session.attempts import BASELINE_ATTEMPTS, attempt_again, place_of, replay_plan
from tuneup.tuning.session.control import (
    OutOfTime,
    Reporter,
    SessionControl,
    SessionInterrupted,
    SilentReporter,
    StopRequest,
)
from tuneup.tuning.session.realdata import RealData
from tuneup.tuning.session.session_terms import Layout, ResumeTerms, SearchTerms, TimeTerms
from tuneup.tuning.session.setting import SETTING, Setting, record_changes
from tuneup.tuning.session.time_gate import TimeGate


@dataclass
class ProbeSession:
    """Runs one ladder; construct it with its backend, results folder and reporter."""

    preset: ProbePreset
    adapter: TrainerAdapter  # the session's trainer, loaded once (its name: `trainer`)
    backend: ProbeBackend  # a plain callable given here is wrapped once (as_backend)
    results: ResultsDir
    machine: MachineInfo
    base_values: dict[str, Any]
    plans: list[StagePlan]
    reporter: Reporter = field(default_factory=SilentReporter)
    terms: SearchTerms = field(default_factory=SearchTerms)
    stop: StopRequest = field(default_factory=StopRequest)  # asked by a signal handler
    control: SessionControl = field(default_factory=SessionControl)
    sampler: Sampler | None = None  # started by start(), stopped when run() ends
    layout: Layout = field(default_factory=Layout)
    timing: TimeTerms = field(default_factory=TimeTerms)
    # Run before each probe: the data files are there (made again if tuneup's own, said);
    # raises DataGone when they are not and cannot be. None: no files to check.
    data_check: Callable[[], str | None] | None = None
    again: ResumeTerms = field(default_factory=ResumeTerms)
    # The machine and software it measures in (tuneup.tuning.session.setting), recorded in
    # session.json and stamped on each probe; None: not recorded.
    setting: Setting | None = None
    # The data the real run reads (realdata.py): each probe's model peak is kept, and a
    # candidate whose loader cannot hold it beside its own peak is never adopted. None:
    # nothing to weigh.
    real_data: RealData | None = None
    # Its id (session.json's), stamped on each probe it journals: a resume tells a line
    # copied from another session's journal apart (tuning.journal_check).
    session_id: str = field(default_factory=new_session_id)
    _journaled: dict[tuple[str, str], list[ProbeResult]] = field(default_factory=dict)
    _served: Counter = field(default_factory=Counter)
    # Journaled probes measured again on this resume, by place: why, in order
    _replacing: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    _baseline_losses: list[float] | None = None
    # Where this machine's ladder costs are kept for the next estimate (None: nowhere).
    record: LadderRecord | None = None
    _walls: list[float] = field(default_factory=list)
    _done: int = 0
    _total: int = 0
    _progress: SearchProgress = field(default_factory=SearchProgress)
    _load: LoadBound = field(default_factory=LoadBound)
    _confined_said: bool = False

    def __post_init__(self) -> None:
        self.backend = as_backend(self.backend)
        planned = self.timing.plan
        self.clock = LadderClock(
            adapter=self.adapter,
            preset=self.preset,
            # the stages the time budget's plan keeps (those it left out are priced at nothing)
            plans=[p for p in self.plans if planned is None or planned.reason(p.name) is None],
            search=self.terms.search,
            baseline_repeats=self.terms.baseline_repeats,
            confirm_pairs=self.terms.confirm_pairs,
            shares_processes=not self.terms.fresh_processes and self.machine.world_size == 1,
            machine=machine_tag(self.machine),
            record=self.record,
            known=known_costs(self.adapter, self.base_values, self.preset.budget, self.machine),
            base_batch=config_batch(self.base_values),
        )
        budget = self.preset.budget
        shortest = self.timing.shortest_trial_s
        self.gate = TimeGate(
            self.clock,
            budget,
            budget.trial_s * SHORTEST_TRIAL_SHARE if shortest is None else shortest,
            confirm_pairs=self.terms.confirm_pairs,
            time_left=self.timing.allocation_left,
            whose=self.timing.limit_by,
            now=self._now,
            walls=self._walls,
        )

    @property
    def trainer(self) -> str:
        """The trainer's registered name (what the session's files record)."""
        return self.adapter.name

    def session_info(self) -> dict[str, Any]:
        info = {
            "preset": self.preset.name,
            "preset_source": self.preset.source or self.preset.name,
            # kept whole, so the session resumes when the preset's file has moved away
            "preset_document": self.preset.document,
            "trainer": self.trainer,
            # the format its exports start with: what every hint names (journal.export_hint)
            "export_format": next(iter(self.adapter.exports), "yaml"),
            "search": self.terms.search,
            "seed": self.terms.seed,
            "fresh_processes": self.terms.fresh_processes,
            "stages": [p.name for p in self.plans],
            "machine": self.machine.to_dict(),
            "base_config": self.base_values,
            "budget": self.preset.budget.to_dict(),
            "hints": self.preset.hints,
            "job": self.layout.job,
            "launch": self.layout.launch,
            "tuneup_version": __version__,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if self.setting is not None:
            info[SETTING] = self.setting.to_dict()
        info[SESSION_ID] = self.session_id
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
            self.session_id = str(previous.get(SESSION_ID) or self.session_id)  # the folder's
            self.results.repair()
            self._update_record(previous)
            again = self.again
            replay = replay_plan(self.results.results(), again.retry_failed, again.baseline_again)
            self._journaled, self._replacing = replay.journaled, replay.replacing
            note = replay.note(self.again.retry_failed)
            if note:
                self._note(note)
        else:
            self.results.create(self.session_info())
        self.gate.start(self.timing.budget_s)
        left = self.clock.left(None, self.clock.costs())
        self._total = left.probes
        # what a busy machine may spoil: as long again as the ladder's estimate (load.py)
        estimate = self.timing.plan.estimate_s if self.timing.plan is not None else None
        if estimate is None:
            estimate = self.clock.seconds_left(None)[0]
        self._load = LoadBound.for_estimate(estimate, say=self._note)
        self.reporter.session_start(self.session_info(), self._total)
        if not self._journaled:  # a resume's replayed probes take no time: said after a real one
            self._say_time_left(None)
        if self.sampler is not None:
            self.sampler.start()

    def _update_record(self, previous: dict[str, Any]) -> None:
        """session.json as this resume continues it (setting.record_changes); a session that
        records no setting (a summary rebuilt from the journal) leaves it as it was."""
        if self.setting is None:
            return
        changes = record_changes(previous, self.setting, self.session_id)
        if changes:
            self.results.update_session(changes)

    def _note(self, line: str) -> None:
        """A line for the user, which every front end has a place for."""
        self.reporter.note(line)

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
            result = replace(earlier[served], replayed=True)  # pairs only with its kind
            self.backend.replayed(stage, candidate, values)  # one that keeps count follows
            self._remember_baseline(stage, result)
            self._walls.append(result.wall_s)
            self._report(stage, result, reused=True)
            return result
        self.control.wait_if_paused()
        if self.stop.asked or self.control.stopped:
            raise SessionInterrupted
        candidate = self._timed(stage, candidate, values)
        self.control.current_stage = stage
        if self.control.skipping(stage):
            # journaled, so a resume replays the skip (attempts.measure_again) and never
            # measures what the user dropped
            dropped = ProbeResult(
                stage, dict(candidate.values), values, Status.SKIPPED, USER_SKIP, ranks=ranks
            )
            result = self._stamped(dropped)
            self.results.append(result)
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
            candidate = self._timed(stage, candidate, values)
            attempts.append(self._run(stage, candidate, values, ranks, again=failed.reason))
        result = attempts[-1]
        replacing = self._replacing.get(key)
        if replacing:
            result = replace(result, replaces=replacing.pop(0))
        self.gate.used.update(first_uses(values))
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
        if self.stop.asked or self.control.stopped:
            raise SessionInterrupted  # the probe was cut short: not journaled
        result = self._stamped(result)
        self._say_confined(result)
        if result.ranks == 1 and not result.rank_sps:
            # A backend that does not report ranks (a failed launch, a plain command):
            # journal what was asked for, so a resume finds this probe again.
            result = replace(result, ranks=ranks)
        self._walls.append(result.wall_s)
        return result

    def _say_confined(self, result: ProbeResult) -> None:
        """Say, once, that others' load made tuneup run its probes on fewer threads."""
        held = result.contention
        if held is not None and held.confined_threads and not self._confined_said:
            self._confined_said = True
            self._note(confinement_line(held))

    def _stamped(self, result: ProbeResult) -> ProbeResult:
        """The probe marked with the setting it ran in and this session's id, as journaled."""
        stamp = self.setting.digest() if self.setting is not None else ""
        return replace(result, setting=stamp, session=self.session_id)

    def _timed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> Candidate:
        """The candidate with the trials its time left allows (time_gate.py: shorter ones
        where only they fit; raises OutOfTime or StageCut where none does)."""
        trial = self.gate.trials_for(stage, candidate, values)
        return candidate if trial is None else replace(candidate, trial_s=trial)

    def _now(self) -> float:
        """The time-budget clock: a simulated trainer's is its probes' own simulated time
        (so `--budget` rehearses what the ladder would leave out), else `monotonic`."""
        if self.clock.simulated:
            return sum(self._walls)
        return self.timing.monotonic()

    def stage_gate(self, plan: StagePlan) -> str | None:
        """Why a stage is left out when its turn comes: the plan made before the first probe
        left it out, or it does not fit the time budget's remainder less the confirmation's
        time (time_gate.py); None to run it."""
        planned = self.timing.plan.reason(plan.name) if self.timing.plan is not None else None
        if planned is not None:
            return planned
        return self.gate.stage_gate(plan)

    def _report(self, stage: str, result: ProbeResult, reused: bool) -> None:
        if self.real_data is not None:
            self.real_data.heard(result)
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
        the search is told so (`guard=False`) and does not judge the loss again. Then the
        real data's weight: `oom` where its loader could not hold the run's boxes beside the
        model's peak it measured (realdata.py), so it is never adopted."""
        if not result.ok:
            return result
        baseline = None if stage == "baseline" else self._baseline_losses
        reason = loss_verdict(result.losses, values, baseline, self.base_values)
        if reason:
            return replace(result, status=Status.DIVERGED, reason=reason)
        heavy = None if self.real_data is None else self.real_data.after(stage, result, values)
        if heavy:  # it ran on the probes' box; the real one would not fit beside it
            return replace(result, status=Status.OOM, reason=heavy)
        return result

    def _remember_baseline(self, stage: str, result: ProbeResult) -> None:
        if stage == "baseline" and result.ok:
            self.gate.have_baseline = True  # the answer has its baseline: repeats may go
            if self._baseline_losses is None:
                self._baseline_losses = list(result.losses)

    def run(self) -> SearchOutcome:
        """Run the ladder and write summary.json; a ladder stopped before its end (a signal,
        the time budget, the allocation) writes one too, marked partial, with the best
        configuration its stages' pairs upheld so far, and re-raises."""
        try:
            if self.terms.search == "grid":
                outcome = grid_search(self.base_values, self.plans, self.measure, guard=False)
            else:
                outcome = staged_search(
                    self.base_values,
                    self.plans,
                    self.measure,
                    confirm_pairs=self.terms.confirm_pairs,
                    baseline_repeats=self.terms.baseline_repeats,
                    guard=False,  # measure() guards, before journaling
                    progress=self._progress,
                    before_stage=self.stage_gate,
                    load=self._load,
                    targets=self.adapter.targets,
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
        outcome.limit = self.timing.limit_by  # the words of what the limit left out
        if self.real_data is not None:  # each candidate not for the real data names the next best
            outcome.stage_decisions[:] = self.real_data.named(outcome.stage_decisions)
        summary = summary_dict(outcome)
        summary["preset"] = self.preset.name
        summary["preset_source"] = self.preset.source or self.preset.name  # a resume finds it
        summary["trainer"] = self.trainer
        if self.real_data is not None:
            real = self.real_data.block(outcome.best_values, outcome.stage_decisions)
            summary["real_data"] = real
        summary["targets"] = targets_block(outcome, self.adapter.own_target)
        summary["scaling"] = scaling_summary(
            summary.get("ddp"),
            outcome.best_values,
            self.preset.hints,
            nodes=self.machine.nodes,
            ranks_per_node=self.machine.ranks_per_node,
        )
        if self.timing.plan is not None:
            summary["time_budget"] = {
                "limit_s": self.timing.plan.limit_s,
                "estimate_s": self.timing.plan.estimate_s,
                "left_out": list(outcome.left_out),
                "planned_out": [name for name, _, _ in self.timing.plan.left_out],
                "planned_fewer": {name: list(left) for name, left, _ in self.timing.plan.trimmed},
                "trial_s": self.timing.plan.budget.trial_s,
                "limited_by": self.timing.limit_by,
            }
        self.results.write_summary(summary)

    def _write_partial(self, stop: SessionInterrupted) -> None:
        """summary.json of a ladder stopped before its end (the staged search's progress)."""
        if self.terms.search != "staged":
            return
        why = self.stop.why or "stopped by the user"
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
