"""Verdicts: where the time goes, what each stage won, and the summary.json content.

Pure functions of a SearchOutcome. The bottleneck comes from benchy's split:
IO (the loader alone) and SYNTHETIC (the model on one cached batch) bound
FULL (the real loop), so whichever is slower is the wall to fix next.
"""

from __future__ import annotations

from typing import Any

from tuneup.probe.search import SearchOutcome
from tuneup.probe.types import ProbeResult

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
    """One line per stage: what won and by how much, why nothing did, or why it was skipped."""
    lines = []
    for decision in outcome.stage_decisions:
        line = f"{decision.stage}: {decision.reason}"
        if decision.failed:
            line += f"; did not run ok: {', '.join(decision.failed)}"
        throttled = _throttled(outcome, decision.stage)
        if throttled:
            line += f"; {throttled} probe(s) ran with the GPU throttled: timings noisy"
        lines.append(line)
    return lines


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
    }


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
