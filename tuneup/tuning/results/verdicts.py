"""Verdicts: where the time goes, what each stage won, and the summary.json content.

Pure functions of a SearchOutcome. The bottleneck comes from benchy's split:
IO (the loader alone) and SYNTHETIC (the model on one cached batch) bound
FULL (the real loop), so whichever is slower is the wall to fix next.

Several GPUs add two figures, from the DDP stage's reference runs (as the
tutorial measured them):
    communication overhead % = 100 x (1 - SYNTHETIC(incumbent, with DDP)
        / SYNTHETIC(noddp: same ranks, no gradient exchange)),
        from FULL when SYNTHETIC is missing (the block says which);
    scaling efficiency % = 100 x FULL(N ranks) / (N / n x FULL(n ranks)),
        N the incumbent's ranks, n the reference's (1: one GPU, same local
        batch, so this is weak scaling).
"""

from __future__ import annotations

from typing import Any

from tuneup.probe.hostload import under_load_text
from tuneup.probe.types import CONFIRM_STAGE
from tuneup.tuning.clock.planner import limit_words, longer_words
from tuneup.tuning.results.ddp_verdicts import (
    ddp_figures,
    ddp_sentence,
    number_text,
    ranks_text,
)
from tuneup.tuning.results.stage_rows import stopped_during, unfinished
from tuneup.tuning.search.paired import Verdict
from tuneup.tuning.search.search_records import SearchOutcome, StageDecision

# The faster phase must be this many times the slower one for the slower to be "the" bottleneck;
# closer than that, both shape FULL (they compete for the host and the PCIe link).
BOUND_RATIO = 1.25


def bottleneck(
    io_sps: float | None, synthetic_sps: float | None, full_sps: float | None
) -> tuple[str, str]:
    """Classify a probe as data-bound, compute-bound or balanced, with one sentence of numbers.

    Returns:
        (kind, sentence): kind is "data-bound", "compute-bound", "balanced" or "unknown".
    """
    full = f"FULL runs at {number_text(full_sps)}" if full_sps else "FULL was not measured"
    if not io_sps or not synthetic_sps or io_sps <= 0 or synthetic_sps <= 0:
        return "unknown", f"unknown: IO and SYNTHETIC were not both measured; {full}"
    if synthetic_sps >= BOUND_RATIO * io_sps:
        return "data-bound", (
            f"data-bound: the loader delivers {number_text(io_sps)} samples/s while the model "
            f"could take {number_text(synthetic_sps)}; {full}"
        )
    if io_sps >= BOUND_RATIO * synthetic_sps:
        return "compute-bound", (
            f"compute-bound: the model takes {number_text(synthetic_sps)} samples/s while the "
            f"loader could deliver {number_text(io_sps)}; {full}"
        )
    return "balanced", (
        f"balanced: the loader delivers {number_text(io_sps)} samples/s and the model takes "
        f"{number_text(synthetic_sps)}, within {100 * (BOUND_RATIO - 1):.0f}% of each other; {full}"
    )


def stage_summary(outcome: SearchOutcome) -> list[str]:
    """One line per stage: what won and by how much, why nothing did, or why it was skipped.

    A stage with reference runs adds its communication overhead and scaling
    efficiency; one whose probes flagged straggling ranks says which.
    """
    lines = []
    theirs = [d for answer in outcome.targets for d in answer.decisions]
    for decision in [*outcome.stage_decisions, *theirs]:
        line = f"{decision.stage}{decided_on(decision)}: {decision.reason}"
        if decision.failed:
            line += f"; did not run ok: {', '.join(decision.failed)}"
        if decision.not_tried:
            line += f"; not tried: {', '.join(decision.not_tried)}"
        figures = ddp_figures(decision, outcome.best_values)
        if figures is not None:
            line += f"; {ddp_sentence(figures)}"
        throttled = _throttled(outcome, decision.stage)
        if throttled:
            line += f"; {throttled} probe(s) ran with the GPU throttled: timings noisy"
        straggled = [p for p in outcome.probes if p.stage == decision.stage and p.stragglers]
        if straggled:
            line += f"; {ranks_text(straggled)} straggled in {len(straggled)} probe(s)"
        lines.append(line)
    return lines


def decided_on(decision: StageDecision) -> str:
    """ " (decided on SYNTHETIC)": the phase that decided a stage that ran, when not FULL or
    when the stage was decided again on FULL; empty for a skipped stage."""
    if decision.reason.startswith("skipped") or decision.evidence is None:
        return ""
    if decision.phase == "full" and not decision.composition:
        return ""
    return f" (decided on {decision.phase.upper()})"


def unresolved(outcome: SearchOutcome) -> list[dict[str, Any]]:
    """The knobs left unresolved at this machine's noise: estimate and interval, by stage;
    and those the confirmation dropped when its pairs could neither uphold nor rule out
    the path they ended (with that path's estimate)."""
    found = []
    conf = outcome.confirmation
    if conf is not None:
        kept = set(conf.path)
        for attempt in conf.attempts:
            said = attempt.evidence
            if said.verdict is not Verdict.UNRESOLVED or said.speedup is None:
                continue
            last = attempt.path[-1] if attempt.path else None
            if last is None or last in kept:
                continue
            found.append(
                {
                    "stage": CONFIRM_STAGE,
                    "candidate": last,
                    "phase": "full",
                    "speedup": said.speedup,
                    "low": said.low,
                    "high": said.high,
                    "needed": said.needed,
                    "pairs": said.pairs,
                }
            )
    for decision in outcome.stage_decisions:
        evidence = decision.evidence
        if not decision.unresolved or evidence is None:
            continue
        found.append(
            {
                "stage": decision.stage,
                "candidate": decision.compared,
                "phase": decision.phase,
                "speedup": evidence.speedup,
                "low": evidence.low,
                "high": evidence.high,
                "needed": evidence.needed,
                "pairs": evidence.pairs,
            }
        )
    return found


def unmeasured(outcome: SearchOutcome) -> list[dict[str, str]]:
    """The stages (and the confirmation) that could not be measured, with why: the answer
    leaves them out, and says so (StageDecision.unmeasured)."""
    found = [
        {"stage": d.stage, "why": d.unmeasured} for d in outcome.stage_decisions if d.unmeasured
    ]
    conf = outcome.confirmation
    if (
        conf is not None
        and conf.upheld is None
        and conf.attempts
        and all(a.evidence.pairs == 0 and a.failed for a in conf.attempts)
    ):
        found.append(
            {
                "stage": CONFIRM_STAGE,
                "why": "no interleaved pair ran ok and uncontended, so nothing was confirmed",
            }
        )
    return found


def unmeasured_text(outcome: SearchOutcome) -> str:
    """One clause naming what could not be measured ("" for nothing)."""
    items = unmeasured(outcome)
    if not items:
        return ""
    by_why: dict[str, list[str]] = {}  # stages that share a reason are named together
    for u in items:
        by_why.setdefault(u["why"], []).append(u["stage"])
    return "not measured: " + ", ".join(
        f"{', '.join(stages)} ({why})" for why, stages in by_why.items()
    )


def _ran_variant(outcome: SearchOutcome) -> bool:
    """Whether any probe measured a variant (a stage's candidate, not its incumbent)."""
    return any(p.stage != "baseline" and p.variant and p.ok for p in outcome.probes)


def _compared_any(outcome: SearchOutcome) -> bool:
    """Whether any stage compared a variant with its incumbent (a screen or pairs)."""
    return any(d.evidence is not None or d.gain_pct is not None for d in outcome.stage_decisions)


def unresolved_text(outcome: SearchOutcome) -> str | None:
    """One clause naming the unresolved knobs with their estimates, or None when none."""
    items = unresolved(outcome)
    if not items:
        return None
    parts = [
        f"{_named(u['stage'], u['candidate'])} ({100 * ((u['speedup'] or 1.0) - 1):+.1f}%, "
        f"likely {u['low']:.2f}-{u['high']:.2f}x)"
        for u in items
    ]
    return "unresolved at this machine's noise: " + ", ".join(parts)


def _named(stage: str, candidate: str) -> str:
    """A candidate as a reader knows it: its label, with its stage where the label alone
    does not say which knob ("amp bf16"; "channels_last", not "channels_last channels_last")."""
    if stage in candidate:
        return candidate
    return f"{stage} {candidate}"


def _throttled(outcome: SearchOutcome, stage: str) -> int:
    """Probes of a stage whose FULL window saw a throttle reason (the sampler's join)."""
    return sum(1 for p in outcome.probes if p.stage == stage and p.ok and p.throttled)


def speedup(outcome: SearchOutcome) -> dict[str, Any]:
    """The recommendation's speedup over the baseline, with its spread and how it was measured.

    Confirmed figures only: the upheld confirmation's pairs; 1.0 when the
    confirmation upheld nothing (the baseline is the recommendation).
    """
    conf = outcome.confirmation
    if conf is not None:
        upheld = conf.upheld
        if upheld is None:
            return {
                "value": 1.0,
                "low": None,
                "high": None,
                "pairs": 0,
                "method": "baseline kept: the search's pick did not hold up in the confirmation",
            }
        ratios = upheld.evidence.ratios
        return {
            "value": upheld.evidence.speedup,
            "low": upheld.evidence.low,
            "high": upheld.evidence.high,
            "pair_min": min(ratios),
            "pair_max": max(ratios),
            "pairs": len(ratios),
            "method": "interleaved A/B confirmation: the estimate and its likely range",
        }
    base, best = outcome.baseline.full_sps, outcome.best.full_sps
    if outcome.best_values == outcome.base_values or not base or not best:
        return {"value": 1.0, "low": None, "high": None, "pairs": 0, "method": "baseline kept"}
    return {
        "value": best / base,
        "low": None,
        "high": None,
        "pairs": 0,
        "method": "search probes (no confirmation ran)",
    }


def headline(outcome: SearchOutcome) -> str:
    """One line for the end of a session: what to change and how much faster it is, confirmed;
    each other target's own answer where it differs (`targets_text`); and whether its
    figures were measured under a steady load (hostload.under_load_text)."""
    line = _headline(outcome)
    parts = [line, *targets_text(outcome), under_load_text(outcome.probes)]
    return "; ".join(p for p in parts if p)


def targets_text(outcome: SearchOutcome) -> list[str]:
    """One phrase per target that cannot run the recommendation: its own answer and its
    own measured factor, or why it keeps the baseline."""
    phrases = []
    for answer in outcome.targets:
        if answer.same:
            continue
        label = answer.target.label
        attempt = answer.attempt
        if attempt is not None and attempt.upheld:
            ev = attempt.evidence
            gain = gain_text(ev.speedup or 1.0, ev.low, ev.high, len(ev.ratios))
            how = " + ".join(attempt.path) or "its own settings"
            phrases.append(f"{label}: {how}: {gain}")
        else:
            phrases.append(f"{label}: keep its baseline ({answer.note or 'nothing it runs won'})")
    return phrases


def _headline(outcome: SearchOutcome) -> str:
    if outcome.partial:
        return _partial_headline(outcome)
    conf = outcome.confirmation
    searched = conf.search_path if conf is not None else outcome.path
    pending = "; ".join(
        t for t in (unresolved_text(outcome), unmeasured_text(outcome), left_out_text(outcome)) if t
    )
    if not searched:
        if _compared_any(outcome):
            line = "recommendation: keep the baseline (no variant beat it by the noise margin)"
        elif unmeasured(outcome):
            line = "no recommendation: nothing could be compared with the baseline"
        elif outcome.left_out and not _ran_variant(outcome):
            line = "recommendation: the baseline as it is (no variant was measured)"
        else:
            line = "recommendation: keep the baseline (no variant could run here to compare)"
        return f"{line}; {pending}" if pending else line
    if conf is None:
        gain = speedup(outcome)
        return (
            f"recommendation: {' + '.join(outcome.path)}: {gain['value']:.2f}x faster "
            "(search probes only: not confirmed)"
        )
    if conf.upheld is None:
        gone = unmeasured_text(outcome)
        if any(u["stage"] == CONFIRM_STAGE for u in unmeasured(outcome)):
            line = (
                f"no recommendation: {' + '.join(conf.search_path)} could not be confirmed "
                "against the baseline"
            )
        else:
            line = f"recommendation: keep the baseline: {not_upheld(outcome)}"
        more = "; ".join(t for t in (gone, left_out_text(outcome)) if t)
        return f"{line}; {more}" if more else line
    gain = speedup(outcome)
    line = (
        f"recommendation: {' + '.join(outcome.path)}: "
        f"{gain_text(gain['value'], gain['low'], gain['high'], gain['pairs'])}"
    )
    dropped = [label for label in conf.search_path if label not in conf.path]
    if dropped:
        first = conf.attempts[0]
        line += (
            f"; {' + '.join(dropped)} did not hold up in the confirmation "
            f"({' + '.join(first.path)}: {_ratio(first)})"
        )
    if pending:
        line += f"; {pending}"
    return line


def gain_text(value: float, low: float | None, high: float | None, pairs: int) -> str:
    """A confirmed gain as every front end words it: the estimate, and its likely range over
    the interleaved pairs (the one range a claim gets; the pairs' own spread is in the
    summary, `pair_min` and `pair_max`)."""
    if low is None or high is None:
        return f"{value:.2f}x faster"
    return f"{value:.2f}x faster (likely {low:.2f}-{high:.2f}x over {pairs} interleaved pairs)"


def _partial_headline(outcome: SearchOutcome) -> str:
    """A ladder stopped before its end: the best configuration its stages upheld so far."""
    head = f"partial ({outcome.partial})"
    if outcome.path:
        base, best = outcome.baseline.full_sps, outcome.best.full_sps
        gain = ""
        if base and best:
            gain = f": FULL {number_text(base)} -> {number_text(best)} samples/s in its stages"
        line = (
            f"{head}: the best so far is {' + '.join(outcome.path)}{gain}, each step upheld by "
            "its stage's pairs, not yet confirmed against the baseline"
        )
    else:
        line = f"{head}: nothing adopted so far; the baseline stands"
    under_way, never = unfinished(outcome.not_run, outcome.probes)
    line += "".join(f"; {stage}: {stopped_during(n)}" for stage, n in under_way)
    if never:
        line += f"; not run: {', '.join(never)}"
    pending = "; ".join(
        t for t in (unresolved_text(outcome), unmeasured_text(outcome), left_out_text(outcome)) if t
    )
    return f"{line}; {pending}" if pending else line


def left_out_text(outcome: SearchOutcome) -> str:
    """The stages the time budget left out or cut short, and the candidates it left out of
    the stages it kept, in words, with whose limit it was and what runs them ("" for none)."""
    fewer = [
        f"{d.stage}'s {', '.join(d.left_for_time)}"
        for d in outcome.stage_decisions
        if d.left_for_time and d.stage not in outcome.left_out
    ]
    if not outcome.left_out and not fewer:
        return ""
    ate, spoiled = "", outcome.spoiled
    if spoiled:  # the time a load took was the budget's too: said, with its figure
        seconds = sum(p.wall_s or 0.0 for p in spoiled)
        ate = f"; a busy machine took {seconds:.0f} s of it: {len(spoiled)} probe(s) spoiled"
    return (
        f"left out for {limit_words(outcome.limit)}: {', '.join([*outcome.left_out, *fewer])} "
        f"({longer_words(outcome.limit)}{ate})"
    )


def confirmation_lines(outcome: SearchOutcome) -> list[str]:
    """What the confirmation tried and found, one line per attempt, for the screen and the log."""
    conf = outcome.confirmation
    if conf is None:
        return []
    lines = []
    for attempt in conf.attempts:
        verdict = "upheld" if attempt.upheld else "not upheld"
        failed = f", {attempt.failed} pair(s) did not run ok" if attempt.failed else ""
        lines.append(
            f"confirm {' + '.join(attempt.path)}: {verdict}: {attempt.evidence.why}{failed}"
        )
    return lines


def not_upheld(outcome: SearchOutcome) -> str:
    """Why the search's pick is not the recommendation: its search gain against its pairs."""
    conf = outcome.confirmation
    assert conf is not None
    first = conf.attempts[0]
    search = (
        f", {100 * outcome.search_gain:+.0f}% in the search"
        if outcome.search_gain is not None
        else ""
    )
    pick = f"the search's pick ({' + '.join(conf.search_path)}{search})"
    if first.evidence.why.startswith("stopped (the machine is too busy"):
        return (
            f"the machine got too busy before the interleaved confirmation decided on {pick} "
            f"({_ratio(first)}): a resume on a quiet machine confirms it or rules it out"
        )
    if first.evidence.why.startswith("cut short"):
        longer = longer_words(outcome.limit).replace("runs them", "confirms it or rules it out")
        return (
            f"{limit_words(outcome.limit)} ran out before the interleaved confirmation decided "
            f"on {pick} ({_ratio(first)}): {longer}"
        )
    if first.evidence.verdict is Verdict.UNRESOLVED:
        return (
            f"{pick} was neither upheld nor ruled out by the interleaved confirmation at this "
            f"machine's noise ({_ratio(first)})"
        )
    return f"{pick} did not hold up in the interleaved confirmation ({_ratio(first)})"


def _ratio(attempt: Any) -> str:
    evidence = attempt.evidence
    if evidence.speedup is None:
        return f"{attempt.failed} pair(s) did not run ok"
    ratios = evidence.ratios
    pairs = f"{len(ratios)} pair{'s' if len(ratios) != 1 else ''}"
    return (
        f"{evidence.speedup:.2f}x, {min(ratios):.2f}-{max(ratios):.2f} over {pairs}; "
        f"a gain had to clear {evidence.needed:.2f}x"
    )
