"""What is left of a ladder, in probes of each kind and in seconds, as its probes finish.

The session hears every probe (run or taken from the journal) and asks, after
each, how many probes are still expected and what they will cost: the model of
probe.estimate, fed with this ladder's own probes (their measured costs by
kind, and the pairs its decided stages took), else with what an earlier ladder
of the same trainer and preset cost here (tuning.ladder_record), else with the
trainer's StepModel guess. At the end the ladder's figures are kept for the next.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from tuneup.preset.load import ProbePreset
from tuneup.probe.estimate import (
    PAIRS_PER_STAGE,
    LadderShape,
    ProbeCosts,
    guess_costs,
    measured_costs,
    pairs_seen,
    rescaled,
    stage_probes,
)
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, ProbeResult
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.ladder_record import LadderCosts, LadderRecord
from tuneup.tuning.search_records import StagePlan


@dataclass
class LadderClock:
    """A ladder's expected remainder, updated probe by probe.

    Attributes:
        trainer, preset: the session's (the record is kept by both names).
        plans: the stage plans, in order (their candidate counts shape the ladder).
        search: "staged" or "grid".
        baseline_repeats, confirm_pairs: as the search runs them.
        shares_processes: probes may share a worker process (the user did not ask
            for fresh ones, and a probe runs one rank): else each costs a fresh one.
        machine: the machine's tag (ladder_record.machine_tag), for the record.
        record: where ladder costs are kept between sessions; None: nowhere.
    """

    trainer: str
    preset: ProbePreset
    plans: list[StagePlan]
    search: str = "staged"
    baseline_repeats: int = 2
    confirm_pairs: int = 3
    shares_processes: bool = True
    machine: str = ""
    record: LadderRecord | None = None
    _seen: list[ProbeResult] = field(default_factory=list)
    _stage_probes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        # Asked after every probe: the trainer and an earlier ladder's record are read once.
        adapter = load_trainer(self.trainer)
        self.simulated = adapter.simulated  # its probes take no time worth telling
        self._model = adapter.step_model
        self._kept = None
        if self.record is not None and not self.simulated:
            self._kept = self.record.recall(self.trainer, self.preset.name, self.machine)

    def heard(self, stage: str, result: ProbeResult) -> None:
        """One more probe finished (or was taken from the journal)."""
        self._seen.append(result)
        self._stage_probes[stage] += 1

    def costs(self) -> ProbeCosts:
        """What a probe costs here: measured as soon as probes finished."""
        return measured_costs(self._seen, self._guess())

    def left(self, stage: str | None, costs: ProbeCosts) -> LadderShape:
        """Probes still expected after one of `stage` (None: before the first), by kind:
        each in a process of its own where probes share none (`costs` say so)."""
        counts = self._candidate_counts()
        if self.search == "grid":  # the baseline once, then every combination once
            combinations = math.prod(n + 1 for n in counts)
            fresh = 0.0 if stage is not None else 1.0
            return self._kinds(fresh, max(0.0, combinations - len(self._seen) - fresh), costs)
        names = [p.name for p in self.plans]
        pairs = self._pairs(stage)
        confirm = float(self.confirm_pairs if any(counts) else 0)
        done_here = self._stage_probes[stage] if stage is not None else 0
        fresh = served = 0.0
        if stage is None or stage == BASELINE_STAGE:
            fresh += max(0, self.baseline_repeats - done_here)
            later = counts
        elif stage in names:
            at = names.index(stage)
            served += max(0.0, stage_probes(counts[at], pairs) - done_here) if counts[at] else 0
            later = counts[at + 1 :]
        else:  # the confirmation
            later = []
            confirm = max(0.0, confirm - done_here / 2)
        served += sum(stage_probes(n, pairs) for n in later if n > 0)
        return self._kinds(fresh + confirm, served + confirm, costs)

    def keep(self) -> None:
        """This ladder's measured costs, for the next estimate before any probe has run."""
        costs = self.costs()
        if self.record is None or not costs.measured or self.simulated:
            return
        if not self.shares_processes:  # the costs of one kind of probe only: no guide
            return
        pairs = pairs_seen(self._decided(CONFIRM_STAGE), prior=self._pairs(None))
        self.record.remember(
            self.trainer,
            self.preset.name,
            self.machine,
            LadderCosts(costs, pairs, self.preset.budget),
        )

    def _candidate_counts(self) -> list[int]:
        return [0 if p.skip_reason else len(p.candidates) for p in self.plans]

    def _guess(self) -> ProbeCosts:
        """StepModel's guess of this ladder's probe costs, or the record of an earlier one."""
        kept = self._kept
        if kept is None:
            return guess_costs(self.preset.budget, self._model)
        return rescaled(kept.costs, kept.budget, self.preset.budget, self._model)

    def _decided(self, stage: str | None) -> list[tuple[int, int]]:
        """(probes, candidates) of the stages decided before `stage` (all, at the confirmation)."""
        names = [p.name for p in self.plans]
        if stage in names:
            done = self.plans[: names.index(stage)]
        elif stage == CONFIRM_STAGE:
            done = self.plans
        else:
            done = []
        counts = self._candidate_counts()
        return [(self._stage_probes[p.name], counts[i]) for i, p in enumerate(done)]

    def _pairs(self, stage: str | None) -> float:
        """The pairs a decision takes: this session's stages so far, else an earlier one's."""
        prior = self._kept.pairs_per_stage if self._kept is not None else PAIRS_PER_STAGE
        return pairs_seen(self._decided(stage), prior=prior)

    def _kinds(self, fresh: float, served: float, costs: ProbeCosts) -> LadderShape:
        """The probes left, each in a process of its own where none is shared."""
        if not self.shares_processes or costs.served_s >= costs.fresh_s:
            return LadderShape(fresh + served, 0.0)
        return LadderShape(fresh, served)
