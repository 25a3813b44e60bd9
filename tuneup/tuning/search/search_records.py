"""What a search is given and what it gives back: the plan, the decisions, the outcome.

Plain records shared by the staged search (search.py), the grid (grid.py),
the confirmation (confirm.py) and everything downstream that reads an
outcome (verdicts, the session, the app).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuneup.errors import DataFault, ExitCode, UsageError
from tuneup.probe.targets import Target
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, Candidate, ProbeResult, Status
from tuneup.tuning.search.paired import PairedEvidence, PhaseNoise, Verdict

Measure = Callable[[str, Candidate, dict[str, Any]], ProbeResult]
Already = Callable[[str, str], ProbeResult | None]

BASELINE = BASELINE_STAGE
CONFIRM = CONFIRM_STAGE
LOAD = "load"  # StageDecision.cause: a busy machine kept the stage unmeasured
CONFINED = "confined"  # ... the probes ran on fewer threads under load (probe/confine.py)
FAILED = "failed"  # StageDecision.cause: its probes failed
GRID = "grid"
INCUMBENT = "incumbent"


@dataclass
class StagePlan:
    """One stage as the search sees it: candidates on top of the incumbent, or why it is skipped."""

    name: str
    candidates: list[Candidate]
    skip_reason: str | None = None
    # "label: why" of candidates left out before any probe (e.g. no compiler for torch.compile).
    not_tried: list[str] = field(default_factory=list)
    # The labels of those the time budget left out (its dearest): the headline names them.
    left_for_time: list[str] = field(default_factory=list)
    # Re-propose on the incumbent when the stage's turn comes (a stage's candidates
    # may depend on what earlier stages adopted, e.g. CUDA graphs after fp16 won).
    refresh: Callable[[dict[str, Any]], StagePlan] | None = None
    # The phase whose figure decides the stage ("io", "synthetic" or "full": the
    # stage's declaration, as far as the trainer measures phases apart).
    judged: str = "full"
    # The relative gain the stage is expected to bring (its declaration): what a
    # time budget keeps first.
    expected_gain: float = 0.0


@dataclass(frozen=True)
class ReferenceRun:
    """A reference candidate and its probe: measured for comparison, never adopted."""

    candidate: Candidate
    result: ProbeResult


@dataclass
class StageDecision:
    """What one stage decided: the adopted label (None: incumbent kept), its gain and why.

    `references` holds the stage's reference runs and `incumbent` the probe they
    compare with (the incumbent the stage started from, pooled over its re-measures).
    `evidence` is the paired comparison that decided (None: no candidate got that far).
    `phase` is the phase that decided it ("full" when FULL disagreed with min(IO,
    SYNTHETIC) and the stage was decided again there); `composition` says how the
    adopted configuration's FULL compared with min(IO, SYNTHETIC).
    """

    stage: str
    winner: str | None
    gain_pct: float | None
    reason: str
    failed: list[str] = field(default_factory=list)  # "label: status (reason)" of variants
    references: list[ReferenceRun] = field(default_factory=list)
    incumbent: ProbeResult | None = None
    evidence: PairedEvidence | None = None
    not_tried: list[str] = field(default_factory=list)  # "label: why", from the plan
    left_for_time: list[str] = field(default_factory=list)  # labels, from the plan
    phase: str = "full"
    composition: str = ""
    compared: str = ""  # the candidate `evidence` compares with the incumbent
    # Why the stage could not be measured: no candidate gave a figure to compare, and not
    # because the knob itself fails here (out of memory, diverged, unsupported). "" when
    # it was measured.
    unmeasured: str = ""
    # What kept it unmeasured, as a row says it: LOAD (a busy machine spoiled its probes,
    # or the ladder stopped for load before it) or FAILED (its probes failed); "" when
    # it was measured.
    cause: str = ""

    @property
    def unresolved(self) -> bool:
        """No winner, and the last comparison left the needed gain neither shown nor ruled
        out at this machine's noise."""
        return self.winner is None and (
            self.evidence is not None and self.evidence.verdict is Verdict.UNRESOLVED
        )


@dataclass(frozen=True)
class ConfirmAttempt:
    """One path confirmed against the baseline in interleaved pairs, and what the pairs said."""

    path: tuple[str, ...]
    values: dict[str, Any]
    evidence: PairedEvidence
    baseline_sps: tuple[float, ...]
    best_sps: tuple[float, ...]
    failed: int = 0

    @property
    def upheld(self) -> bool:
        return self.evidence.verdict is Verdict.ADOPT


@dataclass
class Confirmation:
    """Interleaved A/B runs of baseline and recommendation: per-pair FULL samples/s and ratios.

    `attempts` are every path tried, the search's pick first; the figures
    above them are the upheld attempt's (or, when none was upheld, the
    search's pick's, so the screen can say by how much it failed).
    """

    baseline_sps: list[float]
    best_sps: list[float]
    ratios: list[float]
    speedup: float | None  # median of the per-pair ratios
    low: float | None  # smallest per-pair ratio
    high: float | None  # largest per-pair ratio
    failed: int = 0  # pairs dropped because one of the two probes did not run ok
    attempts: list[ConfirmAttempt] = field(default_factory=list)
    search_path: list[str] = field(default_factory=list)  # what the search adopted
    path: list[str] = field(default_factory=list)  # what the confirmation upheld

    @property
    def upheld(self) -> ConfirmAttempt | None:
        return next((a for a in self.attempts if a.upheld), None)

    @property
    def status(self) -> str:
        """ "confirmed" (the search's pick), "partly confirmed" or "not confirmed"."""
        if not self.path:
            return "not confirmed"
        return "confirmed" if self.path == self.search_path else "partly confirmed"


@dataclass
class TargetOutcome:
    """What one target gets.

    Attributes:
        target: the target.
        values: the knob values it runs.
        same: it runs the recommendation as it is (the figures are the recommendation's).
        left_out: the recommended knobs it cannot run, each with why.
        decisions: its stages' decisions (named STAGE@TARGET).
        attempt: its confirmation against the baseline (None: none ran).
        best: its confirmed FULL figures (None: not confirmed).
        note: what a user must know of it, in one line ("" for nothing).
    """

    target: Target
    values: dict[str, Any]
    same: bool = False
    left_out: dict[str, str] = field(default_factory=dict)
    decisions: list[StageDecision] = field(default_factory=list)
    attempt: ConfirmAttempt | None = None
    best: ProbeResult | None = None
    note: str = ""

    @property
    def upheld(self) -> bool | None:
        return None if self.attempt is None else self.attempt.upheld


@dataclass
class SearchOutcome:
    """Everything a search found, in the order it happened.

    `best_values`, `best` and `path` are the recommendation: what the
    confirmation upheld (the search's own pick is `confirmation.search_path`).
    """

    baseline: ProbeResult
    best_values: dict[str, Any]
    best: ProbeResult
    probes: list[ProbeResult]
    stage_decisions: list[StageDecision]
    margin: float  # the smallest gain the session could have adopted (paired.resolvable)
    confirmation: Confirmation | None
    base_values: dict[str, Any] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)  # labels recommended, in stage order
    search: str = "staged"
    noise: PhaseNoise | None = None
    search_gain: float | None = None  # the search's pick over the baseline, from its own probes
    drift: float | None = None  # the baseline's last probe over its first, minus 1
    # Why the ladder stopped before its end (a signal, the time budget, the allocation);
    # empty when it ran to its end. A partial outcome recommends the best configuration its
    # stages' pairs upheld so far; `not_run` names the stages it did not finish.
    partial: str = ""
    not_run: list[str] = field(default_factory=list)
    # The stages the time budget left out (before_stage's reason) or cut short (StageCut),
    # and whose the limit was: "budget" (the user's --budget) or "allocation" (its end).
    left_out: list[str] = field(default_factory=list)
    limit: str = "budget"
    # Each other target's answer (targets.py), in the trainer's order; [] when it declares
    # none, or for a search that tunes none (the grid, a stopped ladder).
    targets: list[TargetOutcome] = field(default_factory=list)

    @property
    def spoiled(self) -> list[ProbeResult]:
        """The probes a busy machine spoiled (contended: measured again, or left out): what
        it took of the ladder, so a budget a load ate says so."""
        return [p for p in self.probes if p.ok and p.contended]

    @property
    def measured(self) -> int:
        """Probes actually run or reused (skipped stages excluded)."""
        return sum(1 for p in self.probes if p.status is not Status.SKIPPED)


class StageCut(Exception):
    """Raised by a search's `measure` to end the stage under way before it decides (the
    session's time budget ran short): its probes so far decide nothing, and the stage
    keeps its incumbent. The message says why."""


@dataclass
class SearchProgress:
    """Where a staged search stands, kept up to date as it goes: a session stopped mid-ladder
    (a signal, the time budget, the allocation's end) still has its best configuration so
    far, upheld by its stages' pairs, to report (search.partial_outcome).

    Attributes:
        values: the incumbent's knob values (the adopted path applied to the base).
        incumbent: the incumbent's comparable probes.
        stage: the stage under way; None before the first and after the last.
        started: the stages begun, in order (a skipped one too).
        left_out: the stages the time budget left out or cut short, in order.
    """

    base_values: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    baseline: ProbeResult | None = None
    incumbent: list[ProbeResult] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    steps: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    decisions: list[StageDecision] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    noise: PhaseNoise | None = None
    stage: str | None = None
    started: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


class BaselineFailed(UsageError):
    """The base configuration itself did not run: nothing can be compared against it."""

    def __init__(self, result: ProbeResult) -> None:
        detail = f": {result.reason}" if result.reason else ""
        if result.reason.startswith(f"{DataFault.__name__}:"):
            # the line names the file and what is wrong with it: the config is not at fault
            fix = "then run again"
        elif result.transient or result.status is Status.TIMEOUT:
            # Not the config's fault as far as anyone can tell: not "bad input" either.
            self.exit_code = ExitCode.PROBE_FAILED
            fix = "check the node (`tuneup doctor`) and run again"
        else:
            fix = (
                "fix the base config in the preset's train section (`tuneup presets show "
                "NAME` prints it; save your own copy and pass it with --preset) and run again"
            )
        super().__init__(f"the baseline probe ended '{result.status.value}'{detail}; {fix}")
        self.result = result
