"""The ladder in one row per decision: what `tuneup probe` shows at its end by default.

One row for the baseline, one per stage (what it decided, on which phase, by how much,
over how many pairs and probes) and one for the confirmation. Short cells, so the table
fits an 80-column terminal; each stage's reasons with their numbers follow it in words
(verdicts.stage_summary), and every probe is in `--probes`, the journal and `--json`.

Pure: a SearchOutcome in, rows of text out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tuneup.probe.describe import sps_text
from tuneup.probe.targets import target_stage
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, USER_SKIP, ProbeResult
from tuneup.tuning.search.search_records import (
    CONFINED,
    FAILED,
    LOAD,
    SearchOutcome,
    StageDecision,
    TargetOutcome,
)

# What kept a stage unmeasured, in a row's words (StageDecision.cause).
CAUSES = {
    LOAD: "stopped by load",
    CONFINED: "left out under load",
    FAILED: "its probes failed",
}
NOT_RUN = "not run: the ladder stopped"


def stopped_during(probes: int) -> str:
    """The words of the stage under way when the ladder stopped: it ran probes, so it is
    never said as not run."""
    return f"stopped during it ({probes} probe{'' if probes == 1 else 's'})"


def stage_counts(probes: Iterable[ProbeResult]) -> Counter[str]:
    """The probes of each stage, as its row counts them: a failed attempt run again at once
    (`retried`, journaled beside the attempt that replaced it) is one probe, not two."""
    return Counter(p.stage for p in probes if not p.retried)


def unfinished(
    not_run: Sequence[str], probes: Iterable[ProbeResult]
) -> tuple[list[tuple[str, int]], list[str]]:
    """The stages a stopped ladder did not finish (a partial summary's `not_run`), split:
    those under way when it stopped, with the probes each ran, and those it never began."""
    counts = stage_counts(probes)
    under_way = [(name, counts[name]) for name in not_run if counts[name]]
    return under_way, [name for name in not_run if not counts[name]]


@dataclass(frozen=True)
class StageRow:
    """One decision of the ladder.

    Attributes:
        stage: the stage, "baseline" or "confirm".
        result: what it decided, in a few words.
        phase: the phase its figures are on ("" where nothing was compared).
        change: its gain on that phase, paired against the incumbent (the baseline for
            the confirmation); "" where nothing was compared.
        pairs: the interleaved pairs that decided it ("" without pairs).
        probes: the probes it ran (retries and skipped ones included).
    """

    stage: str
    result: str
    phase: str = ""
    change: str = ""
    pairs: str = ""
    probes: int = 0


def stage_rows(outcome: SearchOutcome) -> list[StageRow]:
    """The baseline's row, each stage's, then the confirmation's (when one ran)."""
    counts = stage_counts(outcome.probes)
    rows = [_baseline_row(outcome, counts[BASELINE_STAGE])]
    rows += [_stage_row(d, counts[d.stage]) for d in outcome.stage_decisions]
    decided = {d.stage for d in outcome.stage_decisions}
    under_way, never = unfinished([n for n in outcome.not_run if n not in decided], outcome.probes)
    # a ladder stopped during or before them: their row says so, not that they failed
    rows += [StageRow(name, stopped_during(n), probes=n) for name, n in under_way]
    rows += [StageRow(name, NOT_RUN) for name in never]
    confirm = _confirm_row(outcome, counts[CONFIRM_STAGE])
    if confirm is not None:
        rows.append(confirm)
    for answer in outcome.targets:  # a target's own answer: its stages, its confirmation
        rows += [_stage_row(d, counts[d.stage]) for d in answer.decisions]
        row = _target_confirm_row(answer, counts)
        if row is not None:
            rows.append(row)
    return rows


def _target_confirm_row(answer: TargetOutcome, counts: Counter[str]) -> StageRow | None:
    attempt = answer.attempt
    if attempt is None:
        return None
    stage = target_stage(CONFIRM_STAGE, answer.target.name)
    ev = attempt.evidence
    change = "" if ev.speedup is None else f"{100 * (ev.speedup - 1):+.1f}%"
    result = f"upheld {' + '.join(attempt.path)}" if attempt.upheld else "not upheld: baseline kept"
    return StageRow(stage, result, "FULL", change, str(ev.pairs), counts[stage])


def _baseline_row(outcome: SearchOutcome, probes: int) -> StageRow:
    runs = [p for p in outcome.probes if p.stage == BASELINE_STAGE and p.ok]
    rate = f"{sps_text(outcome.baseline.full_sps)} samples/s"
    if runs and all(p.contended for p in runs):
        rate += " (contended)"
    return StageRow(BASELINE_STAGE, rate, "FULL", probes=probes)


def _stage_row(decision: StageDecision, probes: int) -> StageRow:
    evidence = decision.evidence
    compared = evidence is not None or decision.gain_pct is not None
    return StageRow(
        decision.stage,
        _result(decision) + _failed(decision),
        decision.phase.upper() if compared else "",
        "" if decision.gain_pct is None else f"{decision.gain_pct:+.1f}%",
        "" if evidence is None else str(evidence.pairs),
        probes,
    )


def _result(decision: StageDecision) -> str:
    reason = decision.reason
    if decision.winner:
        return f"adopted {decision.winner}"
    if reason.startswith(USER_SKIP):
        return reason
    if reason.startswith("skipped"):
        return reason.split(" (", 1)[0]  # its why in full is in the lines below
    if decision.unmeasured:
        return f"not measured: {CAUSES.get(decision.cause, 'its probes failed')}"
    if decision.unresolved:
        return f"unresolved: {decision.compared}"
    if reason.startswith("stopped before it decided"):
        return "stopped before it decided"
    if decision.evidence is not None or decision.gain_pct is not None:
        return f"kept (best {decision.compared})" if decision.compared else "kept"
    return reason.split(":", 1)[0]


def _failed(decision: StageDecision) -> str:
    """ "; 1 did not run" where some of its candidates failed or were not supported."""
    if not decision.failed or decision.unmeasured:
        return ""
    return f"; {len(decision.failed)} did not run"


def _confirm_row(outcome: SearchOutcome, probes: int) -> StageRow | None:
    conf = outcome.confirmation
    if conf is None:
        return None
    upheld = conf.upheld
    shown = upheld or (conf.attempts[0] if conf.attempts else None)
    evidence = shown.evidence if shown is not None else None
    if upheld is not None:
        result = f"upheld {' + '.join(upheld.path)}"
    else:
        result = "not upheld: baseline kept"
    change = ""
    if evidence is not None and evidence.speedup is not None:
        change = f"{100 * (evidence.speedup - 1):+.1f}%"
    pairs = "" if evidence is None else str(evidence.pairs)
    return StageRow(CONFIRM_STAGE, result, "FULL", change, pairs, probes)
