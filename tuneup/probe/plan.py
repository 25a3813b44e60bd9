"""A probe's measurement plan, decided in one place: what it measures, and how long.

`plan_probe` turns the preset's budget and what the search asks of a probe
(the phase that judges it, whether every phase is wanted, a bar it must
reach) into a `MeasurementPlan`. The worker measures by it, the `sim`
trainer draws by it, the estimator prices it, and each probe's result
records it, so nothing else keeps a step count of its own.

The rules, after the benchmark tools users trust (gpu-ladder.md):

* **Phases.** A probe measures the phase its knob can move (IO for a loader
  knob, SYNTHETIC for a compute knob) or, asked for the whole picture (the
  baseline, an adopted configuration's check), every phase, less a figure
  carried from an earlier probe of the same data path. They run in
  `PHASE_ORDER`: FULL straight after the warm-up, so the loader's queue is
  where the real loop keeps it; IO next, its queue drained first; SYNTHETIC,
  which reads no batch, last.
* **Warm-up until steady.** The first step runs alone (its excess over a
  steady step is the probe's one-time cost), then windows of about a quarter
  of a trial until two in a row agree within the tolerance, never past the
  time cap (pyperf's calibration, Triton's do_bench). The fixed-seed loss
  steps are part of it, once per configuration in a session (the same seed
  gives the same curve); a probe that measures IO alone trains nothing and
  records no loss.
* **Trials in seconds.** A trial lasts ``trial_s``: its steps follow from the
  steady step, re-estimated after each trial (Google benchmark's rule), so a
  60 ms GPU step and a 0.5 s loader-bound one are timed alike.
* **As many trials as the noise needs.** At least ``min_trials``; then a phase
  stops once its trials agree within ``trial_noise`` (nvbench's stdrel), at
  ``max_trials`` at the most. A GPU whose trials repeat to 0.01% takes two.
  Where probes of a phase are known to vary more than their trials (a CPU
  loader's IO from probe to probe), the search asks for no finer trials than
  half that (`Candidate.trial_noise`): more trials cannot shrink the noise of
  a probe (Kalibera and Jones: repeat at the level where the variance is).

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.stats import relative_spread
from tuneup.probe.types import PHASES, Candidate, ProbeBudget

PHASE_ORDER = ("full", "io", "synthetic")
"""The order a probe measures its phases in (the module docstring says why)."""

WINDOW_SHARE = 0.25
"""A warm-up window lasts this share of a trial: short enough to end the warm-up soon,
long enough that two windows in a row agree only once the step time is steady."""

MIN_WINDOW_STEPS = 2
"""A warm-up window after the first step holds at least this many steps: one step of a
loader-bound loop is one batch's luck, two in a row say more."""

LOADER_PHASES = frozenset({"full", "io"})
"""The phases that read the loader: their windows and trials span a whole loader round."""

SHORT_WINDOW_SHARE = 0.5
"""A warm-up window that lasted less than this share of a window drew batches the loader had
made ahead (its queue), not its pace: it sizes the next window but never settles the warm-up
(the first H200 ladder: two such windows in a row settled IO at 86 steps/s, 60x its pace)."""

MAX_TRIAL_STEPS = 100_000  # a guard against a step that takes no measurable time


def ordered(phases: Iterable[str]) -> tuple[str, ...]:
    """The phases given, in measuring order."""
    wanted = set(phases)
    return tuple(p for p in PHASE_ORDER if p in wanted)


@dataclass(frozen=True)
class MeasurementPlan:
    """How one probe measures.

    Attributes:
        phases: the phases it measures, in measuring order.
        judged: the phase whose figure decides it (its bar applies there).
        trial_s: seconds one trial lasts.
        min_trials, max_trials: the trials a phase takes at least and at most.
        trial_noise: a phase has enough trials once their relative spread is this or less.
        warmup_cap_s: the warm-up ends by this many seconds, steady or not.
        warmup_tolerance: two windows agree when their step times differ by less.
        loss_steps: fixed-seed training steps whose losses are recorded (0: none).
        limit_s: the probe's wall-clock limit, warm-up and trials included.
        stop_below_sps: the judged phase's samples/s the probe must reach; clearly
            below it (after two trials) it stops early. None: no early stop.
        profile: after its trials, profile a few FULL steps (worker/profile.py).
        loader_round: batches the loader's workers make together, one each
            (`tuneup.config.loader_round`): a window or trial of a phase that reads the
            loader holds at least this many steps, so it times every worker's turn and
            not the luck of which arrived first. 1 without workers.
    """

    phases: tuple[str, ...]
    judged: str
    trial_s: float
    min_trials: int
    max_trials: int
    trial_noise: float
    warmup_cap_s: float
    warmup_tolerance: float
    loss_steps: int
    limit_s: float
    stop_below_sps: float | None = None
    profile: bool = False
    loader_round: int = 1

    @property
    def window_s(self) -> float:
        return self.trial_s * WINDOW_SHARE

    def round_steps(self, phase: str) -> int:
        """The fewest steps a window or trial of `phase` holds: a loader round where it reads
        the loader, else 1."""
        return max(1, self.loader_round) if phase in LOADER_PHASES else 1

    def trial_steps(self, step_s: float | None, phase: str) -> int:
        """Steps in one trial of `phase`, from the steady step time (its round when none is
        known)."""
        return max(self.round_steps(phase), steps_in(self.trial_s, step_s))

    def trial_seconds(self, step_s: float, phase: str) -> float:
        """What one trial of `phase` lasts at a steady `step_s`: the worker sizes its trials by
        this rule, and the estimator and the sim price them by it."""
        return self.trial_steps(step_s, phase) * max(0.0, step_s)

    def window_steps(self, step_s: float | None, phase: str) -> int:
        """Steps in one warm-up window after the first step, from the latest step time."""
        return max(MIN_WINDOW_STEPS, self.round_steps(phase), steps_in(self.window_s, step_s))

    def window_seconds(self, step_s: float, phase: str) -> float:
        """What one warm-up window of `phase` lasts at a steady `step_s`."""
        return self.window_steps(step_s, phase) * max(0.0, step_s)

    def enough_trials(self, rates: Sequence[float]) -> bool:
        """Whether a phase's trials so far are enough: all it may take, or agreeing ones."""
        if len(rates) >= self.max_trials:
            return True
        if len(rates) < self.min_trials:
            return False
        return relative_spread(rates) <= self.trial_noise

    def check(self) -> None:
        """Refuse a plan the worker cannot measure by (UsageError naming the field)."""
        unknown = [p for p in self.phases if p not in PHASES]
        if unknown or not self.phases:
            raise UsageError(
                f"unknown phase {unknown[0]!r}: phases are {', '.join(PHASES)}"
                if unknown
                else "a probe must measure at least one phase"
            )
        if self.judged not in self.phases:
            raise UsageError(f"the judged phase {self.judged!r} is not among {list(self.phases)}")
        for name in ("min_trials", "max_trials"):
            if getattr(self, name) < 1:
                raise UsageError(f"budget {name} must be at least 1, got {getattr(self, name)}")
        if self.min_trials > self.max_trials:
            raise UsageError(
                f"budget min_trials ({self.min_trials}) is more than max_trials ({self.max_trials})"
            )
        for name in ("trial_s", "warmup_cap_s", "limit_s"):
            if not getattr(self, name) > 0:
                raise UsageError(f"budget {name} must be positive, got {getattr(self, name)}")
        for name in ("trial_noise", "warmup_tolerance"):
            if getattr(self, name) < 0:
                raise UsageError(f"budget {name} must be 0 or more, got {getattr(self, name)}")
        if self.loss_steps < 0:
            raise UsageError(f"budget loss_steps must be 0 or more, got {self.loss_steps}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["phases"] = list(self.phases)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasurementPlan:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["phases"] = tuple(values.get("phases", ()))
        return cls(**values)


def steps_in(seconds: float, step_s: float | None) -> int:
    """Whole steps of `step_s` that fill `seconds` (at least 1)."""
    if step_s is None or not math.isfinite(step_s) or step_s <= 0:
        return 1
    return int(min(MAX_TRIAL_STEPS, max(1, round(seconds / step_s))))


def plan_probe(
    budget: ProbeBudget,
    *,
    judged: str = "full",
    whole: bool = True,
    stop_below_sps: float | None = None,
    carried: Iterable[str] = (),
    available: Sequence[str] = PHASES,
    loss: bool = True,
    trial_noise: float | None = None,
    profile: bool = False,
) -> MeasurementPlan:
    """The plan of one probe.

    Args:
        budget: the preset's probe budget.
        judged: the phase that decides the probe; "full" where the trainer
            measures no other (`available`).
        whole: every available phase (the judged one first in importance);
            else the judged phase alone.
        stop_below_sps: the judged phase's bar (early stop); None: none.
        carried: phases whose figure an earlier probe gave (IO of a data path
            measured before): not measured again unless judged.
        available: the phases the trainer can measure.
        loss: record the fixed-seed loss; False where an earlier probe of the same
            configuration recorded it (the same seed gives the same curve).
        trial_noise: a looser agreement the trials need (never a tighter one than the
            budget's); None: the budget's.
        profile: profile a few FULL steps after the trials (where the search wants the
            step's breakdown: the baseline, an adopted configuration, the recommendation).
    """
    if judged not in available:
        judged = "full"
    wanted = set(available) if whole else {judged}
    wanted -= set(carried) - {judged}
    phases = ordered(wanted)
    return MeasurementPlan(
        phases=phases,
        judged=judged,
        trial_s=budget.trial_s,
        min_trials=budget.min_trials,
        max_trials=budget.max_trials,
        trial_noise=max(budget.trial_noise, trial_noise or 0.0),
        warmup_cap_s=budget.warmup_cap_s,
        warmup_tolerance=budget.warmup_tolerance,
        # A probe of the loader alone trains nothing: there is no loss to record.
        loss_steps=budget.loss_steps if loss and phases != ("io",) else 0,
        limit_s=budget.limit_s,
        stop_below_sps=stop_below_sps,
        profile=profile,
    )


def plan_for(
    budget: ProbeBudget,
    candidate: Candidate,
    *,
    carried: Iterable[str] = (),
    available: Sequence[str] = PHASES,
) -> MeasurementPlan:
    """The plan of the probe the search asks for with `candidate` (its judged phase, whether
    it wants every phase, its bar, its trial length where the session shortened it)."""
    if candidate.trial_s is not None:
        budget = dataclasses.replace(budget, trial_s=candidate.trial_s)
    return plan_probe(
        budget,
        judged=candidate.judged,
        whole=candidate.whole,
        stop_below_sps=candidate.stop_below_sps,
        carried=carried,
        available=available,
        loss=candidate.loss,
        trial_noise=candidate.trial_noise,
        profile=candidate.profile,
    )


@dataclass(frozen=True)
class ProbeSpec:
    """What one probe runs: the full training config, its measurement plan and the seed.

    `threads_cap`: under others' load (probe/confine.py), the most intra-op threads a
    config that leaves the count to torch may run on; the worker runs the lesser of it
    and torch's own count, and says which in its start event. None: torch's own.
    """

    config: dict[str, Any]
    plan: MeasurementPlan = field(default_factory=lambda: plan_probe(ProbeBudget()))
    seed: int = 0
    threads_cap: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"config": self.config, "plan": self.plan.to_dict(), "seed": self.seed}
        if self.threads_cap:
            data["threads_cap"] = self.threads_cap
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeSpec:
        plan = data.get("plan")
        cap = data.get("threads_cap")
        return cls(
            config=dict(data["config"]),
            plan=MeasurementPlan.from_dict(plan)
            if isinstance(plan, Mapping)
            else plan_probe(ProbeBudget()),
            seed=int(data.get("seed", 0)),
            threads_cap=cap if isinstance(cap, int) and cap > 0 else None,
        )
