"""summary.json's content, from a SearchOutcome: confirmed figures only, the verdicts in
words (tuneup.tuning.results.verdicts), the machine's measured noise and the batch change's
learning rate; tuneup.tuning.results.summary reads it back, typed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.config import LR_SCHEDULE_DEFAULT, TrainConfig
from tuneup.probe.targets import Target
from tuneup.probe.types import ProbeResult
from tuneup.tuning.results.datarate import data_rate_sentence
from tuneup.tuning.results.ddp_verdicts import (
    first_ddp_block,
    stragglers_note,
)
from tuneup.tuning.results.profiles import profiles_block
from tuneup.tuning.results.verdicts import (
    bottleneck,
    headline,
    not_upheld,
    speedup,
    unmeasured,
    unresolved,
)
from tuneup.tuning.search.guard import batch_of, batch_ratio, equal_samples_note
from tuneup.tuning.search.search_records import SearchOutcome
from tuneup.unet.schedule import initial_lr


def stability(outcome: SearchOutcome) -> dict[str, Any]:
    """The session's measured noise: instability, contention, drift, and the note to show first."""
    noise = outcome.noise
    if noise is None:
        return {"note": None}
    block: dict[str, Any] = dict(noise.to_dict())
    block["drift_pct"] = None if outcome.drift is None else 100 * outcome.drift
    notes = [n for n in (noise.full.note(),) if n]
    if noise.contended:
        notes.append(
            f"{noise.contended} probe(s) stayed contended after being measured again: "
            "other processes were using the machine; they were left out of comparisons"
        )
    far = [p for p in outcome.probes if p.ok and p.far_trials]
    if far:
        notes.append(
            f"{len(far)} probe(s) kept a trial far from its siblings after measuring it again "
            "(a stopped or starved process): their figures are uncertain, and their lines say so"
        )
    if outcome.drift is not None and abs(outcome.drift) >= 0.1:
        notes.append(
            f"the machine's speed drifted: the baseline ran {100 * outcome.drift:+.0f}% "
            "at the end against its first probes (comparisons are paired, so this does "
            "not bias them)"
        )
    block["notes"] = notes
    return block


def batch_note(outcome: SearchOutcome) -> str | None:
    """A recommended batch change in words: the throughput, the learning rate and the loss."""
    base, best = outcome.base_values, outcome.best_values
    ratio = batch_ratio(best, base)
    if ratio == 1.0:
        return None
    gain = speedup(outcome)["value"]
    parts = [
        f"batch {batch_of(base)} -> {batch_of(best)}: throughput {100 * (gain - 1):+.0f}% "
        "(samples/s, confirmed)"
    ]
    lr = _lr_sentence(base, best)
    if lr:
        parts.append(lr)
    losses = equal_samples_note(outcome.best.losses, outcome.baseline.losses, ratio)
    if losses:
        parts.append(losses)
    parts.append(
        "a bigger batch takes fewer optimizer steps per epoch: check time-to-accuracy "
        "(the validation loss of a full run) before relying on it"
    )
    return "; ".join(parts)


def _lr_sentence(base: Mapping[str, Any], best: Mapping[str, Any]) -> str | None:
    def peak(values: Mapping[str, Any]) -> tuple[float, str, int] | None:
        sched = {**LR_SCHEDULE_DEFAULT, **dict(values.get("lr_schedule") or {})}
        batch = values.get("global_batch_size", TrainConfig.global_batch_size)
        base_batch = values.get("base_batch_size", TrainConfig.base_batch_size)
        try:
            lr = initial_lr(float(sched["start_lr"]), str(sched["scaling"]), batch, base_batch)
        except (TypeError, ValueError, ZeroDivisionError):
            return None
        return lr, str(sched["scaling"]), int(base_batch)

    before, after = peak(base), peak(best)
    if before is None or after is None:
        return None
    if after[1] == "none":
        return f"the learning rate stays {after[0]:.3g} (the config scales it by no rule)"
    return (
        f"peak learning rate {before[0]:.3g} -> {after[0]:.3g} ({after[1]} scaling from "
        f"base batch {after[2]}, the config's rule)"
    )


def summary_dict(outcome: SearchOutcome) -> dict[str, Any]:
    """The content of summary.json (design.md, Results directory): confirmed figures only."""
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
    conf = outcome.confirmation
    return {
        "search": outcome.search,
        "baseline": {"values": dict(outcome.base_values), **_rates(outcome.baseline)},
        "recommendation": {
            "values": dict(outcome.best_values),
            "changes": changes,
            "path": list(outcome.path),
            "headline": headline(outcome),
            "batch_note": batch_note(outcome),
            **_rates(outcome.best),
        },
        "speedup": speedup(outcome),
        "margin_pct": 100 * outcome.margin,
        "confirmation": None if conf is None else _confirmation_block(outcome),
        "stability": stability(outcome),
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
                "not_tried": list(d.not_tried),
                "pairs": None if d.evidence is None else list(d.evidence.ratios),
                "decided_on": d.phase if d.evidence is not None else None,
                # the gain its pairs had to clear: the noise this decision used
                "needed_pct": None if d.evidence is None else 100 * (d.evidence.needed - 1),
                "composition": d.composition or None,
                "unresolved": d.unresolved,
                "unmeasured": d.unmeasured or None,
            }
            for d in outcome.stage_decisions
        ],
        "unresolved": unresolved(outcome),
        "unmeasured": unmeasured(outcome),
        "probes": statuses,
        "contended_probes": [
            {"stage": p.stage, "variant": p.variant, "note": p.contention.note}
            for p in outcome.probes
            if p.contention is not None and p.contention.contended
        ],
        "throttled_probes": [
            {"stage": p.stage, "variant": p.variant} for p in outcome.probes if p.ok and p.throttled
        ],
        "ddp": first_ddp_block(outcome),
        "profile": profiles_block(outcome),
        "stragglers": stragglers_note(outcome.probes),
        "partial": {"why": outcome.partial, "not_run": list(outcome.not_run)}
        if outcome.partial
        else None,
    }


def targets_block(outcome: SearchOutcome, own: Target) -> list[dict[str, Any]]:
    """summary.json's `targets`: the recommendation as `own`'s answer (its trainer's), then
    each other target's (search/targets.py) with its own confirmed factor."""
    gain = speedup(outcome)
    conf = outcome.confirmation
    first = {
        "target": own.name,
        "label": own.label,
        "values": dict(outcome.best_values),
        "changes": _changes(outcome.base_values, outcome.best_values),
        "factor": gain["value"],
        "low": gain["low"],
        "high": gain["high"],
        "full_sps": outcome.best.full_sps,
        "upheld": None if conf is None else conf.upheld is not None,
        "tuned": True,
        "same": False,
        "left_out": {},
        "note": "",
    }
    entries = [first]
    for answer in outcome.targets:
        named = {"target": answer.target.name, "label": answer.target.label}
        if answer.same:
            entries.append({**first, **named, "same": True})
            continue
        attempt, best = answer.attempt, answer.best
        ev = attempt.evidence if attempt is not None and attempt.upheld else None
        kept = answer.values == outcome.base_values
        entries.append(
            {
                **named,
                "values": dict(answer.values),
                "changes": _changes(outcome.base_values, answer.values),
                "factor": ev.speedup if ev is not None else (1.0 if kept else None),
                "low": None if ev is None else ev.low,
                "high": None if ev is None else ev.high,
                "full_sps": best.full_sps if best is not None else outcome.baseline.full_sps,
                "upheld": answer.upheld,
                "tuned": True,
                "same": False,
                "left_out": dict(answer.left_out),
                "path": list(attempt.path) if attempt is not None else [],
                "stages": [
                    {
                        "stage": d.stage,
                        "winner": d.winner,
                        "gain_pct": d.gain_pct,
                        "reason": d.reason,
                    }
                    for d in answer.decisions
                ],
                "note": answer.note,
            }
        )
    return entries


def _changes(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if base.get(k, _NONE) != v}


def _confirmation_block(outcome: SearchOutcome) -> dict[str, Any]:
    conf = outcome.confirmation
    assert conf is not None
    return {
        "status": conf.status,
        "search_path": list(conf.search_path),
        "search_gain_pct": None if outcome.search_gain is None else 100 * outcome.search_gain,
        "path": list(conf.path),
        "note": None if conf.upheld is not None else not_upheld(outcome),
        "attempts": [
            {
                "path": list(a.path),
                "upheld": a.upheld,
                "ratios": list(a.evidence.ratios),
                "speedup": a.evidence.speedup,
                "ci_low": a.evidence.low,
                "ci_high": a.evidence.high,
                "needed": a.evidence.needed,
                "why": a.evidence.why,
                "baseline_sps": list(a.baseline_sps),
                "best_sps": list(a.best_sps),
                "failed_pairs": a.failed,
            }
            for a in conf.attempts
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


def _with_data_rate(
    verdict: tuple[str, str], probe: ProbeResult, values: dict[str, Any]
) -> tuple[str, str]:
    """Add the loader's GB/s against what the model needs, when both phases were measured."""

    rate = data_rate_sentence(probe.io_sps, probe.synthetic_sps, int(values.get("data_size", 64)))
    if rate is None:
        return verdict
    return verdict[0], f"{verdict[1]} ({rate})"
