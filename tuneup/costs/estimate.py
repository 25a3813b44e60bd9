"""How long a probe and a ladder take: one documented model, fed by what is known.

The same model prices a probe wherever a price is wanted: the estimate
before the first probe (fed by the trainer's guess, or by what an earlier
ladder cost here), the time left after each probe (fed by this ladder's own
probes), the time budget's plan, and the GPU twin (fed by a recorded GPU's
figures, bench/gpu_twin.py). So the number can be checked by hand:

A probe (`probe_seconds`) of plan P (tuneup.probe.plan) costs

* its start: ``spawn_s`` in a fresh process (to its first step done: the
  interpreter, torch, CUDA's context, and the first step's plans and kernels),
  ``setup_s`` in a warm one;
* ``first_s`` in a warm process when its configuration's kernels are new there
  (knobs that change cuDNN's plans: precision, layout, batch; a compilation),
  the first steps' cost beyond steady steps: a mean over such probes, since a
  few of them (TF32 off, torch.compile) cost far more than the rest, at the
  baseline's batch: a candidate of another batch pays it times (its batch over
  the baseline's) ** ``batch_exponent`` (cuDNN's search runs every algorithm
  at the batch: 1.13 on the H200, 66 s at 128 and 162 s at 256 where 33 s at
  64; 0 where first steps do not grow with it); a script or a CUDA graph's
  capture alone searches nothing and pays ``kernel_s`` (where given);
* the loss steps: ``loss_steps`` FULL steps, in a configuration's first probe
  (later ones of the same seed would record the same curve);
* for each phase: its warm-up (its first step, then two windows of a quarter
  trial, never past the plan's cap; the ``unsettled`` share of warm-ups that never
  settle runs to the cap) and its trials (``trials`` of the phase,
  each ``MeasurementPlan.trial_seconds``: about ``trial_s``, and at least one
  step, or a loader round of steps where the phase reads a loader with workers);

the loss steps, warm-ups and trials (the probe's running part) times ``scale``,
what this machine's probes really took over what the model said of that part (1
until a probe has finished). The start and the first steps are not scaled: the
worker measures them whole, and they are most of a slow probe (a cuDNN search at
a large batch, a cold compile), where a ratio fitted on small probes' running
parts would price them again.

A ladder (`ladder_shape`) is counted in probes of each kind (`ProbeKind`:
its phases, whether it starts a process, whether its kernels are new):
the baseline repeats (every phase; the first starts the process); for each
stage with candidates, judged on phase J: its candidates once each (J alone;
new kernels where a candidate changes what first steps pay for, a conv key, a
compile or a capture, `one_time.kernels_change`, never where J is IO; loss
steps unless J is IO), the incumbent before and after them, the pairs
its decision takes (``pairs_per_stage``, 2 probes each, J alone) and, for the
share of stages that adopt something (``adopt_rate``), the adopted
configuration's check of every phase; then the confirmation's pairs (FULL).
The incumbent is measured before the candidates unless the stage before
adopted (its check was the incumbent's latest probe), and after them unless
there is only one (`anchors`).
Until a session has decided a stage, a stage takes PAIRS_PER_STAGE pairs and
adopts with ADOPT_RATE; then what its own stages took (`pairs_seen`).

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuneup.costs.one_time import conv_key, kernels_change
from tuneup.probe.batches import batch_ratio
from tuneup.probe.durations import duration_text
from tuneup.probe.plan import MeasurementPlan, plan_probe
from tuneup.probe.stats import median
from tuneup.probe.types import PHASES, Candidate, ProbeBudget

BASELINE_REPEATS = 2
CONFIRM_PAIRS = 2


def anchors(candidates: int, adopt_rate: float) -> float:
    """The incumbent's probes around a stage's screen: before it, unless the stage before
    adopted (its check measured the new incumbent last), and after it, unless there is one
    candidate (its screen already pairs with the probe before)."""
    return (1.0 - adopt_rate) + (1.0 if candidates > 1 else 0.0)


# The pairs a decision takes beyond its screen, before any was seen: a quiet GPU decides on
# the screen's own pair or one more; a noisy 2-core machine on several. A session learns
# its own (pairs_seen) and keeps it for the next.
PAIRS_PER_STAGE = 1.5
ADOPT_RATE = 0.5  # the share of stages that adopt a candidate, before any was decided
PRIOR_WEIGHT = 2.0  # the prior counts as this many stages when the session's own are few
WARM_WINDOWS = 2  # a phase's warm-up: its first step, then two windows that agree
SCALE_BOUNDS = (0.5, 3.0)  # what measured probes may scale the model by


@dataclass(frozen=True)
class StepModel:
    """A trainer's guess of its probes' costs, until a ladder has measured them.

    Attributes:
        startup_s: starting a fresh process, to its first step done.
        step_s: a steady training step (each phase alike, as a guess).
        served_startup_s: a probe's set-up in a process that ran one before; None:
            the trainer shares no process, every probe starts its own.
        first_s: a configuration's first steps beyond steady steps in a warm process,
            where its kernels are new there (compilation, cuDNN's plans).
    """

    startup_s: float = 30.0
    step_s: float = 0.5
    served_startup_s: float | None = None
    first_s: float = 0.0


@dataclass(frozen=True)
class ProbeKind:
    """A kind of probe, as the ladder model counts them.

    Attributes:
        phases: what it measures.
        fresh: it starts a process of its own.
        new: its configuration's kernels are new to its process.
        first: its configuration's first probe (it records the loss steps), where its
            kernels are not new (a new optimizer, loader or worker count).
        batch: its batch over the baseline's, where its kernels are new (its first steps
            grow with it: ProbeCosts.batch_exponent).
        search: its new kernels are priced at first_s (`searches_first`: a cuDNN search or
            a compile); else they are a script or a capture alone (ProbeCosts.kernel_s).
    """

    phases: tuple[str, ...]
    fresh: bool = False
    new: bool = False
    first: bool = False
    batch: float = 1.0
    search: bool = True


@dataclass(frozen=True)
class ProbeCosts:
    """What a probe's parts cost on this machine, in seconds (the module docstring's model).

    Attributes:
        spawn_s, setup_s: a probe's start in a fresh process (its first steps
            included), and in a warm one.
        first_s: first steps beyond steady in a warm process, where a configuration's
            kernels are new there (a mean, at the baseline's batch).
        batch_exponent: how those first steps grow with the batch (module docstring).
        step_s: a steady step of each phase.
        trials: the trials each phase takes (expected: a fraction is fine).
        scale: what this machine's probes' running parts took over what the model said
            (the module docstring).
        shares: probes share processes (else every probe is fresh).
        measured: the figures come from this machine's probes, not a guess.
        recorded: the figures describe a whole ladder's probes (an earlier ladder's record
            here, or a preset's `probe.costs` from the machine it is for), not a guess.
        unsettled: per phase, the share of warm-ups that never settle and run to the
            plan's cap (a loader-bound step that wanders), none where not given.
        warm_windows: per phase, the windows a settling warm-up takes after its first
            step (WARM_WINDOWS where not given: two that agree).
        loader_round: the configuration's loader round (`tuneup.config.loader_round`):
            its FULL and IO windows and trials hold that many steps at least.
        kernel_s: the first steps of a script or a capture alone, which search nothing (on
            the H200: 0.1-0.2 s, where a search took 13-162 s); None: first_s.
    """

    spawn_s: float
    setup_s: float
    first_s: float
    step_s: Mapping[str, float]
    trials: Mapping[str, float] = field(default_factory=dict)
    scale: float = 1.0
    shares: bool = True
    measured: bool = False
    recorded: bool = False
    unsettled: Mapping[str, float] = field(default_factory=dict)
    warm_windows: Mapping[str, float] = field(default_factory=dict)
    loader_round: int = 1
    batch_exponent: float = 0.0
    kernel_s: float | None = None

    def step(self, phase: str) -> float:
        return self.step_s.get(phase) or self.step_s.get("full") or 0.0

    def kernels_alone(self) -> float:
        """What a script or a capture alone costs first."""
        return self.first_s if self.kernel_s is None else self.kernel_s


def guess_costs(budget: ProbeBudget, model: StepModel) -> ProbeCosts:
    """The trainer's guess, under `budget`: every phase at its step, trials as the most."""
    shares = model.served_startup_s is not None
    return ProbeCosts(
        spawn_s=model.startup_s,
        setup_s=model.served_startup_s if shares else model.startup_s,  # type: ignore[arg-type]
        first_s=model.first_s,
        step_s={p: model.step_s for p in PHASES},
        trials={p: float(budget.max_trials) for p in PHASES},
        shares=shares,
    )


def recorded_costs(
    recorded: Mapping[str, Any], budget: ProbeBudget, shares: bool = True
) -> ProbeCosts:
    """A preset's `probe.costs` (figures recorded on the machine it is for) as ProbeCosts;
    a phase it does not give takes FULL's step, and trials the budget's most."""
    step = {str(k): float(v) for k, v in dict(recorded.get("step_s") or {}).items()}
    full = step.get("full") or max(step.values(), default=0.5)
    trials = {str(k): float(v) for k, v in dict(recorded.get("trials") or {}).items()}
    unsettled = {str(k): float(v) for k, v in dict(recorded.get("unsettled") or {}).items()}
    return ProbeCosts(
        spawn_s=float(recorded.get("spawn_s", 30.0)),
        setup_s=float(recorded.get("setup_s", recorded.get("spawn_s", 30.0))),
        first_s=float(recorded.get("first_s", 0.0)),
        step_s={p: step.get(p, full) for p in PHASES},
        trials={p: trials.get(p, float(budget.max_trials)) for p in PHASES},
        shares=shares,
        recorded=True,
        unsettled=unsettled,
        loader_round=int(recorded.get("loader_round", 1)),
        scale=float(recorded.get("scale", 1.0)),
        batch_exponent=float(recorded.get("batch_exponent", 0.0)),
        kernel_s=float(recorded["kernel_s"]) if "kernel_s" in recorded else None,
    )


def probe_seconds(
    plan: MeasurementPlan,
    costs: ProbeCosts,
    *,
    fresh: bool = False,
    new: bool = False,
    batch: float = 1.0,
    search: bool = True,
) -> float:
    """One probe's wall time (the module docstring's model), never over the plan's limit;
    `batch`: its batch over the baseline's; `search`: as ProbeKind's."""
    fresh = fresh or not costs.shares
    plan = dataclasses.replace(plan, loader_round=max(plan.loader_round, costs.loader_round))
    once = one_time_seconds(costs, fresh=fresh, new=new, batch=batch, search=search)
    seconds = 0.0
    if plan.loss_steps:
        seconds += plan.loss_steps * costs.step("full")
    for phase in plan.phases:
        step = costs.step(phase)
        window = plan.window_seconds(step, phase)
        warm = step + costs.warm_windows.get(phase, WARM_WINDOWS) * window
        if phase == "full" and plan.loss_steps:  # the loss steps are its first windows
            warm = window
        trials = costs.trials.get(phase, float(plan.max_trials))
        unsettled = min(1.0, max(0.0, costs.unsettled.get(phase, 0.0)))
        warm = (1.0 - unsettled) * min(plan.warmup_cap_s, warm) + unsettled * plan.warmup_cap_s
        seconds += warm + trials * plan.trial_seconds(step, phase)
    return min(plan.limit_s, once + seconds * costs.scale)


def one_time_seconds(
    costs: ProbeCosts, *, fresh: bool, new: bool, batch: float = 1.0, search: bool = True
) -> float:
    """A probe's unscaled part: its start, and in a warm process its new kernels' first
    steps: a search at its batch (`batch`: over the baseline's), else a compile, a script
    or a capture alone (a fresh process's start includes them)."""
    if fresh or not costs.shares:
        return costs.spawn_s
    if not new:
        return costs.setup_s
    return costs.setup_s + (first_seconds(costs, batch) if search else costs.kernels_alone())


def first_seconds(costs: ProbeCosts, batch: float = 1.0) -> float:
    """New kernels' first steps at `batch` times the baseline's batch."""
    return costs.first_s * max(batch, 1e-9) ** costs.batch_exponent


def kind_seconds(kind: ProbeKind, budget: ProbeBudget, costs: ProbeCosts) -> float:
    """A probe of `kind` under `budget`: the loss steps for a configuration's first probe
    alone (`new`, `first`, or the process's first: the same seed gives the same curve
    after)."""
    judged = "full" if len(kind.phases) != 1 else kind.phases[0]
    plan = plan_probe(
        budget, judged=judged, whole=len(kind.phases) > 1, loss=kind.new or kind.fresh or kind.first
    )
    plan = dataclasses.replace(plan, phases=kind.phases)
    return probe_seconds(
        plan, costs, fresh=kind.fresh, new=kind.new, batch=kind.batch, search=kind.search
    )


@dataclass(frozen=True)
class LadderShape:
    """The probes a ladder runs (or has left), by kind: expected counts, so fractional."""

    counts: Mapping[ProbeKind, float] = field(default_factory=dict)

    @property
    def probes(self) -> int:
        return round(sum(self.counts.values()))

    def seconds(self, budget: ProbeBudget, costs: ProbeCosts) -> float:
        return sum(n * kind_seconds(k, budget, costs) for k, n in self.counts.items() if n > 0)

    def __add__(self, other: LadderShape) -> LadderShape:
        total: defaultdict[ProbeKind, float] = defaultdict(float)
        for shape in (self, other):
            for kind, n in shape.counts.items():
                total[kind] += n
        return LadderShape(dict(total))


@dataclass(frozen=True)
class StageShape:
    """A stage as the ladder model sees it: its candidates, the phase that judges it, the
    gain it is expected to bring (what a time budget keeps first), and how many of its
    candidates bring kernels new to the process (`one_time.kernels_change`; None: every
    one unless the stage is judged on IO, which runs no model), with each one's batch over
    the baseline's (`new_batches`; none given: the baseline's). `fewer`: the stage with its
    dearest 1, 2, .. candidates left out (their labels in each one's `left`), what a time
    budget tries before it leaves the whole stage out (planner.py)."""

    name: str
    candidates: int
    judged: str = "full"
    expected_gain: float = 0.0
    new_kernels: int | None = None
    new_batches: tuple[float, ...] = ()
    new_searches: tuple[bool, ...] = ()
    left: tuple[str, ...] = ()
    fewer: tuple[StageShape, ...] = ()

    @classmethod
    def of(
        cls,
        name: str,
        candidates: Sequence[Candidate],
        judged: str = "full",
        expected_gain: float = 0.0,
        batch: float | None = None,
        at: float | None = None,
    ) -> StageShape:
        """A stage of these candidates, counting those whose kernels are new, and where the
        baseline's `batch` is given, each one's batch over it (a candidate that sets none
        runs at the incumbent's, `at`)."""
        new = [c for c in candidates if kernels_change(c.values)]
        batches = tuple(_search_batch(c.values, batch, at) for c in new) if batch else ()
        searches = tuple(searches_first(conv_key(c.values) != conv_key({}), c.values) for c in new)
        return cls(name, len(candidates), judged, expected_gain, len(new), batches, searches)


def searches_first(new_key: bool, values: Mapping[str, Any]) -> bool:
    """Whether new kernels are priced at first_s: a cuDNN search (a conv key new to the
    process, at its batch) or a compile (tens of seconds cold, seconds from the disk caches),
    not at kernel_s (a script or a capture alone: a fraction of a second on the H200)."""
    return new_key or values.get("jit") == "compile"


def _search_batch(values: Mapping[str, Any], batch: float | None, at: float | None) -> float:
    """The batch a candidate's first steps are priced at, over the baseline's: a cuDNN
    search where it changes the conv key, at its batch; a compile, script or capture alone
    searches nothing, and is priced as measured (at the baseline's)."""
    return batch_ratio(values, batch, at) if conv_key(values) != conv_key({}) else 1.0


@dataclass(frozen=True)
class Habits:
    """How decisions go here: pairs a stage's decision takes, and how often a stage adopts."""

    pairs_per_stage: float = PAIRS_PER_STAGE
    adopt_rate: float = ADOPT_RATE


WHOLE = PHASES
CONFIRM = ProbeKind(("full",))


def confirmation_pairs(confirm_pairs: int, habits: Habits) -> float:
    """The pairs the confirmation is expected to take: at least its fewest, and as many as
    a stage's decision took here (the same noise decides both)."""
    return max(float(confirm_pairs), habits.pairs_per_stage) if confirm_pairs else 0.0


def stage_shape(stage: StageShape, habits: Habits) -> LadderShape:
    """The probes one stage with candidates is expected to take."""
    if stage.candidates <= 0:
        return LadderShape()
    judged = (stage.judged,)
    new = 0 if stage.judged == "io" else stage.candidates
    if stage.new_kernels is not None:
        new = min(new, max(0, stage.new_kernels))
    counts: defaultdict[ProbeKind, float] = defaultdict(float)
    batches = list(stage.new_batches[:new]) + [1.0] * max(0, new - len(stage.new_batches))
    searches = list(stage.new_searches[:new]) + [True] * max(0, new - len(stage.new_searches))
    for batch, search in zip(batches, searches, strict=True):
        counts[ProbeKind(judged, new=True, batch=batch, search=search)] += 1
    if stage.candidates > new:  # a first probe still records its loss steps (not IO's)
        counts[ProbeKind(judged, first=stage.judged != "io")] += stage.candidates - new
    counts[ProbeKind(judged)] += anchors(stage.candidates, habits.adopt_rate)
    counts[ProbeKind(judged)] += 2 * habits.pairs_per_stage
    counts[ProbeKind(WHOLE)] += habits.adopt_rate
    return LadderShape(dict(counts))


def ladder_shape(
    stages: Sequence[StageShape],
    *,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
    habits: Habits | None = None,
    baseline_done: int = 0,
) -> LadderShape:
    """The probes a ladder runs, by kind (the module docstring's model).

    `baseline_done`: baseline probes already run (none left to start the process).
    """
    habits = habits or Habits()
    counts: defaultdict[ProbeKind, float] = defaultdict(float)
    left = max(0, baseline_repeats - baseline_done)
    if left:
        fresh = baseline_done == 0
        counts[ProbeKind(WHOLE, fresh=fresh, new=fresh)] += 1
        counts[ProbeKind(WHOLE)] += left - 1
    shape = LadderShape(dict(counts))
    active = [s for s in stages if s.candidates > 0]
    for stage in active:
        shape = shape + stage_shape(stage, habits)
    if active and confirm_pairs:
        shape = shape + LadderShape({CONFIRM: 2.0 * confirmation_pairs(confirm_pairs, habits)})
    return shape


def pairs_seen(
    stages: Sequence[tuple[int, int, bool]],
    prior: Habits | None = None,
    weight: float = PRIOR_WEIGHT,
) -> Habits:
    """How decisions go here, from the stages decided so far.

    Args:
        stages: (probes it took, its candidates, whether it adopted) of each decided
            stage with candidates.
        prior: what is assumed before any stage was decided.
        weight: how many stages the prior counts as, so one stage does not swing it.
    """
    prior = prior or Habits()
    seen = [
        (max(0.0, (n - c - anchors(c, prior.adopt_rate) - (1 if adopted else 0)) / 2), adopted)
        for n, c, adopted in stages
        if c > 0
    ]
    pairs = (prior.pairs_per_stage * weight + sum(p for p, _ in seen)) / (weight + len(seen))
    adopt = (prior.adopt_rate * weight + sum(1.0 for _, a in seen if a)) / (weight + len(seen))
    return Habits(pairs, adopt)


def scale_of(walls: Sequence[tuple[float, float]]) -> float:
    """What probes' running parts really took over what the model said of them (each pair:
    measured, modeled, both less the probe's one-time part): the median ratio, bounded."""
    ratios = [wall / modeled for wall, modeled in walls if wall > 0 and modeled > 0]
    if not ratios:
        return 1.0
    low, high = SCALE_BOUNDS
    return min(high, max(low, median(ratios)))


def time_left_text(seconds: float, basis: str) -> str:
    """ "about 3 min left (measured here)": the estimate, and what it rests on."""
    said = f"about {duration_text(max(seconds, 0.0))} left"
    return f"{said} ({basis})" if basis else said


def time_limit(budget_s: float | None, allocation_left_s: float | None) -> float | None:
    """The tighter of the user's time budget and the allocation's remaining time."""
    limits = [s for s in (budget_s, allocation_left_s) if s is not None]
    return min(limits) if limits else None


def fits(
    estimate_s: float, budget_s: float | None, allocation_left_s: float | None
) -> tuple[bool, str]:
    """Whether the ladder fits the time budget and the allocation, and a sentence saying so."""
    said = f"estimated {duration_text(estimate_s)}"
    if budget_s is not None and estimate_s > budget_s:
        return False, f"{said}: over the {duration_text(budget_s)} time budget"
    if allocation_left_s is not None and estimate_s > allocation_left_s:
        return False, (
            f"{said}: more than the {duration_text(allocation_left_s)} left in the allocation"
        )
    limits = []
    if budget_s is not None:
        limits.append(f"the {duration_text(budget_s)} budget")
    if allocation_left_s is not None:
        limits.append(f"the {duration_text(allocation_left_s)} left in the allocation")
    return True, f"{said}" + (f", fits {' and '.join(limits)}" if limits else "")


def finite_or(value: float | None, default: float) -> float:
    return value if value is not None and math.isfinite(value) and value > 0 else default
