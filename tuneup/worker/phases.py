"""Measuring one probe: fixed-seed loss, warm-up to a stable step time, then the phases.

The order, and why:

1. **Loss.** The first ``loss_steps`` steps are real training steps (loader,
   device copy, graph capture, learning rate, step) from the freshly built,
   fixed-seed model, so step *n* of any probe is comparable with step *n* of
   the baseline whatever the probe changed in the arithmetic (TF32, AMP,
   fused Adam, JIT, graphs). The loss tensors stay on the device and are read
   back once, after the last of them.
2. **Warm-up.** The loss steps are also the start of the warm-up: steps are
   timed in windows of ``warmup_min_steps`` (device synchronised at window
   edges only) and warm-up ends at the first window whose step time is
   within ``warmup_tolerance`` of the previous window's, once the loss steps
   are done, or when ``warmup_max_steps`` is reached (never before the loss
   steps). The last window's step time is the steady step time.
3. **Phases**, in the spec's order: T trials of K steps each, synchronised at
   trial edges only. IO moves loader batches to the device without the
   model; SYNTHETIC runs one cached device batch through the step; FULL is
   the real loop. Samples/s count the global batch (all ranks).

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
warm-up took beyond its steps at the steady step time, i.e. compilation,
cuDNN autotuning and allocator growth. ``break_even_steps`` is their sum in
steady steps: a run shorter than that spends more time starting than
training (compare it with the run's steps, not with another probe's).

Early stop: a probe given ``stop_below`` (samples/s; a stage's candidate whose
incumbent is known) ends its FULL trials once they are clearly short of it
(``trials.clearly_slower``: the best of at least two trials below it) and
measures no other phase; the result says so in ``stopped_early``.

Everything is driven through two small interfaces, :class:`Timer` (clock and
device sync) and :class:`Workload` (the three kinds of work), so the rules
are tested with fakes (both in trials.py); :class:`DeviceTimer` and
:class:`SetupWorkload` (workload.py) bind them to a real
:class:`~tuneup.trainer.build.TrainingSetup`. torch is imported only there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.stats import clearly_slower, early_stop_reason, iqr_pct, median
from tuneup.probe.types import PHASES, Budget
from tuneup.worker.trials import (
    Emit,
    Gather,
    Timer,
    Trial,
    Workload,
    one_rank,
    rank_rates,
    run_trials,
)
from tuneup.worker.warmup import WarmupTracker, break_even_steps, one_time_costs, warm_up

# The loader's state when a phase starts is part of what it measures. FULL comes
# straight after the warm-up (FULL steps too), so its prefetch queue is where the
# real loop keeps it; IO drains what FULL left queued before its trials; SYNTHETIC,
# which reads no batch, comes last, so the queue it lets fill up flatters nothing.
MEASURE_ORDER = ("full", "io", "synthetic")


def measure_order(phases: Iterable[str]) -> list[str]:
    """The phases asked for, in the order that starts each from its loader's steady state."""
    wanted = set(phases)
    return [p for p in MEASURE_ORDER if p in wanted]


# ---- pure rules -------------------------------------------------------------


def check_budget(budget: Budget, phases: Iterable[str]) -> None:
    """Refuse a budget or phase list the worker cannot measure with."""
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise UsageError(f"unknown phase {unknown[0]!r}: phases are {', '.join(PHASES)}")
    at_least_one = {
        "trial_steps": budget.trial_steps,
        "trials": budget.trials,
        "warmup_min_steps": budget.warmup_min_steps,
    }
    for name, value in at_least_one.items():
        if value < 1:
            raise UsageError(f"budget {name} must be at least 1, got {value}")
    for name in ("warmup_max_steps", "loss_steps"):
        if getattr(budget, name) < 0:
            raise UsageError(f"budget {name} must be 0 or more, got {getattr(budget, name)}")
    if budget.warmup_tolerance < 0:
        raise UsageError(
            f"budget warmup_tolerance must be 0 or more, got {budget.warmup_tolerance}"
        )


class _CountingGather:
    """``gather`` that remembers how many ranks answered last (the world size)."""

    def __init__(self, gather: Gather) -> None:
        self._gather = gather
        self.world = 1

    def __call__(self, seconds: float) -> list[float]:
        values = self._gather(seconds)
        self.world = len(values)
        return values


@dataclass(frozen=True)
class _WarmupOutcome:
    """What the loss steps and warm-up left: the figures the ``warmup`` event reports."""

    tracker: WarmupTracker
    losses: list[float]
    seconds: float
    one_time: dict[str, float]
    steady: float | None
    break_even: float | None


@dataclass(frozen=True)
class _PhaseRates:
    """Each measured phase's trial rates, the FULL trials, and the trials dropped as outliers."""

    rates: dict[str, list[float]]
    full_trials: list[Trial]
    discarded: int
    timed_s: float  # seconds in timed trials, dropped ones included: what measuring cost
    stopped_early: str = ""  # why the phases ended early; empty when they all ran


class _TimedTrials:
    """Passes events on, adding up the seconds of every trial (dropped ones too)."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.seconds = 0.0

    def emit(self, kind: str, **fields: Any) -> None:
        if kind == "trial":
            self.seconds += float(fields.get("seconds") or 0.0)
        self._emit(kind, **fields)


def _timed_warm_up(
    workload: Workload,
    budget: Budget,
    *,
    timer: Timer,
    emit: Emit,
    start_costs: Mapping[str, float] | None,
    gather: Gather,
) -> _WarmupOutcome:
    """Run the loss steps and warm-up, then emit the ``warmup`` event."""
    began = timer.now()
    tracker, losses = warm_up(workload, budget, timer=timer, emit=emit, gather=gather)
    warmup_s = timer.now() - began
    one_time = one_time_costs(
        tracker, graph_capture_s=workload.graph_capture_s, start_costs=start_costs
    )
    steady = tracker.steady_step_s
    break_even = break_even_steps(one_time, steady)
    emit(
        "warmup",
        seconds=warmup_s,
        steps=tracker.steps,
        steady_step_s=steady,
        stable=tracker.stable,
        one_time_s=one_time,
        break_even_steps=break_even,
    )
    return _WarmupOutcome(tracker, losses, warmup_s, one_time, steady, break_even)


def _measure_phases(
    workload: Workload,
    budget: Budget,
    phases: Iterable[str],
    *,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    gather: Gather,
    stop_below: float | None = None,
) -> _PhaseRates:
    """Each phase's trials, in measuring order; none after FULL fell clearly short."""
    work: dict[str, Callable[[int], int]] = {
        "io": workload.io,
        "synthetic": workload.synthetic,
        "full": workload.full,
    }
    rates: dict[str, list[float]] = {}
    full_trials: list[Trial] = []
    discarded = 0
    timed = _TimedTrials(emit)
    emit = timed.emit
    for phase in measure_order(phases):
        workload.prepare(phase)
        full = phase == "full"
        trials = run_trials(
            phase,
            work[phase],
            trials=budget.trials,
            steps=budget.trial_steps,
            samples_per_batch=samples_per_batch,
            timer=timer,
            emit=emit,
            gather=gather,
            stop_below=stop_below if full else None,
        )
        rates[phase] = [t.samples_per_s for t in trials]
        discarded += trials[0].index - 1 if trials else 0
        if full:
            full_trials = trials
            if len(trials) < budget.trials and clearly_slower(rates[phase], stop_below):
                assert stop_below is not None
                left = [p for p in measure_order(phases) if p != "full"]
                why = early_stop_reason(rates[phase], budget.trials, stop_below, left)
                return _PhaseRates(rates, full_trials, discarded, timed.seconds, why)
    return _PhaseRates(rates, full_trials, discarded, timed.seconds)


def _probe_result(
    workload: Workload,
    warm: _WarmupOutcome,
    measured: _PhaseRates,
    *,
    samples_per_batch: int,
    world: int,
) -> dict[str, Any]:
    """The ``result`` event's fields, from the warm-up and the phases."""
    rates, losses = measured.rates, warm.losses
    full = rates.get("full", [])
    rank_sps, stragglers = rank_rates(measured.full_trials, samples_per_batch / world)
    return {
        "io_sps": median(rates["io"]) if "io" in rates else None,
        "synthetic_sps": median(rates["synthetic"]) if "synthetic" in rates else None,
        "full_sps": median(full) if full else None,
        "full_sps_trials": full,
        "io_sps_trials": rates.get("io", []),
        "synthetic_sps_trials": rates.get("synthetic", []),
        "iqr_pct": iqr_pct(full) if full else None,
        "loss_start": losses[0] if losses else None,
        "loss_end": losses[-1] if losses else None,
        "losses": losses,
        "scaler_overflows": workload.scaler_overflows,
        "mem_peak_mb": workload.mem_peak_mb(),
        "warmup_s": warm.seconds,
        "warmup_steps": warm.tracker.steps,
        "steady_step_s": warm.steady,
        "one_time_s": warm.one_time,
        "break_even_steps": warm.break_even,
        "ranks": world,
        "rank_sps": rank_sps,
        "stragglers": stragglers,
        "trials_discarded": measured.discarded,
        "stopped_early": measured.stopped_early,
        "timed_s": measured.timed_s,
        "compile_cache": workload.compile_cache,
    }


def run_probe(
    workload: Workload,
    budget: Budget,
    phases: Iterable[str],
    *,
    samples_per_batch: int,
    timer: Timer,
    emit: Emit,
    start_costs: Mapping[str, float] | None = None,
    gather: Gather = one_rank,
    stop_below: float | None = None,
) -> dict[str, Any]:
    """Loss, warm-up, then each phase; emits every event but ``start`` and returns the result.

    Args:
        workload: the work to time (a :class:`SetupWorkload` in the worker).
        budget: warm-up rule, K, T and the loss steps.
        phases: names from PHASES, measured in this order.
        samples_per_batch: the global batch, so samples/s are the job's.
        timer: clock and device sync.
        emit: event sink, ``emit(kind, **fields)``.
        start_costs: what starting cost before the first step, as the caller
            measured it (``spawn`` or ``setup``, see the module docstring).
        gather: every rank's seconds at a trial edge (a collective under DDP);
            the slowest rank's count. ``[seconds]`` on one rank.
        stop_below: FULL samples/s a probe must reach to stay in the running
            (early stop); None measures every trial and phase.
    """
    gathered = _CountingGather(gather)
    warm = _timed_warm_up(
        workload, budget, timer=timer, emit=emit, start_costs=start_costs, gather=gathered
    )
    measured = _measure_phases(
        workload,
        budget,
        phases,
        samples_per_batch=samples_per_batch,
        timer=timer,
        emit=emit,
        gather=gathered,
        stop_below=stop_below,
    )
    result = _probe_result(
        workload, warm, measured, samples_per_batch=samples_per_batch, world=gathered.world
    )
    emit("result", **result)
    return result
