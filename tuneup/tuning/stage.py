"""One stage of the staged search: screen its candidates, pursue the best in pairs, decide.

The stage's candidates are screened once each between two probes of the
incumbent (screen.py); the most promising ones (at most `PURSUED`, best screen
first) are then compared with the incumbent in alternating pairs
(`SearchRunner.compare`) until the paired rule adopts one or none is left.
Reference candidates are measured with the others and kept on the decision,
never adopted (search.py's module docstring).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.types import Candidate, ProbeResult, probe_key
from tuneup.tuning.paired import PairedEvidence, Verdict
from tuneup.tuning.screen import Screen, by_promise, close_screen, hopeless, screen_again
from tuneup.tuning.search_records import INCUMBENT, ReferenceRun, StageDecision, StagePlan
from tuneup.tuning.search_runner import SearchRunner, Series, comparable, ran

PURSUED = 2  # candidates of one stage compared in pairs at most
SUSPECT = 0.25  # a best screen this much slower than the incumbent is measured once more
# A screen whose FULL trials all fall this far short of the incumbent's anchor may stop
# early (stats.clearly_slower): beyond SUSPECT, so it is no closer to winning than a
# screen the stage would give up on unless it were the best (which is measured again).
EARLY_STOP = 0.30


@dataclass(frozen=True)
class _Stage:
    """One stage under way: what it runs on, and what its decision will carry.

    `failed` grows as the stage goes on (re-screens, comparisons); every
    decision shares it.
    """

    plan: StagePlan
    values: dict[str, Any]
    incumbent: Series
    runner: SearchRunner
    failed: list[str] = field(default_factory=list)
    references: list[ReferenceRun] = field(default_factory=list)

    def decided(
        self,
        winner: str | None,
        gain: float | None,
        reason: str,
        evidence: PairedEvidence | None = None,
    ) -> StageDecision:
        return StageDecision(
            self.plan.name,
            winner,
            gain,
            reason,
            self.failed,
            self.references,
            self.incumbent.summary(),
            evidence,
            list(self.plan.not_tried),
        )


_Measured = list[tuple[Candidate, ProbeResult, int]]
"""Candidates' first probes, each with its index among the runner's probes."""

_Winner = tuple[Candidate, Series]


def run_stage(
    plan: StagePlan,
    values: dict[str, Any],
    incumbent: Series,
    runner: SearchRunner,
    max_pairs: int,
) -> tuple[StageDecision, tuple[Candidate, Series] | None]:
    """Screen a stage's candidates between two incumbent probes (A B.. A); adopt on pairs only.

    The incumbent is measured before the candidates (unless the last probe
    was it) and again after them, so each screen is compared with the
    incumbent as it stood at that moment (interpolated on the log scale), and
    a candidate next to an anchor already forms a pair with it (one pair per
    probe: pairs never share a probe). When the two anchors disagree by more
    than two pairs' noise (and the floor) the machine changed speed during the
    screen: the screen runs once more, and if the anchors disagree again no
    candidate is given up on its screen alone.
    """
    if runner.last_key != probe_key(values) or incumbent.latest is None:
        incumbent.add(runner.run(plan.name, Candidate(INCUMBENT, {}), values))
    anchor, anchor_at = incumbent.latest, len(runner.probes) - 1
    # No early stop on a machine whose repeats show unexplained bursts: one probe is
    # then no guide, and every candidate is pursued in pairs.
    stop_below = None if anchor is None or runner.noise.bursty else anchor * (1 - EARLY_STOP)
    measured, references = _measure_candidates(plan, values, runner, stop_below)
    failed = [_failure(c, r) for c, r, _ in measured if not comparable(r)]
    failed += [_failure(r.candidate, r.result) for r in references if not ran(r.result)]
    stage = _Stage(plan, values, incumbent, runner, failed, references)

    if not measured:
        if references:
            return stage.decided(None, None, "reference runs only: nothing to adopt"), None
        return stage.decided(None, None, "every candidate equals the current config"), None
    ok = [(c, r, at) for c, r, at in measured if comparable(r)]
    if not ok or anchor is None:
        return stage.decided(None, None, "no candidate ran ok"), None

    screens, shifted = _screen_stage(stage, ok, anchor, anchor_at)
    noise = runner.noise
    screens = by_promise(screens, noise.sigma, noise.resolvable(max_pairs))
    return _pursue(stage, screens, shifted, max_pairs)


def _measure_candidates(
    plan: StagePlan, values: dict[str, Any], runner: SearchRunner, stop_below: float | None
) -> tuple[_Measured, list[ReferenceRun]]:
    """Each distinct candidate once, on top of the incumbent; references kept apart.

    A candidate (not a reference, whose figures are wanted whole) may stop early
    below `stop_below` samples/s (Candidate.stop_below_sps).
    """
    measured: _Measured = []
    references: list[ReferenceRun] = []
    seen = {probe_key(values)}
    for cand in plan.candidates:
        merged = {**values, **cand.values}
        key = probe_key(merged, cand.ranks)
        if key in seen:
            continue  # the incumbent (or an earlier candidate) already stands for it
        seen.add(key)
        asked = cand if cand.reference else dataclasses.replace(cand, stop_below_sps=stop_below)
        result = runner.run(plan.name, asked, merged)
        if cand.reference:
            references.append(ReferenceRun(cand, result))
        else:
            measured.append((cand, result, len(runner.probes) - 1))
    return measured, references


def _screen_stage(
    stage: _Stage, ok: _Measured, anchor: float, anchor_at: int
) -> tuple[list[Screen], bool]:
    """Close the screen with the incumbent; when the anchors disagree, screen once more."""
    plan, values, incumbent, runner = stage.plan, stage.values, stage.incumbent, stage.runner
    noise = runner.noise
    screens, shifted = close_screen(plan, values, incumbent, runner, ok, anchor, anchor_at)
    if shifted and incumbent.latest is not None:
        # The machine changed speed during the screen: screen once more, from the new anchor.
        noise.shifted()
        noise.seen(probe_key(values), incumbent.latest)  # the new anchor starts the chain again
        anchor, anchor_at = incumbent.latest, len(runner.probes) - 1
        again = []
        for c, _, _ in ok:
            result = runner.run(plan.name, c, {**values, **c.values})
            if comparable(result):
                again.append((c, result, len(runner.probes) - 1))
            else:
                stage.failed.append(_failure(c, result))
        if again:
            screens, shifted = close_screen(
                plan, values, incumbent, runner, again, anchor, anchor_at
            )
    return screens, shifted


def _pursue(
    stage: _Stage, screens: list[Screen], shifted: bool, max_pairs: int
) -> tuple[StageDecision, _Winner | None]:
    """The most promising candidates against the incumbent in pairs, best first; adopt or keep."""
    plan, values, incumbent, runner = stage.plan, stage.values, stage.incumbent, stage.runner
    noise = runner.noise
    last: tuple[Candidate, PairedEvidence] | None = None
    for rank, screen in enumerate(screens[:PURSUED]):
        if not (shifted or noise.bursty) and hopeless(screen.gain, noise):
            if rank > 0 or screen.gain > math.log1p(-SUSPECT):
                break  # best first: the rest are no closer
            # Even the best is far slower: a real loser, or a burst of load nothing
            # reported. One more probe, next to the closing anchor, tells them apart.
            again = screen_again(plan, values, screen, incumbent, runner)
            if again is None or hopeless(again.gain, noise):
                break
            screen = again
        cand = screen.cand
        series = Series([screen.result])
        found = runner.compare(
            plan.name,
            Candidate(INCUMBENT, {}),
            values,
            cand,
            {**values, **cand.values},
            base_series=incumbent,
            cand_series=series,
            rule={"min_pairs": 2, "max_pairs": max_pairs, "min_reject": 1},
            pairs=list(screen.pairs),
        )
        if found.failure is not None:
            stage.failed.append(_failure(cand, found.failure))
        evidence = found.evidence
        last = (cand, evidence)
        if evidence.verdict is Verdict.ADOPT:
            gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
            numbers = _numbers(incumbent, series, evidence)
            return (
                stage.decided(cand.label, gain_pct, f"{cand.label} wins: {numbers}", evidence),
                (cand, series),
            )
    return _kept(stage, screens, last), None


def _kept(
    stage: _Stage, screens: list[Screen], last: tuple[Candidate, PairedEvidence] | None
) -> StageDecision:
    """The incumbent stays: why, from the last comparison, or the best screen when none ran."""
    if last is None:
        best = screens[0]
        why = (
            f"no candidate is faster (best {best.cand.label}: {_sps(best.incumbent_sps)} -> "
            f"{_sps(best.result.full_sps or 0.0)} samples/s, {100 * math.expm1(best.gain):+.1f}%; "
            f"a gain must clear {100 * stage.runner.noise.needed:.1f}%)"
        )
        return stage.decided(None, 100 * math.expm1(best.gain), why)
    cand, evidence = last
    gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
    if (evidence.speedup or 0.0) > 1.0:
        why = f"{cand.label} is faster but within the noise margin, kept the simpler config"
    else:
        why = f"no candidate is faster (best {cand.label})"
    return stage.decided(None, gain_pct, f"{why}: {evidence.why}", evidence)


def _numbers(incumbent: Series, series: Series, evidence: PairedEvidence) -> str:
    inc, cand = incumbent.summary().full_sps, series.summary().full_sps
    return (
        f"{_sps(inc or 0.0)} -> {_sps(cand or 0.0)} samples/s "
        f"({100 * ((evidence.speedup or 1.0) - 1):+.1f}% paired, {evidence.why})"
    )


def _failure(cand: Candidate, result: ProbeResult) -> str:
    kind = " (reference)" if cand.reference else ""
    if ran(result) and result.contention is not None:
        return f"{cand.label}{kind}: contended ({result.contention.note})"
    detail = f" ({result.reason})" if result.reason else ""
    return f"{cand.label}{kind}: {result.status.value}{detail}"


def _sps(value: float) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"
