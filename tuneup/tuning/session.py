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

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from tuneup import __version__
from tuneup.cluster import shm  # a module, so tests can stand in for /dev/shm
from tuneup.config import first_uses
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.paths import is_storage_error
from tuneup.preset.load import ProbePreset, preset_stage
from tuneup.probe.backend import ProbeBackend, as_backend
from tuneup.probe.describe import variant_text
from tuneup.probe.estimate import (
    LadderShape,
    ProbeKind,
    StageShape,
    confirmation_pairs,
    duration_text,
    stage_shape,
)
from tuneup.probe.stages import load_stage
from tuneup.probe.stats import median
from tuneup.probe.types import (
    BASELINE_STAGE,
    CONFIRM_STAGE,
    PHASES,
    Candidate,
    ProbeResult,
    Status,
    probe_key,
)
from tuneup.telemetry.sampler import Sampler
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.grid import grid_search
from tuneup.tuning.guard import loss_verdict
from tuneup.tuning.journal import ResultsDir
from tuneup.tuning.ladder_record import LadderRecord, machine_tag
from tuneup.tuning.planner import LadderPlan
from tuneup.tuning.preflight import loader_shm_problem
from tuneup.tuning.scaling_report import scaling_summary
from tuneup.tuning.search import partial_outcome, staged_search
from tuneup.tuning.search_records import SearchOutcome, SearchProgress, StageCut, StagePlan
from tuneup.tuning.time_left import LadderClock
from tuneup.tuning.verdicts import summary_dict

if TYPE_CHECKING:
    from tuneup.hardware.types import GpuBackend


class SessionInterrupted(Exception):
    """The user stopped the session; everything finished so far is journaled."""


class OutOfTime(SessionInterrupted):
    """The allocation (or the time budget) ends before the next probe could finish: it was
    not started."""

    def __init__(
        self, left_s: float, need_s: float, measured: bool, where: str = "in the allocation"
    ) -> None:
        self.left_s = left_s
        self.need_s = need_s
        self.where = where
        how = "the slowest probe so far, with a margin" if measured else "its time limit"
        super().__init__(
            f"{left_s:.0f} s left {where}, and the next probe may take "
            f"{need_s:.0f} s ({how}): not started"
        )


class DataGone(SessionInterrupted):
    """A data file the probes read went away mid-ladder and tuneup cannot make it again:
    the ladder stops (a partial summary) rather than fail every later probe."""


def measure_again(result: ProbeResult, retry_all: bool) -> str:
    """Why a journaled probe is measured again on a resume ("" to replay it).

    Always: a failed baseline (nothing is decided without it) and a failure that need not
    happen again (killed by a signal, an NCCL timeout). With `retry_all`
    (`--retry-failed`): every failure but a diverged loss or the user's skip, and a probe
    that ran contended.
    """
    if result.ok:
        return "it ran contended" if retry_all and result.contended else ""
    if result.status in (Status.SKIPPED, Status.DIVERGED):
        return ""
    said = f"{result.status.value}{f': {result.reason}' if result.reason else ''}"
    if result.stage == BASELINE_STAGE or result.transient or retry_all:
        return said
    return ""


# A probe is started only with this much time to spare (SLURM then sends SIGTERM and,
# KillWait later, SIGKILL); the slowest probe so far is stretched by TIME_STRETCH.
TIME_MARGIN_S = 15.0
TIME_STRETCH = 1.25


class SessionControl:
    """What a front end may ask of a running session, from any thread.

    `pause()` holds the ladder before its next probe (the running one finishes),
    `skip_stage()` drops the rest of the current stage, `stop()` ends the session
    after the running probe is interrupted (the caller also interrupts the
    backend); finished probes stay journaled and `--resume` continues.
    """

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._skip_stage: str | None = None
        self.current_stage: str | None = None

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()  # wake a paused ladder so it can end

    def skip_stage(self) -> None:
        self._skip_stage = self.current_stage

    def wait_if_paused(self) -> None:
        while not self._running.wait(timeout=0.1):
            if self._stop.is_set():
                return

    def skipping(self, stage: str) -> bool:
        return stage == self._skip_stage and stage not in ("baseline", "confirm")


class Reporter(Protocol):
    """What a front end (plain lines, rich bars, JSON, the app) hears from a session."""

    def session_start(self, info: dict[str, Any], total: int) -> None: ...

    def probe_start(self, stage: str, label: str) -> None: ...

    def probe_done(self, result: ProbeResult, reused: bool) -> None: ...

    def total_changed(self, total: int) -> None:
        """The expected number of probes changed: re-measures and extra pairs made the
        ladder longer, quick decisions shorter, or it ended (the exact count)."""
        ...

    def time_left(self, seconds: float, basis: str) -> None:
        """The ladder's expected time left, after each probe (and at the start), and what it
        rests on in words ("measured here", or the preset's costs, a record, a guess)."""
        ...

    # Optional: `note(line)`, something the session did on its own that the user must know
    # (data made again, journaled failures measured again); a reporter without it hears none.


class SilentReporter:
    """Hears nothing: for tests and `--json`."""

    def session_start(self, info: dict[str, Any], total: int) -> None:
        pass

    def total_changed(self, total: int) -> None:
        pass

    def time_left(self, seconds: float, basis: str) -> None:
        pass

    def probe_start(self, stage: str, label: str) -> None:
        pass

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        pass


def _comparable(result: ProbeResult) -> bool:
    """It ran ok with nothing else loading the machine: a figure a decision may use."""
    return result.ok and not result.contended


def _key(stage: str, values: dict[str, Any], ranks: int) -> tuple[str, str]:
    """A journaled probe's place: its stage and its identity (types.probe_key)."""
    return stage, probe_key(values, ranks)


BASELINE_ATTEMPTS = 3  # the baseline is given up only when it fails the same way twice


def _again(stage: str, attempts: list[ProbeResult]) -> bool:
    """Whether a failed probe is run again: once after a transient failure (killed by a
    signal, an NCCL timeout); the baseline, which every decision needs, until it fails
    the same way twice."""
    last = attempts[-1]
    if last.ok or last.status in (Status.SKIPPED, Status.UNSUPPORTED):
        return False
    if stage == "baseline":
        earlier = {(a.status, a.reason) for a in attempts[:-1]}
        return len(attempts) < BASELINE_ATTEMPTS and (last.status, last.reason) not in earlier
    return len(attempts) == 1 and last.transient


def shm_free_for(trainer: str) -> int | None:
    """Bytes free in /dev/shm where the trainer's loader workers use it (data_files); else None."""
    if not load_trainer(trainer).data_files:
        return None

    return shm.shm_free_bytes()


def _judged(
    declared: str, phases: tuple[str, ...], values: dict[str, Any], machine: MachineInfo
) -> str:
    """The phase a stage is judged on here (stage_plans says why it may differ)."""
    if declared not in phases:
        return "full"
    device = str(values.get("device", "auto"))
    on_cpu = device == "cpu" or (device == "auto" and not machine.cuda)
    return "full" if declared == "io" and on_cpu else declared


def stage_plans(
    names: tuple[str, ...],
    machine: MachineInfo,
    base: dict[str, Any],
    preset: ProbePreset | None = None,
    shm_free: int | None = None,
    phases: tuple[str, ...] = PHASES,
) -> list[StagePlan]:
    """The preset's ladder as search plans; an unavailable stage carries its reason.

    Each plan re-proposes on the incumbent when its turn comes, so a stage sees
    what earlier stages adopted. With `preset`, a stage it gives candidate
    values for proposes those instead of its own. With `shm_free` (bytes in
    /dev/shm), a candidate whose loader workers would not fit there is not tried.
    A stage is judged on the phase it declares where the trainer measures that
    phase apart (`phases`), else on FULL. A loader's stage is judged on FULL where
    the model runs on the CPU: the loader's workers and the model then take turns
    on the same cores, and a loader that delivers no more alone may still leave the
    model more of them (on a 2-core machine DALI's CPU pipeline lifts FULL 4% with
    an IO 20% under the DataLoader's).
    """

    if preset is not None:

        def load(name: str) -> Any:
            return preset_stage(name, preset)
    else:
        load = load_stage

    def plan_for(stage: Any, values: dict[str, Any]) -> StagePlan:
        proposal = stage.propose(machine, values)
        not_tried = [f"{label}: {why}" for label, why in proposal.rejected]
        candidates = []
        for cand in proposal.candidates:
            merged = {**values, **cand.values}
            problem = loader_shm_problem(merged, machine.ranks_per_node, shm_free)
            if problem is None:
                candidates.append(cand)
            else:
                not_tried.append(f"{cand.label}: {problem}")
        reason = proposal.reason
        if reason is None and not candidates:
            reason = "no candidate fits in /dev/shm"
        return StagePlan(
            name=proposal.stage,
            candidates=candidates,
            skip_reason=reason,
            not_tried=not_tried,
            refresh=lambda incumbent: plan_for(stage, incumbent),
            judged=_judged(stage.judged_on, phases, values, machine),
            expected_gain=stage.expected_gain,
        )

    return [plan_for(load(name), base) for name in names]


# A FULL phase lasts 1.5-4 s on a GPU: at 0.5 s it would get 3-8 readings.
PROBE_SAMPLE_INTERVAL_S = 0.2
PROBE_SAMPLE_HISTORY_S = 20 * 60  # a probe's FULL window must still be held when it ends


def gpu_sampler(
    trainer: str, gpu_backend: GpuBackend | None, interval_s: float = PROBE_SAMPLE_INTERVAL_S
) -> Sampler | None:
    """A sampler for the session's probes: a trainer with `gpu_telemetry`, on a machine with GPUs.

    Pass it to both the WorkerBackend (which joins it to each probe) and the
    ProbeSession (which starts it with the session and stops it at the end).
    """
    if gpu_backend is None or not load_trainer(trainer).gpu_telemetry:
        return None
    ok, _why = gpu_backend.available()
    if not ok or not gpu_backend.devices():
        return None

    capacity = int(PROBE_SAMPLE_HISTORY_S / interval_s)
    return Sampler(gpu_backend, interval_s=interval_s, capacity=capacity)


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
            for result in self.results.results():
                if result.retried:  # a failed attempt the next line of its probe replaces
                    continue
                place = _key(result.stage, result.config, result.ranks)
                found = self._journaled.setdefault(place, [])
                spot = (
                    next((i for i, r in enumerate(found) if not _comparable(r)), None)
                    if result.replaces
                    else None
                )
                if spot is None:
                    found.append(result)
                else:  # measured again on an earlier resume: in the failure's place
                    found[spot] = result
            self._forget_failures()
        else:
            self.results.create(self.session_info())
        if self.time_budget_s is not None:
            self._deadline = self._now() + self.time_budget_s
        left = self.clock.left(None, self.clock.costs())
        self._total = left.probes
        self.reporter.session_start(self.session_info(), self._total)
        if not self._journaled:  # a resume's replayed probes take no time: said after a real one
            self._say_time_left(None)
        if self.sampler is not None:
            self.sampler.start()

    def _forget_failures(self) -> None:
        """Leave out of the replay the journaled probes to measure again (measure_again),
        and say which and why."""
        again: list[str] = []
        for place, found in self._journaled.items():
            keep = []
            for result in found:
                why = measure_again(result, self.retry_failed)
                if why:
                    self._replacing.setdefault(place, []).append(why)
                    again.append(f"{result.stage} {variant_text(result)} ({why})")
                else:
                    keep.append(result)
            found[:] = keep
        if again:
            self._note(
                f"measuring again {len(again)} journaled probe(s) that failed"
                f"{' or ran contended' if self.retry_failed else ''}: "
                + "; ".join(again[:4])
                + (f"; and {len(again) - 4} more" if len(again) > 4 else "")
            )
        elif not self.retry_failed and any(
            not _comparable(r) and r.status is not Status.SKIPPED
            for found in self._journaled.values()
            for r in found
        ):
            self._note(
                "journaled failures are replayed as they were: --retry-failed measures them again"
            )

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
        key = _key(stage, values, ranks)
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
        while _again(stage, attempts) or (
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
        try:
            result = self.backend(stage, candidate, values)
        except OSError as exc:  # the probe's own files (its spec, its logs) could not be written
            if not is_storage_error(exc):
                raise
            raise self.results.fault(exc, "probes", "a probe's files in") from None
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
