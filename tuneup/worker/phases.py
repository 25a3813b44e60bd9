"""Measuring one probe by its plan: fixed-seed loss, warm-up to a steady step, timed phases.

The plan (tuneup.probe.plan) decides what is measured and how long; this
module carries it out, in this order:

1. **Loss.** The first ``loss_steps`` steps are real training steps (loader,
   device copy, graph capture, learning rate, step) from the freshly built,
   fixed-seed model, so step *n* of any probe is comparable with step *n* of
   the baseline whatever the probe changed in the arithmetic (TF32, AMP,
   fused Adam, JIT, graphs). The loss tensors stay on the device and are read
   back once, after the last of them. When FULL is measured they open its
   warm-up; a probe of SYNTHETIC alone runs them first, apart; a probe of IO
   alone trains nothing and records none.
2. **Each phase** in the plan's order (FULL, IO, SYNTHETIC): a warm-up (the
   first step alone, then windows of about a quarter of a trial, synchronised
   at window edges only, until two in a row agree, or the plan's time cap),
   then trials of ``trial_s`` seconds each, their steps from the steady step,
   synchronised at trial edges only, until the plan has enough (they agree
   within ``trial_noise``, or ``max_trials``). IO moves loader batches to the
   device without the model; SYNTHETIC runs one cached device batch through
   the step; FULL is the real loop. Samples/s count the global batch (all
   ranks).

Several ranks: at each trial (and warm-up window) edge, every rank's seconds
are gathered (one collective, outside the timed span) and the slowest rank's
set the job's samples/s. The result also gives each rank's own FULL rate
(``rank_sps``: its local batch over its own seconds) and the ``stragglers``:
ranks whose median FULL trial takes more than :data:`STRAGGLER_THRESHOLD`
longer than the median rank's. Under DDP the ranks wait for each other at
every step's gradient all-reduce, so their FULL times agree up to the trial
edges and a slow rank slows them all alike; stragglers show plainly where
ranks do not synchronise (``noddp``).

One-time costs are reported apart from the measurement (``one_time_s``):
``spawn`` (process start to setup built, in a fresh process) or ``setup`` (the
spec read to setup built, in a process that served probes before),
``graph_capture`` (CUDA graph capture, when on), and ``first_steps``: what the
warm-ups took beyond their steps at the steady step time, i.e. compilation,
cuDNN's execution plans, loader start-up and allocator growth.
``break_even_steps`` is their sum in steady steps: a run shorter than that
spends more time starting than training.

Early stop: a plan with a bar (``stop_below_sps``: a stage's candidate whose
incumbent is known) ends its judged phase's trials once they are clearly
short of it (``stats.clearly_slower``: the best of at least two trials below
it) and measures no other phase; the result says so in ``stopped_early``.

The result records the plan, with the steps per trial and the warm-up seconds
each phase took (``plan``), so every figure can be traced to how it was made.

Everything is driven through two small interfaces, :class:`Timer` (clock and
device sync) and :class:`Workload` (the three kinds of work), so the rules
are tested with fakes (both in trials.py); :class:`DeviceTimer` and
:class:`SetupWorkload` (workload.py) bind them to a real
:class:`~tuneup.unet.build.TrainingSetup`. torch is imported only there.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.figures import WorkerFigures
from tuneup.probe.plan import MeasurementPlan, ordered
from tuneup.probe.stats import clearly_slower, early_stop_reason, iqr_pct, median
from tuneup.probe.types import PROFILE_MISSING
from tuneup.quoting import one_line
from tuneup.worker.profile import NO_BREAKDOWN
from tuneup.worker.trials import (
    Emit,
    Gather,
    Timer,
    Trial,
    Workload,
    far_count,
    one_rank,
    rank_rates,
    run_trials,
)
from tuneup.worker.warmup import (
    WarmupTracker,
    WarmupWork,
    break_even_steps,
    one_time_costs,
    warm_up,
)

Profiler = Callable[[int, float | None], dict[str, Any]]
"""``profile(steps, steady_step_s)``: a profile of that many FULL steps (worker/profile.py)."""


class _CountingGather:
    """``gather`` that remembers how many ranks answered last (the world size)."""

    def __init__(self, gather: Gather) -> None:
        self._gather = gather
        self.world = 1

    def __call__(self, seconds: float) -> list[float]:
        values = self._gather(seconds)
        self.world = len(values)
        return values


class _TimedTrials:
    """Passes events on, adding up the seconds of every trial (dropped ones too)."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.seconds = 0.0

    def emit(self, kind: str, **fields: Any) -> None:
        if kind == "trial":
            self.seconds += float(fields.get("seconds") or 0.0)
        self._emit(kind, **fields)


@dataclass
class _Measured:
    """What the phases gave so far, phase by phase."""

    rates: dict[str, list[float]] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)  # steps per trial, its last trial's
    warmups: dict[str, WarmupTracker] = field(default_factory=dict)
    full_trials: list[Trial] = field(default_factory=list)
    discarded: int = 0
    far: int = 0  # trials far from their siblings that stayed (trials.far_count)
    stopped_early: str = ""


def _works(workload: Workload) -> dict[str, WarmupWork]:
    return {
        "full": lambda steps, keep: workload.full(steps, keep_losses=keep),
        "io": lambda steps, keep: workload.io(steps),
        "synthetic": lambda steps, keep: workload.synthetic(steps),
    }


def _loss_apart(
    workload: Workload, steps: int, *, timer: Timer, emit: Emit, gather: Gather
) -> tuple[WarmupTracker, list[float]]:
    """The loss steps of a probe that does not measure FULL: the first alone (its one-time
    cost), the rest in one window; the losses read once, after the last."""
    tracker = WarmupTracker(tolerance=0.0, cap_s=0.0, min_steps=steps)
    for chunk in (1, steps - 1):
        if chunk <= 0:
            continue
        timer.sync()
        start = timer.now()
        workload.full(chunk, keep_losses=chunk)
        timer.sync()
        tracker.add(chunk, max(gather(timer.now() - start)))
    losses = workload.read_losses()
    for step, value in enumerate(losses, start=1):
        emit("loss", step=step, value=value)
    return tracker, losses


def run_probe(
    workload: Workload,
    plan: MeasurementPlan,
    *,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    start_costs: Mapping[str, float] | None = None,
    gather: Gather = one_rank,
    profile: Profiler | None = None,
) -> WorkerFigures:
    """Loss, then each phase's warm-up and trials; emits every event but ``start`` and returns
    the result.

    Args:
        workload: the work to time (a :class:`SetupWorkload` in the worker).
        plan: what to measure and how long (tuneup.probe.plan).
        samples_per_batch: the global batch, so samples/s are the job's.
        timer: clock and device sync.
        emit: event sink, ``emit(kind, **fields)``.
        start_costs: what starting cost before the first step, as the caller
            measured it (``spawn`` or ``setup``, see the module docstring).
        gather: every rank's seconds at a trial edge (a collective under DDP);
            the slowest rank's count. ``[seconds]`` on one rank.
        profile: where the plan asks for a profile (and the trials did not stop early),
            ``profile(steps, steady_step_s)`` profiles about a trial's FULL steps after
            the trials and returns their breakdown (worker/profile.py).
    """
    plan.check()
    gathered = _CountingGather(gather)
    timed = _TimedTrials(emit)
    measured, warm, losses, before = _phases(
        workload,
        plan,
        timer=timer,
        emit=emit,
        gathered=gathered,
        timed=timed,
        start_costs=start_costs,
        samples_per_batch=samples_per_batch,
    )
    result = _probe_result(
        workload,
        plan,
        warm,
        losses,
        measured,
        timed.seconds,
        before,
        samples_per_batch=samples_per_batch,
        world=gathered.world,
    )
    if plan.profile and profile is not None and not measured.stopped_early:
        steady = _steady(measured)
        taken = _profiled(profile, plan.trial_steps(steady, "full"), steady)
        result = dataclasses.replace(result, profile=taken)
    emit("result", **result.to_event())
    return result


def _profiled(profile: Profiler, steps: int, steady: float | None) -> dict[str, Any]:
    """The profile, or why there is none: its failure never costs the probe the figures its
    trials measured before it (the traceback goes to stderr, the probe's diagnostic log)."""
    try:
        return profile(steps, steady)
    except Exception as exc:
        traceback.print_exc()
        said = one_line(" ".join(str(exc).split()))[:300]
        return {PROFILE_MISSING: f"{NO_BREAKDOWN}the profile failed: {type(exc).__name__}: {said}"}


def _phases(
    workload: Workload,
    plan: MeasurementPlan,
    *,
    timer: Timer,
    emit: Emit,
    gathered: _CountingGather,
    timed: _TimedTrials,
    start_costs: Mapping[str, float] | None,
    samples_per_batch: int,
) -> tuple[_Measured, dict[str, Any], list[float], list[WarmupTracker]]:
    """The loss apart (where FULL is not first), then each phase's warm-up and trials: what
    they measured, the warm-up event, the losses and the trackers before the first phase."""
    works = _works(workload)
    began = timer.now()
    before: list[WarmupTracker] = []
    losses: list[float] = []
    if plan.loss_steps > 0 and ordered(plan.phases)[0] != "full":
        tracker, losses = _loss_apart(
            workload, plan.loss_steps, timer=timer, emit=emit, gather=gathered
        )
        before.append(tracker)
    measured = _Measured()
    warm: dict[str, Any] = {}
    for index, phase in enumerate(ordered(plan.phases)):
        workload.prepare(phase)
        first = index == 0
        loss_steps = plan.loss_steps if first and phase == "full" else 0
        tracker, phase_losses = warm_up(
            works[phase],
            plan,
            timer=timer,
            emit=emit,
            gather=gathered,
            loss_steps=loss_steps,
            read_losses=workload.read_losses,
            phase=phase,
        )
        measured.warmups[phase] = tracker
        if first:
            losses = phase_losses or losses
            warm = _warmup_event(
                workload, [*before, tracker], timer.now() - began, start_costs, emit
            )
        if not _trials(
            workload, plan, phase, tracker, measured, samples_per_batch, timer, timed, gathered
        ):
            break
    return measured, warm, losses, before


def _steady(measured: _Measured) -> float | None:
    """The steady step a profile's steps are counted from: FULL's, else the first measured."""
    for phase in ("full", *measured.warmups):
        tracker = measured.warmups.get(phase)
        if tracker is not None and tracker.steady_step_s:
            return tracker.steady_step_s
    return None


def _warmup_event(
    workload: Workload,
    trackers: list[WarmupTracker],
    seconds: float,
    start_costs: Mapping[str, float] | None,
    emit: Emit,
) -> dict[str, Any]:
    """Emit the ``warmup`` event: the probe's warm-up up to its first phase's trials."""
    one_time = one_time_costs(
        trackers, graph_capture_s=workload.graph_capture_s, start_costs=start_costs
    )
    steady = trackers[-1].steady_step_s
    warm = {
        "seconds": seconds,
        "steps": sum(t.steps for t in trackers),
        "steady_step_s": steady,
        "stable": trackers[-1].stable,
        "one_time_s": one_time,
        "break_even_steps": break_even_steps(one_time, steady),
    }
    emit("warmup", **warm)
    return warm


def _trials(
    workload: Workload,
    plan: MeasurementPlan,
    phase: str,
    tracker: WarmupTracker,
    measured: _Measured,
    samples_per_batch: int,
    timer: Timer,
    timed: _TimedTrials,
    gather: Gather,
) -> bool:
    """One phase's trials into `measured`; False when they stopped the probe early."""
    work = _works(workload)[phase]
    judged = phase == plan.judged
    trials = run_trials(
        phase,
        lambda steps: work(steps, 0),
        plan,
        steps=plan.trial_steps(tracker.steady_step_s, phase),
        samples_per_batch=samples_per_batch,
        timer=timer,
        emit=timed.emit,
        gather=gather,
        stop_below=plan.stop_below_sps if judged else None,
    )
    rates = [t.samples_per_s for t in trials]
    measured.rates[phase] = rates
    measured.steps[phase] = trials[-1].batches if trials else 0
    measured.discarded += max(t.index for t in trials) - len(trials) if trials else 0
    measured.far += far_count(rates)
    if phase == "full":
        measured.full_trials = trials
    if judged and not plan.enough_trials(rates) and clearly_slower(rates, plan.stop_below_sps):
        assert plan.stop_below_sps is not None
        left = [p for p in plan.phases if p not in measured.rates]
        measured.stopped_early = early_stop_reason(rates, phase, plan.stop_below_sps, left)
        return False
    return True


def _probe_result(
    workload: Workload,
    plan: MeasurementPlan,
    warm: Mapping[str, Any],
    losses: list[float],
    measured: _Measured,
    timed_s: float,
    before: list[WarmupTracker],
    *,
    samples_per_batch: int,
    world: int,
) -> WorkerFigures:
    """The probe's figures (its ``result`` event), from the warm-ups and the phases."""
    rates = measured.rates
    full = rates.get("full", [])
    rank_sps, stragglers = rank_rates(measured.full_trials, samples_per_batch / world)
    warmups = measured.warmups
    record = {
        **plan.to_dict(),
        "steps": dict(measured.steps),
        "warmup_s": {p: t.seconds for p, t in warmups.items()},
        "stable": {p: t.stable for p, t in warmups.items()},
    }
    if before:
        record["loss_s"] = sum(t.seconds for t in before)
    return WorkerFigures(
        io_sps=median(rates["io"]) if rates.get("io") else None,
        synthetic_sps=median(rates["synthetic"]) if rates.get("synthetic") else None,
        full_sps=median(full) if full else None,
        full_sps_trials=tuple(full),
        io_sps_trials=tuple(rates.get("io", [])),
        synthetic_sps_trials=tuple(rates.get("synthetic", [])),
        iqr_pct=iqr_pct(full) if full else None,
        loss_start=losses[0] if losses else None,
        loss_end=losses[-1] if losses else None,
        losses=tuple(losses),
        scaler_overflows=workload.scaler_overflows,
        mem_peak_mb=workload.mem_peak_mb(),
        warmup_s=sum(t.seconds for t in [*before, *warmups.values()]),
        warmup_steps=warm.get("steps"),
        steady_step_s=warm.get("steady_step_s"),
        one_time_s=dict(warm.get("one_time_s", {})),
        break_even_steps=warm.get("break_even_steps"),
        ranks=world,
        rank_sps=tuple(rank_sps),
        stragglers=tuple(stragglers),
        trials_discarded=measured.discarded,
        far_trials=measured.far,
        stopped_early=measured.stopped_early,
        timed_s=timed_s,
        compile_cache=workload.compile_cache,
        plan=record,
    )
