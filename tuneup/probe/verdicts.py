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

from collections.abc import Callable, Mapping
from typing import Any

from tuneup.probe.search import ReferenceRun, SearchOutcome, StageDecision
from tuneup.probe.types import ProbeResult

# The DDP knobs whose recommended values the summary's `ddp` block repeats.
DDP_SETTINGS = ("bucket_cap_mb", "broadcast_buffers", "gradient_as_bucket_view")

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
    full = f"FULL runs at {_n(full_sps)}" if full_sps else "FULL was not measured"
    if not io_sps or not synthetic_sps or io_sps <= 0 or synthetic_sps <= 0:
        return "unknown", f"unknown: IO and SYNTHETIC were not both measured; {full}"
    if synthetic_sps >= BOUND_RATIO * io_sps:
        return "data-bound", (
            f"data-bound: the loader delivers {_n(io_sps)} samples/s while the model "
            f"could take {_n(synthetic_sps)}; {full}"
        )
    if io_sps >= BOUND_RATIO * synthetic_sps:
        return "compute-bound", (
            f"compute-bound: the model takes {_n(synthetic_sps)} samples/s while the loader "
            f"could deliver {_n(io_sps)}; {full}"
        )
    return "balanced", (
        f"balanced: the loader delivers {_n(io_sps)} samples/s and the model takes "
        f"{_n(synthetic_sps)}, within {100 * (BOUND_RATIO - 1):.0f}% of each other; {full}"
    )


def stage_summary(outcome: SearchOutcome) -> list[str]:
    """One line per stage: what won and by how much, why nothing did, or why it was skipped.

    A stage with reference runs adds its communication overhead and scaling
    efficiency; one whose probes flagged straggling ranks says which.
    """
    lines = []
    for decision in outcome.stage_decisions:
        line = f"{decision.stage}: {decision.reason}"
        if decision.failed:
            line += f"; did not run ok: {', '.join(decision.failed)}"
        figures = ddp_figures(decision, outcome.best_values)
        if figures is not None:
            line += f"; {ddp_sentence(figures)}"
        throttled = _throttled(outcome, decision.stage)
        if throttled:
            line += f"; {throttled} probe(s) ran with the GPU throttled: timings noisy"
        straggled = [p for p in outcome.probes if p.stage == decision.stage and p.stragglers]
        if straggled:
            line += f"; {_ranks_text(straggled)} straggled in {len(straggled)} probe(s)"
        lines.append(line)
    return lines


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
        pair = f"{_n(used['ddp_sps'])} samples/s vs {_n(used['noddp_sps'])} without it"
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
            f"({_n(used['full_sps'])} samples/s on {ranks} ranks vs "
            f"{_n(used['reference_full_sps'])} on {few} {'rank' if few == 1 else 'ranks'})"
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
            f"{_ranks_text(flagged)} ran slower than the others in {len(flagged)} probe(s), "
            "and every rank waits for the slowest at each gradient exchange: check that "
            "GPU's clocks and throttling and that rank's loader CPUs"
        ),
        "probes": [
            {"stage": p.stage, "variant": p.variant, "ranks": list(p.stragglers)} for p in flagged
        ],
    }


def _throttled(outcome: SearchOutcome, stage: str) -> int:
    """Probes of a stage whose FULL window saw a throttle reason (the sampler's join)."""
    return sum(1 for p in outcome.probes if p.stage == stage and p.ok and p.throttled)


def speedup(outcome: SearchOutcome) -> dict[str, Any]:
    """The recommendation's speedup over the baseline, with its spread and how it was measured."""
    conf = outcome.confirmation
    if conf is not None and conf.speedup is not None:
        return {
            "value": conf.speedup,
            "low": conf.low,
            "high": conf.high,
            "pairs": len(conf.ratios),
            "method": "interleaved A/B confirmation: median, min and max of per-pair ratios",
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
    """One line for the end of a session: what to change and how much faster it is."""
    if not outcome.path:
        return "recommendation: keep the baseline (no variant beat it by the noise margin)"
    gain = speedup(outcome)
    spread = ""
    if gain["low"] is not None and gain["high"] is not None:
        spread = f" ({gain['low']:.2f}-{gain['high']:.2f} over {gain['pairs']} interleaved pairs)"
    return f"recommendation: {' + '.join(outcome.path)}: {gain['value']:.2f}x faster{spread}"


def summary_dict(outcome: SearchOutcome) -> dict[str, Any]:
    """The content of summary.json (design.md, Results directory)."""
    before = _with_data_rate(
        bottleneck(
            outcome.baseline.io_sps, outcome.baseline.synthetic_sps, outcome.baseline.full_sps
        ),
        outcome.baseline,
        outcome.base_values,
    )
    after = _with_data_rate(
        bottleneck(outcome.best.io_sps, outcome.best.synthetic_sps, outcome.best.full_sps),
        outcome.best,
        outcome.best_values,
    )
    changes = {
        k: v for k, v in outcome.best_values.items() if outcome.base_values.get(k, _NONE) != v
    }
    statuses: dict[str, int] = {}
    for probe in outcome.probes:
        statuses[probe.status.value] = statuses.get(probe.status.value, 0) + 1
    return {
        "search": outcome.search,
        "baseline": {"values": dict(outcome.base_values), **_rates(outcome.baseline)},
        "recommendation": {
            "values": dict(outcome.best_values),
            "changes": changes,
            "path": list(outcome.path),
            "headline": headline(outcome),
            **_rates(outcome.best),
        },
        "speedup": speedup(outcome),
        "margin_pct": 100 * outcome.margin,
        "bottleneck": {
            "before": {"kind": before[0], "sentence": before[1]},
            "after": {"kind": after[0], "sentence": after[1]},
        },
        "stages": [
            {
                "stage": d.stage,
                "winner": d.winner,
                "gain_pct": d.gain_pct,
                "reason": d.reason,
                "failed": list(d.failed),
            }
            for d in outcome.stage_decisions
        ],
        "probes": statuses,
        "throttled_probes": [
            {"stage": p.stage, "variant": p.variant} for p in outcome.probes if p.ok and p.throttled
        ],
        "ddp": _first_ddp_block(outcome),
        "stragglers": stragglers_note(outcome.probes),
    }


def _first_ddp_block(outcome: SearchOutcome) -> dict[str, Any] | None:
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
    from tuneup.probe.stages import current

    return current(values, knob)


def _ranks_text(probes: list[ProbeResult]) -> str:
    ranks = sorted({r for p in probes for r in p.stragglers})
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


_NONE = object()


def _rates(result: ProbeResult) -> dict[str, Any]:
    return {
        "io_sps": result.io_sps,
        "synthetic_sps": result.synthetic_sps,
        "full_sps": result.full_sps,
        "iqr_pct": result.iqr_pct,
    }


def _n(value: float | None) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    if value is None:
        return "?"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _with_data_rate(
    verdict: tuple[str, str], probe: ProbeResult, values: dict[str, Any]
) -> tuple[str, str]:
    """Add the loader's GB/s against what the model needs, when both phases were measured."""
    from tuneup.probe.datarate import data_rate_sentence

    rate = data_rate_sentence(probe.io_sps, probe.synthetic_sps, int(values.get("data_size", 64)))
    if rate is None:
        return verdict
    return verdict[0], f"{verdict[1]} ({rate})"
