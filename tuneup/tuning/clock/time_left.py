"""What is left of a ladder, in probes of each kind and in seconds, as its probes finish.

The session hears every probe (run or taken from the journal) and asks, after
each, how many probes are still expected and what they will cost: the model of
costs.estimate, fed with this ladder's own probes (measured.py: their
start-up, first steps, step times, trial counts, and how far the model was
off), else with what an earlier ladder of the same trainer and preset cost
here (tuning.ladder_record), else with the trainer's StepModel guess. At the
end the ladder's figures are kept for the next.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tuneup.costs.estimate import (
    Habits,
    LadderShape,
    ProbeCosts,
    ProbeKind,
    StageShape,
    StepModel,
    confirmation_pairs,
    guess_costs,
    ladder_shape,
    pairs_seen,
    probe_seconds,
    recorded_costs,
    searches_first,
    stage_shape,
)
from tuneup.costs.one_time import conv_key, kernels_new
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset
from tuneup.probe.batches import batch_over, config_batch
from tuneup.probe.plan import plan_for
from tuneup.probe.targets import split_target_stage
from tuneup.probe.types import (
    BASELINE_STAGE,
    CONFIRM_STAGE,
    PHASES,
    Candidate,
    ProbeBudget,
    ProbeResult,
)
from tuneup.trainers.adapters import TrainerAdapter
from tuneup.tuning.clock.ladder_record import LadderCosts, LadderRecord
from tuneup.tuning.clock.measured import Heard, measured_costs
from tuneup.tuning.clock.planner import dearer_first
from tuneup.tuning.search.load import LADDER_PROBES
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.targets import expected_target_plans


@dataclass
class _Heard:
    """One probe as the clock heard it: the result, whether its kernels were new, and
    whether its conv key was (a cuDNN search)."""

    result: ProbeResult
    new: bool
    new_key: bool = True


SIMULATED = "the simulated trainer's own seconds"


def prior_costs(
    adapter: TrainerAdapter,
    preset: ProbePreset,
    machine: str,
    record: LadderRecord | None,
    shares: bool,
    known: ProbeCosts | None = None,
) -> tuple[ProbeCosts, Habits, str]:
    """What probes cost here before any has run, and what that rests on in words: what the
    trainer knows of its own probes (`known`: a simulated trainer's seconds,
    TrainerAdapter.known_costs), else an earlier ladder's record of this trainer, preset and
    machine (`measured`), else the figures the preset recorded on the machine it is for
    (`probe.costs`), else the trainer's StepModel guess."""
    if known is not None:  # its costs are known; how its decisions go, as the preset's did
        return replace(known, shares=known.shares and shares), _habits(preset), SIMULATED
    kept = None
    if record is not None and not adapter.simulated:
        kept = record.recall(adapter.name, preset.name, machine)
    return prior(kept, preset, adapter.step_model, shares)


def prior(
    kept: LadderCosts | None, preset: ProbePreset, step_model: StepModel, shares: bool
) -> tuple[ProbeCosts, Habits, str]:
    """prior_costs once the record is read (the app's setup screen reads its own)."""
    if kept is not None:
        when = f" of {kept.when}" if kept.when else ""
        costs = replace(kept.costs, measured=True, recorded=True)
        return costs, kept.habits, f"from this machine's last ladder{when}"
    if preset.costs is not None:
        recorded = preset.costs
        habits = _habits(preset)
        # where the preset recorded them (its `source`) is in `tuneup presets show`
        basis = f"from preset {preset.name}'s recorded costs"
        return recorded_costs(recorded, preset.budget, shares), habits, basis
    costs = guess_costs(preset.budget, step_model)
    basis = "a guess from the trainer's step model"
    return (costs if shares else replace(costs, shares=False)), Habits(), basis


def _habits(preset: ProbePreset) -> Habits:
    """How decisions went where the preset recorded its costs (its pairs per stage and
    adopt rate), else the model's prior."""
    recorded = preset.costs or {}
    return Habits(
        float(recorded.get("pairs_per_stage", Habits.pairs_per_stage)),
        float(recorded.get("adopt_rate", Habits.adopt_rate)),
    )


def known_costs(
    adapter: TrainerAdapter, values: dict[str, Any], budget: ProbeBudget, machine: MachineInfo
) -> ProbeCosts | None:
    """What the trainer knows its probes of `values` cost on `machine` (a simulated trainer's
    seconds); None: nothing before its probes run."""
    return adapter.known_costs(values, budget, machine)


def stage_shapes(
    plans: Sequence[StagePlan],
    batch: float | None = None,
    at: float | None = None,
    *,
    fewer: bool = True,
) -> list[StageShape]:
    """The stage plans as the ladder model sees them (a skipped stage has no candidates; a
    candidate that leaves the kernels as they were pays no first steps; one of another batch
    than the baseline's `batch` pays them at its own, or at the incumbent's, `at`), each
    with its shapes of fewer candidates (where `fewer`: what a plan chooses among), the
    dearest left out first, those dearer than its cheapest alone (planner.dearer_first)."""
    return [_stage_shape(p, batch, at, fewer) for p in plans]


def _stage_shape(plan: StagePlan, batch: float | None, at: float | None, fewer: bool) -> StageShape:
    candidates = [] if plan.skip_reason else plan.candidates

    def of(left: Sequence[Candidate]) -> StageShape:
        kept = [c for c in candidates if not any(c is gone for gone in left)]
        shape = StageShape.of(plan.name, kept, plan.judged, plan.expected_gain, batch, at)
        return replace(shape, left=tuple(c.label for c in left))

    dearer = dearer_first(candidates, batch, at) if fewer else []
    return replace(of(()), fewer=tuple(of(dearer[:k]) for k in range(1, len(dearer) + 1)))


MEASURED_HERE = "measured here"
LOST_RATE_CAP = 0.75  # a busy machine's spoiled share counted on: at most three in four


@dataclass
class LadderClock:
    """A ladder's expected remainder, updated probe by probe.

    Attributes:
        adapter, preset: the session's trainer and preset (the record is kept by both names).
        plans: the stage plans, in order (their candidates and judged phases shape it).
        search: "staged" or "grid".
        baseline_repeats, confirm_pairs: as the search runs them.
        shares_processes: probes may share a worker process (the user did not ask
            for fresh ones, and a probe runs one rank): else each costs a fresh one.
        machine: the machine's tag (ladder_record.machine_tag), for the record.
        record: where ladder costs are kept between sessions; None: nowhere.
        base_batch: the baseline's global batch (first steps are priced at it, and grow
            with a candidate's own: ProbeCosts.batch_exponent); None: not known.
    """

    adapter: TrainerAdapter
    preset: ProbePreset
    plans: list[StagePlan]
    search: str = "staged"
    baseline_repeats: int = 2
    confirm_pairs: int = 2
    shares_processes: bool = True
    machine: str = ""
    record: LadderRecord | None = None
    base_batch: float | None = None
    # Probes a busy machine may still spoil (tuning/search/load.py's ladder bound): the time left
    # counts the re-measures the load has cost so far, up to this many.
    lost_allowance: int = LADDER_PROBES
    # What the trainer knows its probes cost (TrainerAdapter.known_costs): a simulated one's.
    known: ProbeCosts | None = None
    _seen: list[_Heard] = field(default_factory=list)
    _stage_probes: Counter = field(default_factory=Counter)
    _keys: set[tuple[Any, ...]] = field(default_factory=set)
    _lost: int = 0
    _incumbent_batch: float | None = None

    def __post_init__(self) -> None:
        # Asked after every probe: an earlier ladder's record is read once.
        self.simulated = self.adapter.simulated  # no time worth telling
        self.reprice(self.known)

    def reprice(self, known: ProbeCosts | None) -> None:
        """Price probes before any has run from `known`; None: as a trainer that knows
        nothing of its own prices (an earlier ladder's record, the preset's costs, the
        step model). The GPU twin replays with it what `tuneup probe` first says there."""
        self.known = known
        self._prior, self._prior_habits, self.basis = prior_costs(
            self.adapter, self.preset, self.machine, self.record, self.shares_processes, known
        )

    @property
    def budget(self) -> ProbeBudget:
        return self.preset.budget

    def heard(self, stage: str, result: ProbeResult) -> None:
        """One more probe finished (or was taken from the journal)."""
        if result.served_before == 0:
            self._keys = set()  # a fresh process: nothing is warm in it
        new = kernels_new(result.config, self._keys)
        new_key = conv_key(result.config) not in self._keys
        self._keys.add(conv_key(result.config))
        if result.ok and len(result.plan.get("phases", ())) > 1:  # the baseline, an adoption
            self._incumbent_batch = config_batch(result.config)
        self._seen.append(_Heard(result, new, new_key))
        if result.ok and result.contended:  # spoiled by a load: measured again, no progress
            self._lost += 1
        else:
            self._stage_probes[stage] += 1

    @property
    def heard_any(self) -> bool:
        """Whether any probe was heard (run, or taken from the journal)."""
        return bool(self._seen)

    def probe_s(self, candidate: Candidate, values: dict[str, Any], budget: ProbeBudget) -> float:
        """What the next probe (`candidate` on `values`, measured by `budget`) is expected to
        take at this ladder's costs: in a process of its own before any probe (or where none
        is shared), its first steps where its kernels are new to the process."""
        costs = self.costs()
        fresh = not self._seen or not (costs.shares and self.shares_processes)
        new = kernels_new(values, self._keys)
        searched = conv_key(values) not in self._keys  # a cuDNN search, at its batch
        batch = batch_over(values, self.base_batch) if searched else 1.0
        plan = plan_for(budget, candidate)
        search = searches_first(searched, values)
        return probe_seconds(plan, costs, fresh=fresh, new=new, batch=batch, search=search)

    def remeasures(self, probes: float) -> float:
        """The re-measures `probes` more probes are expected to cost at the rate a busy
        machine has spoiled this ladder's so far, never more than its bound still allows."""
        if not self._lost or probes <= 0:
            return 0.0
        rate = min(LOST_RATE_CAP, self._lost / len(self._seen))
        return min(probes * rate / (1.0 - rate), float(max(0, self.lost_allowance - self._lost)))

    def costs(self) -> ProbeCosts:
        """What a probe costs here: measured as soon as probes finished."""
        heard = [Heard(h.result, h.new, h.new_key) for h in self._seen]
        return measured_costs(heard, self.budget, self._guess(), base_batch=self.base_batch)

    def later_costs(self, costs: ProbeCosts) -> ProbeCosts:
        """What a probe of a stage not begun yet costs: its steps, trials and first steps as
        a recorded ladder's typically were (later stages run on faster configurations than
        the incumbent's now), this ladder's start-up and scale; this ladder's own figures
        where nothing was recorded."""
        if not self._prior.recorded:
            return costs
        prior = self._prior
        kernel_s = costs.kernel_s if prior.kernel_s is None else prior.kernel_s
        return replace(
            costs,
            step_s=dict(prior.step_s),
            trials=dict(prior.trials),
            first_s=prior.first_s,
            kernel_s=kernel_s,
        )

    def typical_costs(self) -> ProbeCosts:
        """What this ladder's probes typically cost (kept for the next estimate)."""
        heard = [Heard(h.result, h.new, h.new_key) for h in self._seen]
        return measured_costs(
            heard, self.budget, self._guess(), typical=True, base_batch=self.base_batch
        )

    def habits(self, stage: str | None) -> Habits:
        """How decisions go: this session's stages decided before `stage`, else a record's."""
        return pairs_seen(self._decided(stage), prior=self._prior_habits)

    def left(self, stage: str | None, costs: ProbeCosts) -> LadderShape:
        """Probes still expected after one of `stage` (None: before the first), by kind:
        each in a process of its own where probes share none (`costs` say so)."""
        here, later = self.split(stage, costs)
        return here + later

    def split(self, stage: str | None, costs: ProbeCosts) -> tuple[LadderShape, LadderShape]:
        """The probes left after one of `stage`: of the stage under way (the baseline's
        included) with the re-measures a busy machine is expected to cost (`remeasures`),
        and of the stages after it with the confirmation."""
        here, later = self._split(stage, costs)
        extra = self.remeasures(sum(here.counts.values()) + sum(later.counts.values()))
        if extra > 0:
            here = here + self._kinds(LadderShape({ProbeKind(("full",)): extra}), costs)
        return here, later

    def _split(self, stage: str | None, costs: ProbeCosts) -> tuple[LadderShape, LadderShape]:
        shapes = self._stage_shapes()
        if self.search == "grid":  # the baseline once, then every combination once
            combinations = math.prod(s.candidates + 1 for s in shapes)
            remaining = max(0.0, combinations - len(self._seen))
            return self._kinds(LadderShape({ProbeKind(PHASES): remaining}), costs), LadderShape()
        names = [p.name for p in self.plans]
        habits = self.habits(stage)
        done_here = self._stage_probes[stage] if stage is not None else 0
        confirm = self.confirm_pairs if any(s.candidates for s in shapes) else 0
        targets = self._targets(habits) if confirm else []
        if split_target_stage(stage or "")[1] is not None:  # a target's own answer
            here, later = self._in_target(str(stage), targets, done_here, habits)
            return self._kinds(here, costs), self._kinds(later, costs)
        after = sum((shape for _name, _stages, shape in targets), LadderShape())
        if stage is None or stage == BASELINE_STAGE:
            here = ladder_shape([], baseline_repeats=self.baseline_repeats, baseline_done=done_here)
            later = ladder_shape(shapes, baseline_repeats=0, confirm_pairs=confirm, habits=habits)
        elif stage in names:
            at = names.index(stage)
            here = _remainder(stage_shape(shapes[at], habits), done_here)
            later = ladder_shape(
                shapes[at + 1 :], baseline_repeats=0, confirm_pairs=confirm, habits=habits
            )
        else:  # the confirmation
            here, later = self._confirming(done_here, habits), LadderShape()
        return self._kinds(here, costs), self._kinds(later + after, costs)

    def _confirming(self, done: int, habits: Habits) -> LadderShape:
        """A confirmation's pairs left: expected until its fewest are done; then each further
        pair is told as it comes (the count ends exact when it decides at its fewest)."""
        expected = confirmation_pairs(self.confirm_pairs, habits)
        pairs = max(0.0, expected - done / 2)
        if done >= 2 * self.confirm_pairs:
            pairs = 0.0
        return LadderShape({ProbeKind(("full",)): 2 * pairs})

    def _targets(self, habits: Habits) -> list[tuple[str, list[StageShape], LadderShape]]:
        """Each target expected to get an answer of its own after the confirmation (search's
        expected_target_plans): its name, its stages' shapes, and all it is expected to take
        (its stages and its confirmation against the baseline)."""
        found = []
        for target, plans in expected_target_plans(self.adapter.targets, self.plans):
            shapes = stage_shapes(plans, self.base_batch, self.incumbent_batch, fewer=False)
            shape = ladder_shape(shapes, baseline_repeats=0, confirm_pairs=0, habits=habits)
            confirm = confirmation_pairs(self.confirm_pairs, habits)
            shape = shape + LadderShape({ProbeKind(("full",)): 2 * confirm})
            found.append((target.name, shapes, shape))
        return found

    def _in_target(
        self,
        stage: str,
        targets: list[tuple[str, list[StageShape], LadderShape]],
        done: int,
        habits: Habits,
    ) -> tuple[LadderShape, LadderShape]:
        """The probes left in a target's own answer under way (`stage`, STAGE@TARGET), and
        in the targets after it."""
        base, name = split_target_stage(stage)
        names = [n for n, _shapes, _shape in targets]
        at = names.index(name) if name in names else len(names)
        after = sum((shape for _n, _s, shape in targets[at + 1 :]), LadderShape())
        if at == len(names):
            return LadderShape(), after
        shapes = targets[at][1]
        own = [s.name for s in shapes]
        confirm = self._confirming(0, habits)
        if base == CONFIRM_STAGE or stage not in own:
            here = self._confirming(done, habits) if base == CONFIRM_STAGE else LadderShape()
            return here, after
        index = own.index(stage)
        here = _remainder(stage_shape(shapes[index], habits), done)
        rest = ladder_shape(shapes[index + 1 :], baseline_repeats=0, confirm_pairs=0, habits=habits)
        return here, rest + confirm + after

    def seconds_left(self, stage: str | None) -> tuple[float, str]:
        """The time left after one of `stage`, and what it rests on in words ("measured
        here" once this ladder's probes priced it, else the prior's basis): the rest of the
        stage under way at this ladder's costs, later stages at `later_costs`."""
        costs = self.costs()
        here, later = self.split(stage, costs)
        seconds = here.seconds(self.budget, costs) + later.seconds(
            self.budget, self.later_costs(costs)
        )
        return seconds, MEASURED_HERE if self._seen else self.basis

    def keep(self) -> None:
        """This ladder's measured costs, for the next estimate before any probe has run."""
        costs = self.costs()
        if self.record is None or not costs.measured or self.simulated:
            return
        if not self.shares_processes:  # the costs of fresh probes only: no guide
            return
        self.record.remember(
            self.adapter.name,
            self.preset.name,
            self.machine,
            LadderCosts(self.typical_costs(), self.habits(CONFIRM_STAGE)),
        )

    @property
    def incumbent_batch(self) -> float | None:
        """The batch of the configuration a stage's candidates now run on (the baseline's,
        or the last adopted), where a probe has measured it."""
        return self._incumbent_batch or self.base_batch

    def _stage_shapes(self) -> list[StageShape]:
        return stage_shapes(self.plans, self.base_batch, self.incumbent_batch, fewer=False)

    def _guess(self) -> ProbeCosts:
        """The trainer's guess of this ladder's probe costs, or the record of an earlier one."""
        return self._prior

    def _decided(self, stage: str | None) -> list[tuple[int, int, bool]]:
        """(probes, candidates, adopted) of the stages decided before `stage` (all of them at
        the confirmation)."""
        names = [p.name for p in self.plans]
        if stage in names:
            done = self.plans[: names.index(stage)]
        elif stage == CONFIRM_STAGE:
            done = self.plans
        else:
            done = []
        shapes = {s.name: s.candidates for s in self._stage_shapes()}
        adopted = {h.result.stage for h in self._seen if len(h.result.plan.get("phases", ())) > 1}
        return [(self._stage_probes[p.name], shapes[p.name], p.name in adopted) for p in done]

    def _kinds(self, shape: LadderShape, costs: ProbeCosts) -> LadderShape:
        """The probes left, each in a process of its own where none is shared."""
        if costs.shares and self.shares_processes:
            return shape
        fresh: defaultdict[ProbeKind, float] = defaultdict(float)
        for kind, n in shape.counts.items():  # kinds that differed in a warm process add up
            fresh[ProbeKind(kind.phases, fresh=True, new=True)] += n
        return LadderShape(dict(fresh))


def _remainder(shape: LadderShape, done: int) -> LadderShape:
    """What is left of a stage's expected probes after `done` of them."""
    total = sum(shape.counts.values())
    if total <= 0:
        return shape
    share = max(0.0, 1.0 - done / total)
    return LadderShape({k: n * share for k, n in shape.counts.items()})


__all__ = [
    "LadderClock",
    "known_costs",
    "prior_costs",
    "stage_shapes",
]
