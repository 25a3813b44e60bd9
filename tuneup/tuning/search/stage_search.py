"""One stage of the staged search: screen its candidates, pursue the best in pairs, decide.

A stage is judged on the phase its knobs move (StagePlan.judged: IO for a
loader knob, SYNTHETIC for a compute knob, FULL otherwise), and its screens and
pairs measure that phase alone. The stage's candidates are screened once each
between two probes of the incumbent (screen.py); the most promising ones (at
most `PURSUED`, best screen first) are then compared with the incumbent in
alternating pairs (`SearchRunner.compare`) until the paired rule adopts one,
rules them out, or leaves one unresolved at this machine's noise.

A candidate adopted on IO or SYNTHETIC is then measured whole (composition.py):
its FULL is checked against min(IO, SYNTHETIC), the bound a real loop reaches
when loading and compute overlap. Where the two disagree beyond the noise, the
stage is decided again on FULL, in pairs, and says so.

Reference candidates are measured with the others and kept on the decision,
never adopted (search.py's module docstring).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import Any

from tuneup.probe.hostload import under_load_text
from tuneup.probe.types import Candidate, ProbeResult, Status, probe_key
from tuneup.tuning.search.composition import beyond_reach, check_adoption
from tuneup.tuning.search.load import load_words
from tuneup.tuning.search.paired import PairedEvidence, Verdict
from tuneup.tuning.search.screening import Screen, by_promise, close_screen, hopeless, screen_again
from tuneup.tuning.search.search_records import (
    FAILED,
    INCUMBENT,
    LOAD,
    ReferenceRun,
    StageDecision,
    StagePlan,
)
from tuneup.tuning.search.search_runner import (
    SearchRunner,
    Series,
    comparable,
    failure_text,
    ran,
)

PURSUED = 2  # candidates of one stage compared in pairs at most
SUSPECT = 0.25  # a best screen this much slower than the incumbent is measured once more
# A screen whose trials all fall this far short of the incumbent's anchor may stop
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
    first: int = 0  # the stage's first probe among the runner's

    @property
    def phase(self) -> str:
        return self.plan.judged

    def ask(self, label: str, values: dict[str, Any] | None = None) -> Candidate:
        """A probe of this stage: its judged phase alone."""
        return Candidate(label, dict(values or {}), judged=self.phase, whole=False)

    def decided(
        self,
        winner: str | None,
        gain: float | None,
        reason: str,
        evidence: PairedEvidence | None = None,
        *,
        phase: str | None = None,
        composition: str = "",
        compared: str = "",
    ) -> StageDecision:
        load = under_load_text(self.runner.probes[self.first :])
        return StageDecision(
            self.plan.name,
            winner,
            gain,
            f"{reason}; {load}" if load else reason,
            self.failed,
            self.references,
            self.incumbent.summary() if self.incumbent.results else None,
            evidence,
            list(self.plan.not_tried),
            list(self.plan.left_for_time),
            phase=phase or self.phase,
            composition=composition,
            compared=compared or (winner or ""),
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
    was it, measuring the stage's phase) and again after them, so each screen
    is compared with the incumbent as it stood at that moment (interpolated on
    the log scale), and a candidate next to an anchor already forms a pair with
    it (one pair per probe: pairs never share a probe). When the two anchors
    disagree by more than two pairs' noise (and the floor) the machine changed
    speed during the screen: the screen runs once more, and if the anchors
    disagree again no candidate is given up on its screen alone.
    """
    stage = _Stage(plan, values, incumbent, runner, first=len(runner.probes))
    phase = stage.phase
    if runner.last_key != probe_key(values) or incumbent.latest_of(phase) is None:
        incumbent.add(runner.run(plan.name, stage.ask(INCUMBENT), values))
    anchor, anchor_at = incumbent.latest_of(phase), len(runner.probes) - 1
    noise = runner.noise.of(phase, values)
    # No early stop on a machine whose repeats show unexplained bursts: one probe is
    # then no guide, and every candidate is pursued in pairs.
    stop_below = None if anchor is None or noise.bursty else anchor * (1 - EARLY_STOP)
    measured, references = _measure_candidates(stage, stop_below)
    failed = [_failure(c, r, phase) for c, r, _ in measured if not comparable(r, phase)]
    failed += [_failure(r.candidate, r.result, "full") for r in references if not ran(r.result)]
    stage.failed.extend(failed)
    stage.references.extend(references)

    if not measured:
        if references:
            return stage.decided(None, None, "reference runs only: nothing to adopt"), None
        return stage.decided(None, None, "every candidate equals the current config"), None
    ok = [(c, r, at) for c, r, at in measured if comparable(r, phase)]
    if not ok or anchor is None:
        decision = stage.decided(None, None, "no candidate ran ok")
        results = [r for _, r, _ in measured]
        why = unmeasured_why(results, phase)
        cause = "" if not why else (LOAD if all(ran(r, phase) for r in results) else FAILED)
        return replace(decision, unmeasured=why, cause=cause), None

    screens, shifted = _screen_stage(stage, ok, anchor, anchor_at)
    screens = by_promise(screens, noise.sigma, noise.resolvable(max_pairs))
    return _pursue(stage, screens, shifted, max_pairs)


def _measure_candidates(
    stage: _Stage, stop_below: float | None
) -> tuple[_Measured, list[ReferenceRun]]:
    """Each distinct candidate once, on top of the incumbent; references kept apart.

    A candidate is measured on the stage's phase and may stop early below
    `stop_below` samples/s of it; a reference, whose figures are wanted whole, is
    measured whole.
    """
    plan, values, runner = stage.plan, stage.values, stage.runner
    measured: _Measured = []
    references: list[ReferenceRun] = []
    seen = {probe_key(values)}
    for cand in plan.candidates:
        merged = {**values, **cand.values}
        key = probe_key(merged, cand.ranks)
        if key in seen:
            continue  # the incumbent (or an earlier candidate) already stands for it
        seen.add(key)
        if cand.reference:
            result = runner.run(plan.name, cand, merged)
            references.append(ReferenceRun(cand, result))
            continue
        asked = dataclasses.replace(
            cand, judged=stage.phase, whole=False, stop_below_sps=stop_below
        )
        result = runner.run(plan.name, asked, merged)
        measured.append((asked, result, len(runner.probes) - 1))
    return measured, references


def _screen_stage(
    stage: _Stage, ok: _Measured, anchor: float, anchor_at: int
) -> tuple[list[Screen], bool]:
    """Close the screen with the incumbent; when the anchors disagree, screen once more.

    A stage of one candidate on a phase whose noise is known quiet needs no closing
    anchor: its screen already pairs with the opening one, and a shift of the machine's
    speed would show in the pairs that follow.
    """
    plan, values, incumbent, runner = stage.plan, stage.values, stage.incumbent, stage.runner
    phase = stage.phase
    quiet = runner.noise.of(phase, values).quiet
    if quiet and len(ok) == 1 and ok[0][2] == anchor_at + 1:
        cand, result, _ = ok[0]
        return [Screen(cand, result, anchor, ((anchor, result.rate(phase) or 0.0),))], False
    screens, shifted = close_screen(
        stage.ask(INCUMBENT), plan, values, incumbent, runner, ok, anchor, anchor_at
    )
    latest = incumbent.latest_of(phase)
    if shifted and latest is not None:
        # The machine changed speed during the screen: screen once more, from the new anchor.
        runner.noise.shifted(phase, values)
        runner.noise.seen(probe_key(values), {phase: latest}, values)  # starts the chain again
        anchor, anchor_at = latest, len(runner.probes) - 1
        again = []
        for c, _, _ in ok:
            result = runner.run(
                plan.name, dataclasses.replace(c, stop_below_sps=None), {**values, **c.values}
            )
            if comparable(result, phase):
                again.append((c, result, len(runner.probes) - 1))
            else:
                stage.failed.append(_failure(c, result, phase))
        if again:
            screens, shifted = close_screen(
                stage.ask(INCUMBENT), plan, values, incumbent, runner, again, anchor, anchor_at
            )
    return screens, shifted


def _pursue(
    stage: _Stage, screens: list[Screen], shifted: bool, max_pairs: int
) -> tuple[StageDecision, _Winner | None]:
    """The most promising candidates against the incumbent in pairs, best first; adopt or keep.

    A candidate left unresolved at this machine's noise is reported so (its estimate and
    interval) and the next is pursued: screens within the noise tie, so the next may be
    the better one.
    """
    plan, values, incumbent, runner = stage.plan, stage.values, stage.incumbent, stage.runner
    phase = stage.phase
    noise = runner.noise.of(phase, values)
    last: tuple[Candidate, PairedEvidence] | None = None
    unresolved: tuple[Candidate, PairedEvidence] | None = None
    for rank, screen in enumerate(screens[:PURSUED]):
        if not (shifted or noise.bursty) and hopeless(screen.gain, noise):
            if rank > 0 or screen.gain > math.log1p(-SUSPECT) or noise.quiet:
                break  # best first: the rest are no closer
            # Even the best is far slower: a real loser, or a burst of load nothing
            # reported. One more probe, next to the closing anchor, tells them apart.
            again = screen_again(plan, values, screen, incumbent, runner, phase)
            if again is None or hopeless(again.gain, noise):
                break
            screen = again
        cand = dataclasses.replace(screen.cand, stop_below_sps=None)
        series = Series([screen.result])
        if not screen.pairs and runner.last_key == probe_key(values):
            # Not next to an anchor in the screen: measured once more right after the
            # incumbent's latest probe, it pairs with that one.
            again = screen_again(plan, values, screen, incumbent, runner, phase)
            if again is not None:
                series.add(again.result)
                screen = again
        found = runner.compare(
            plan.name,
            stage.ask(INCUMBENT),
            values,
            cand,
            {**values, **cand.values},
            base_series=incumbent,
            cand_series=series,
            rule={
                "min_pairs": runner.noise.min_pairs(phase, values),
                "max_pairs": max_pairs,
                "min_reject": 1,
            },
            phase=phase,
            pairs=list(screen.pairs),
        )
        if found.failure is not None:
            stage.failed.append(_failure(cand, found.failure, phase))
        evidence = found.evidence
        last = (cand, evidence)
        if evidence.verdict is Verdict.ADOPT:
            return _adopt(stage, cand, series, evidence, max_pairs)
        if evidence.verdict is Verdict.UNRESOLVED:
            unresolved = unresolved or (cand, evidence)
    return _kept(stage, screens, unresolved or last), None


def _adopt(
    stage: _Stage, cand: Candidate, series: Series, evidence: PairedEvidence, max_pairs: int
) -> tuple[StageDecision, _Winner | None]:
    """A candidate its pairs uphold: unless the other phase is the wall, measured whole, FULL
    checked against min(IO, SYNTHETIC), and decided again on FULL where the two disagree
    (composition.py)."""
    phase = stage.phase
    contradicted = _contradicted(stage.incumbent, series, evidence, phase)
    if contradicted is not None:  # left unresolved, and the headline says so
        held = replace(evidence, verdict=Verdict.UNRESOLVED, why=contradicted)
        why = f"{cand.label}: {contradicted}"
        return stage.decided(None, None, why, held, compared=cand.label), None
    walled = beyond_reach(
        phase,
        stage.runner.latest_whole(stage.values),
        _median_rate(stage.incumbent, phase),
        _median_rate(series, phase),
    )
    if walled is not None:
        gain = 100 * ((evidence.speedup or 1.0) - 1.0)
        numbers = _numbers(stage.incumbent, series, evidence, phase)
        why = f"{cand.label} is faster on {phase.upper()} ({numbers}) but {walled}"
        return stage.decided(None, gain, why, evidence, compared=cand.label), None
    check = check_adoption(
        stage.runner, stage.plan, stage.values, cand, series, stage.incumbent, max_pairs
    )
    gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
    numbers = _numbers(stage.incumbent, series, evidence, stage.phase)
    if check.failure is not None:
        stage.failed.append(_failure(cand, check.failure, "full"))
    if check.upheld:
        on_full = check.evidence is not None
        shown = check.evidence if on_full and check.evidence is not None else evidence
        gain = 100 * ((shown.speedup or 1.0) - 1.0) if on_full else gain_pct
        reason = f"{cand.label} wins: {numbers}"
        if on_full:
            reason = (
                f"{cand.label} wins on FULL: {_numbers(stage.incumbent, series, shown, 'full')}"
            )
        decision = stage.decided(
            cand.label,
            gain,
            f"{reason}; {check.sentence}",
            shown,
            phase="full" if on_full else stage.phase,
            composition=check.sentence,
        )
        return decision, (cand, series)
    decision = stage.decided(
        None,
        gain_pct,
        f"{cand.label} is faster on {stage.phase.upper()} ({numbers}) but {check.sentence}",
        check.evidence or evidence,
        phase="full" if check.evidence is not None else stage.phase,
        composition=check.sentence,
        compared=cand.label,
    )
    return decision, None


def _kept(
    stage: _Stage, screens: list[Screen], last: tuple[Candidate, PairedEvidence] | None
) -> StageDecision:
    """The incumbent stays: why, from the last comparison, or the best screen when none ran."""
    noise = stage.runner.noise.of(stage.phase, stage.values)
    if last is None:
        best = screens[0]
        sps = best.result.rate(stage.phase) or 0.0
        why = (
            f"no candidate is faster (best {best.cand.label}: {_sps(best.incumbent_sps)} -> "
            f"{_sps(sps)} samples/s {stage.phase.upper()}, {100 * math.expm1(best.gain):+.1f}%; "
            f"a gain must clear {100 * noise.needed:.1f}%)"
        )
        return stage.decided(None, 100 * math.expm1(best.gain), why, compared=best.cand.label)
    cand, evidence = last
    gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
    if evidence.verdict is Verdict.UNRESOLVED:
        why = f"{cand.label} {evidence.why}"
        return stage.decided(None, gain_pct, why, evidence, compared=cand.label)
    if (evidence.speedup or 0.0) > 1.0:
        why = f"{cand.label} is faster but within the noise margin, kept the simpler config"
    else:
        why = f"no candidate is faster (best {cand.label})"
    return stage.decided(None, gain_pct, f"{why}: {evidence.why}", evidence, compared=cand.label)


def _numbers(incumbent: Series, series: Series, evidence: PairedEvidence, phase: str) -> str:
    inc = _median_rate(incumbent, phase)
    cand = _median_rate(series, phase)
    return (
        f"{_sps(inc)} -> {_sps(cand)} samples/s {phase.upper()} "
        f"({100 * ((evidence.speedup or 1.0) - 1):+.1f}% paired, {evidence.why})"
    )


def _contradicted(
    incumbent: Series, series: Series, evidence: PairedEvidence, phase: str
) -> str | None:
    """Why a gain its pairs show is contradicted by the two sides' own medians (the pairs
    said faster, the medians slower): never adopted, never printed as a factor; None when
    they agree."""
    inc, cand = _median_rate(incumbent, phase), _median_rate(series, phase)
    gain = (evidence.speedup or 1.0) - 1.0
    if not inc or not cand or gain <= 0 or cand > inc:
        return None
    return (
        f"its pairs say {100 * gain:+.1f}% but its medians {_sps(inc)} -> {_sps(cand)} "
        f"samples/s {phase.upper()} say slower: the sides did not run alike; unresolved"
    )


def _median_rate(series: Series, phase: str) -> float:
    rates = sorted(r for p in series.results if (r := p.rate(phase)) is not None)
    if not rates:
        return 0.0
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


# What a knob does when it cannot run here: a verdict on the knob, not a missing figure.
KNOB_VERDICTS = (Status.OOM, Status.DIVERGED, Status.UNSUPPORTED, Status.SKIPPED)


def unmeasured_why(results: list[ProbeResult], phase: str) -> str:
    """Why a stage whose probes gave no figure to compare could not be measured ("" when
    every failure is the knob's own verdict: it runs out of memory, diverges, or is not
    supported here, and the stage did measure that)."""
    if not results or all(r.status in KNOB_VERDICTS for r in results):
        return ""
    if all(ran(r, phase) for r in results):
        return f"every probe ran contended: {load_words(results)}"
    failed = [r for r in results if not r.ok and r.status not in KNOB_VERDICTS]
    first = failed[0] if failed else results[0]
    detail = f": {first.reason}" if first.reason else ""
    return f"its probes failed ({first.status.value}{detail})"


def _failure(cand: Candidate, result: ProbeResult, phase: str) -> str:
    kind = " (reference)" if cand.reference else ""
    return f"{cand.label}{kind}: {failure_text(result, phase)}"


def _sps(value: float) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"
