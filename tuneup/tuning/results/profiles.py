"""The profiles a ladder took, for its summary: the baseline's, each adoption's, the best one's.

A probe asked for a profile (the first baseline probe, each adopted
configuration's check of every phase) carries its breakdown (probe/timeline.py).
The summary keeps the baseline's and the recommendation's side by side, each
adoption's, the findings of the rules on the recommendation (probe/profile_rules.py,
each quoting what this ladder did at the stage that addresses it) and what is
left to gain. Pure: a SearchOutcome in, a mapping out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuneup.probe.profile_rules import StageOutcome, findings, whats_left
from tuneup.probe.types import BASELINE_STAGE, ProbeResult
from tuneup.tuning.search.search_records import SearchOutcome, StageDecision


def _profiled(probes: Sequence[ProbeResult], values: Mapping[str, Any]) -> ProbeResult | None:
    """The last ok probe of exactly `values` that carries a profile."""
    for probe in reversed(probes):
        if probe.ok and probe.profile and probe.config == dict(values):
            return probe
    return None


def stage_outcomes(decisions: Sequence[StageDecision]) -> dict[str, StageOutcome]:
    """What the ladder did at each stage, in its own words (the rules quote it)."""
    return {
        d.stage: StageOutcome(tried=d.evidence is not None or bool(d.winner), summary=d.reason)
        for d in decisions
    }


def profiles_block(outcome: SearchOutcome) -> dict[str, Any] | None:
    """summary.json's `profile` block; None where no probe was profiled (the sim, say)."""
    probes = outcome.probes
    baseline = next(
        (p for p in probes if p.ok and p.profile and p.stage == BASELINE_STAGE), None
    )
    best = _profiled(probes, outcome.best_values)
    if best is None and dict(outcome.best_values) == dict(outcome.base_values):
        best = baseline
    adopted = [
        {"stage": p.stage, "variant": dict(p.variant), "profile": dict(p.profile)}
        for p in probes
        if p.ok and p.profile and p.stage != BASELINE_STAGE
    ]
    if baseline is None and best is None:
        return None
    block: dict[str, Any] = {
        "baseline": dict(baseline.profile) if baseline is not None else None,
        "recommendation": dict(best.profile) if best is not None else None,
        "adopted": adopted,
    }
    if best is not None:
        stages = stage_outcomes(outcome.stage_decisions)
        block["findings"] = [
            {
                "rule": f.rule,
                "measured": f.measured,
                "threshold": f.threshold,
                "stage": f.stage,
                "tried": f.tried,
                "text": f.text,
            }
            for f in findings(best.profile, stages, best.config)
        ]
        block["left"] = whats_left(best.profile)
    return block


PART_ROWS = ("data", "h2d", "forward", "backward", "optimizer", "allreduce", "graph", "other")


def _ms(seconds: Any) -> str:
    return f"{1000 * float(seconds):.2f} ms" if isinstance(seconds, (int, float)) else "-"


def _cell(profile: Mapping[str, Any] | None, part: str) -> str:
    if not profile:
        return "-"
    parts = profile.get("parts_s") or {}
    step = profile.get("step_s") or 0.0
    value = parts.get(part)
    if not isinstance(value, (int, float)) or value <= 0:
        return "-"
    share = f" {100 * value / step:3.0f}%" if step else ""
    return f"{_ms(value)}{share}"


def profile_lines(
    block: Mapping[str, Any] | None, titles: tuple[str, str] = ("baseline", "recommended")
) -> list[str]:
    """The baseline's and the recommendation's breakdowns side by side (80 columns), then
    the findings and what is left: what `tuneup probe` prints at the end."""
    if not block:
        return []
    before, after = block.get("baseline"), block.get("recommendation")
    rows = [f"  {'step part':12s} {titles[0]:>22s} {titles[1]:>22s}"]
    for part in PART_ROWS:
        cells = (_cell(before, part), _cell(after, part))
        if cells != ("-", "-"):
            rows.append(f"  {part:12s} {cells[0]:>22s} {cells[1]:>22s}")
    steps = [_ms((p or {}).get("step_s")) for p in (before, after)]
    rows.append(f"  {'step':12s} {steps[0]:>22s} {steps[1]:>22s}")
    gpu = [(p or {}).get("gpu") or {} for p in (before, after)]
    if any(g.get("busy_s") for g in gpu):
        busy = [
            f"{100 * g['busy_s'] / p['step_s']:.0f}%" if g.get("busy_s") and p else "-"
            for g, p in zip(gpu, (before, after), strict=True)
        ]
        rows.append(f"  {'GPU busy':12s} {busy[0]:>22s} {busy[1]:>22s}")
    rate = [_tflops(p) for p in (before, after)]
    if rate != ["-", "-"]:
        rows.append(f"  {'TFLOP/s':12s} {rate[0]:>22s} {rate[1]:>22s}")
    traces = [str(p.get("trace")) for p in (before, after) if p and p.get("trace")]
    lines = ["where a step's time goes (profiled steps, per step):", *rows]
    lines += [f"  trace: probes/{name}" for name in dict.fromkeys(traces)]
    lines += [f"finding: {f['text']}" for f in block.get("findings") or []]
    if block.get("left"):
        lines.append(f"left: {block['left']}")
    return lines


def _tflops(profile: Mapping[str, Any] | None) -> str:
    if not profile or not isinstance(profile.get("tflops"), (int, float)):
        return "-"
    mfu = profile.get("mfu")
    said = f"{profile['tflops']:.3g}"
    return f"{said} ({100 * mfu:.0f}% MFU)" if isinstance(mfu, (int, float)) else said
