"""What the ddp stage measured, in words a reader of the summary acts on: the
communication overhead of several ranks, their scaling efficiency, and stragglers.

Pure functions of the stage decision and its probes; summary.json's `ddp` block
(verdicts.py) and the scaling estimate (scaling_report.py) are built from them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tuneup.probe.stages import current
from tuneup.probe.types import ProbeResult
from tuneup.tuning.search.search_records import ReferenceRun, SearchOutcome, StageDecision

# The DDP knobs whose recommended values the summary's `ddp` block repeats.
DDP_SETTINGS = ("bucket_cap_mb", "broadcast_buffers", "gradient_as_bucket_view")


def communication_overhead(
    with_ddp: ProbeResult, without: ProbeResult
) -> tuple[float, str, float, float] | None:
    """The share of a step's time spent exchanging gradients, from a noddp reference run.

    Returns:
        (overhead %, phase, with-DDP samples/s, noddp samples/s): the phase is
        "synthetic" when both probes measured it, else "full" (the loader then
        hides or adds to the difference); None when neither phase was measured
        by both or a probe did not run ok.
    """
    if not with_ddp.ok or not without.ok:
        return None
    for phase, a, b in (
        ("synthetic", with_ddp.synthetic_sps, without.synthetic_sps),
        ("full", with_ddp.full_sps, without.full_sps),
    ):
        if a and b and a > 0 and b > 0:
            return 100 * (1 - a / b), phase, a, b
    return None


def scaling_efficiency(
    many: ProbeResult, ranks: int, few: ProbeResult, few_ranks: int = 1
) -> float | None:
    """FULL per rank on `ranks` over FULL per rank on `few_ranks`, in percent (weak scaling).

    None when either probe did not run ok, lacks FULL, or `ranks` is not more
    than `few_ranks` (a probe that did not report its ranks reads as one).
    """
    if not many.ok or not few.ok or not many.full_sps or not few.full_sps:
        return None
    if ranks <= few_ranks or few_ranks < 1:
        return None
    return 100 * (many.full_sps / ranks) / (few.full_sps / few_ranks)


def ddp_figures(decision: StageDecision, values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `ddp` block of summary.json for a stage with reference runs; None without them.

    Args:
        decision: the stage's decision, with its reference runs and incumbent.
        values: the recommended knob values (their DDP settings are repeated).
    """
    incumbent = decision.incumbent
    if incumbent is None or not decision.references:
        return None
    ranks = incumbent.ranks
    noddp = _reference(decision.references, lambda r: bool(r.candidate.values.get("noddp")))
    fewer = _reference(decision.references, lambda r: r.candidate.ranks is not None)
    if noddp is None and fewer is None:
        return None
    figures: dict[str, Any] = {}
    notes: list[str] = []
    overhead = phase = None
    if noddp is None:
        notes.append("no noddp reference run: communication overhead unknown")
    else:
        found = communication_overhead(incumbent, noddp.result)
        if found is None:
            notes.append(f"noddp reference {_how(noddp.result)}: communication overhead unknown")
        else:
            overhead, phase, figures["ddp_sps"], figures["noddp_sps"] = found
            if phase == "full":
                notes.append("SYNTHETIC was not measured by both: overhead from FULL")
    efficiency = None
    if fewer is None:
        notes.append("no run on fewer ranks: scaling efficiency unknown")
    else:
        few_ranks = int(fewer.candidate.ranks or 1)
        efficiency = scaling_efficiency(incumbent, ranks, fewer.result, few_ranks)
        if efficiency is None and ranks <= few_ranks:
            notes.append(
                f"the incumbent's probe reports {ranks} rank(s), not more than the "
                f"{fewer.candidate.label} reference's {few_ranks}: scaling efficiency unknown"
            )
        elif efficiency is None:
            notes.append(
                f"{fewer.candidate.label} reference {_how(fewer.result)}: "
                "scaling efficiency unknown"
            )
        else:
            figures.update(
                full_sps=incumbent.full_sps,
                reference_ranks=few_ranks,
                reference_full_sps=fewer.result.full_sps,
            )
    return {
        "stage": decision.stage,
        "ranks": ranks,
        "overhead_pct": overhead,
        "overhead_phase": phase,
        "efficiency_pct": efficiency,
        "figures": figures,
        "winner": decision.winner,
        "settings": {k: _value(values, k) for k in DDP_SETTINGS},
        "notes": notes,
    }


def ddp_sentence(figures: Mapping[str, Any]) -> str:
    """The ddp block in words, for the stage's summary line."""
    parts = []
    ranks = figures["ranks"]
    if figures["overhead_pct"] is not None:
        used = figures["figures"]
        phase = str(figures["overhead_phase"]).upper()
        ddp, noddp = number_text(used["ddp_sps"]), number_text(used["noddp_sps"])
        pair = f"{ddp} samples/s vs {noddp} without it"
        if figures["overhead_pct"] >= 0:
            parts.append(
                f"gradient exchange costs {figures['overhead_pct']:.1f}% of {phase} on "
                f"{ranks} ranks ({pair})"
            )
        else:  # the run without exchange came out slower: the probes' noise, not a gain
            parts.append(
                f"gradient exchange shows no measurable cost in {phase} on {ranks} ranks "
                f"({pair}: the difference is run-to-run noise)"
            )
    if figures["efficiency_pct"] is not None:
        used = figures["figures"]
        few = used["reference_ranks"]
        parts.append(
            f"weak scaling efficiency {figures['efficiency_pct']:.0f}% "
            f"({number_text(used['full_sps'])} samples/s on {ranks} ranks vs "
            f"{number_text(used['reference_full_sps'])} on {few} {'rank' if few == 1 else 'ranks'})"
        )
    parts.extend(figures["notes"])
    return "; ".join(parts)


def stragglers_note(probes: list[ProbeResult]) -> dict[str, Any] | None:
    """Which probes flagged a straggling rank, with one sentence; None when none did."""
    flagged = [p for p in probes if p.stragglers]
    if not flagged:
        return None
    return {
        "note": (
            f"{ranks_text(flagged)} ran slower than the others in {len(flagged)} probe(s), "
            "and every rank waits for the slowest at each gradient exchange: check that "
            "GPU's clocks and throttling and that rank's loader CPUs"
        ),
        "probes": [
            {"stage": p.stage, "variant": p.variant, "ranks": list(p.stragglers)} for p in flagged
        ],
    }


def first_ddp_block(outcome: SearchOutcome) -> dict[str, Any] | None:
    for decision in outcome.stage_decisions:
        block = ddp_figures(decision, outcome.best_values)
        if block is not None:
            return block
    return None


def _reference(
    runs: list[ReferenceRun], wanted: Callable[[ReferenceRun], bool]
) -> ReferenceRun | None:
    return next((r for r in runs if wanted(r)), None)


def _how(result: ProbeResult) -> str:
    if result.ok:
        return "lacks the phase measured"
    detail = f" ({result.reason})" if result.reason else ""
    return f"ended {result.status.value}{detail}"


def _value(values: Mapping[str, Any], knob: str) -> Any:
    return current(values, knob)


def ranks_text(probes: list[ProbeResult]) -> str:
    ranks = sorted({r for p in probes for r in p.stragglers})
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def number_text(value: float | None) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    if value is None:
        return "?"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"
