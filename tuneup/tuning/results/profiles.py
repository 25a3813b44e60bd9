"""The profiles a ladder took, for its summary: the baseline's, each adoption's, the best one's.

A probe asked for a profile (the first baseline probe, each adopted
configuration's check of every phase) carries its breakdown (probe/timeline.py).
The summary keeps the baseline's and the recommendation's side by side, each
adoption's, the findings of the rules on the recommendation (probe/profile_rules.py,
each quoting what this ladder did at the stage that addresses it) and what is
left to gain. One configuration is one profile: where the ladder kept the baseline
(`same_config`), its profile is shown once, or, profiled twice, as a repeat with the
load each ran under, never as a before and after. Pure: a SearchOutcome in, a
mapping out; a block in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuneup.probe.breakdown import DEVICE, idle_causes, parse_breakdown, whats_left
from tuneup.probe.profile_rules import StageOutcome, findings
from tuneup.probe.types import BASELINE_STAGE, Contention, ProbeResult
from tuneup.tuning.search.search_records import SearchOutcome, StageDecision

PART_ROWS = ("data", "h2d", "forward", "backward", "optimizer", "allreduce", "graph", "other")
CELL = 22  # a column's width: two of them and the row's name fit 80 columns
Side = tuple[str, Mapping[str, Any] | None]  # a column's title and its profile
KEPT = "the baseline kept: one configuration, one profile"
REPEAT = "one configuration profiled twice: a repeat, not a before and after"


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


def load_text(contention: Contention | None) -> str:
    """The load a probe ran under, short enough for a table's cell ("others 1.2/16 CPUs");
    "" where it was not measured."""
    if contention is None or contention.other_cpus is None:
        return ""
    of = f"/{contention.usable_cpus}" if contention.usable_cpus else ""
    said = f"others {contention.other_cpus:.1f}{of} CPUs"
    if contention.gpu_processes:
        said += f", {contention.gpu_processes} on GPU"
    return said


def _shown(probe: ProbeResult | None) -> dict[str, Any] | None:
    """A probe's profile for the block, with the load it ran under."""
    if probe is None:
        return None
    load = load_text(probe.contention)
    return {**probe.profile, "load": load} if load else dict(probe.profile)


def profiles_block(outcome: SearchOutcome) -> dict[str, Any] | None:
    """summary.json's `profile` block; None where no probe was profiled (the sim, say)."""
    probes = outcome.probes
    baseline = next((p for p in probes if p.ok and p.profile and p.stage == BASELINE_STAGE), None)
    best = _profiled(probes, outcome.best_values)
    same = dict(outcome.best_values) == dict(outcome.base_values)
    if best is None and same:
        best = baseline
    adopted = [
        {"stage": p.stage, "variant": dict(p.variant), "profile": dict(p.profile)}
        for p in probes
        if p.ok and p.profile and p.stage != BASELINE_STAGE
    ]
    if baseline is None and best is None:
        return None
    block: dict[str, Any] = {
        "baseline": _shown(baseline),
        "recommendation": _shown(best),
        "adopted": adopted,
        "same_config": same,
    }
    if best is not None:
        stages = stage_outcomes(outcome.stage_decisions)
        block["findings"] = finding_rows(best.profile, stages, best.config)
        block["left"] = whats_left(best.profile)
    return block


def finding_rows(
    profile: Mapping[str, Any], stages: Mapping[str, StageOutcome] | None, config: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The rules' findings on `profile`, as the summary keeps them."""
    return [
        {
            "rule": f.rule,
            "measured": f.measured,
            "threshold": f.threshold,
            "stage": f.stage,
            "tried": f.tried,
            "text": f.text,
        }
        for f in findings(profile, stages, config)
    ]


def _same_profile(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    trace = one.get("trace")
    return one is other or one == other or bool(trace and trace == other.get("trace"))


def profile_sides(
    block: Mapping[str, Any], titles: tuple[str, ...] | None = None
) -> tuple[str, list[Side]]:
    """How a block's profiles are shown: a heading (or "") and its columns. Before and after
    where the configurations differ; one column where the recommendation is the baseline's
    own profile, or where there is one profile and no titles ask for two; a repeat, where
    one configuration was profiled twice."""
    before, after = block.get("baseline"), block.get("recommendation")
    same = block.get("same_config") is True
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        if _same_profile(before, after):
            return KEPT, [((titles or ("baseline, kept",))[0], before)]
        if same:
            first, again = titles or ("profiled", "repeat")
            return REPEAT, [(first, before), (again, after)]
        first, last = titles or ("baseline", "recommended")
        return "", [(first, before), (last, after)]
    if titles is not None and len(titles) > 1 and not same:  # the caller asks for both
        return "", [(titles[0], before), (titles[1], after)]
    which = 0 if isinstance(before, Mapping) else 1
    named = titles or (("baseline, kept",) * 2 if same else ("baseline", "recommended"))
    title = named[which] if len(named) > which else named[0]
    return KEPT if same else "", [(title, before if which == 0 else after)]


def _ms(seconds: Any) -> str:
    return f"{1000 * float(seconds):.2f} ms" if isinstance(seconds, (int, float)) else "-"


def _cell(profile: Mapping[str, Any] | None, part: str) -> str:
    """A part's time and share: of the device's time on its basis, of the step on the host's."""
    if not profile:
        return "-"
    b = parse_breakdown(profile)
    value = b.parts_s.get(part)
    if value is None or value <= 0:
        return "-"
    share = b.part(part)
    return f"{_ms(value)}{f' {100 * share:3.0f}%' if share is not None else ''}"


def _row(name: str, cells: Sequence[str]) -> str:
    return f"  {name:12s}" + "".join(f" {cell:>{CELL}s}" for cell in cells)


def part_names(profiles: Sequence[Mapping[str, Any] | None]) -> list[str]:
    """The parts to show, in the step's order; a user's own ranges before `other`."""
    own = [
        name for p in profiles for name in (p or {}).get("parts_s") or {} if name not in PART_ROWS
    ]
    return [*PART_ROWS[:-1], *dict.fromkeys(own), PART_ROWS[-1]]


def basis_line(sides: Sequence[Side]) -> str:
    """What the parts' times are, said once for the columns."""
    bases = [parse_breakdown(p).basis for _t, p in sides if p]
    if bases and all(b == DEVICE for b in bases):
        return "parts: the GPU's time in the work each part launched (basis: device)"
    if DEVICE not in bases:
        return "parts: the ranges' spans on the host (basis: host)"
    said = ", ".join(
        f"{t} {'device' if parse_breakdown(p).basis == DEVICE else 'host'}" for t, p in sides if p
    )
    return f"parts by basis: {said} (device: the GPU's work; host: the ranges' spans)"


def profile_lines(
    block: Mapping[str, Any] | None, titles: tuple[str, ...] | None = None
) -> list[str]:
    """The profiles side by side (80 columns: before and after, one, or a repeat), the
    host's view where the parts are the device's, then the findings and what is left:
    what `tuneup probe` prints at the end."""
    if not block:
        return []
    heading, sides = profile_sides(block, titles)
    profiles = [p for _t, p in sides]
    rows = [_row("step part", [t for t, _p in sides])]
    for part in part_names(profiles):
        cells = [_cell(p, part) for p in profiles]
        if any(c != "-" for c in cells):
            rows.append(_row(part, cells))
    rows.append(_row("step", [_ms((p or {}).get("step_s")) for p in profiles]))
    rows += _gpu_rows(profiles)
    rate = [_tflops(p) for p in profiles]
    if any(r != "-" for r in rate):
        rows.append(_row("TFLOP/s", rate))
    loads = [str((p or {}).get("load") or "-") for p in profiles]
    if any(load != "-" for load in loads):
        rows.append(_row("load", loads))
    title = "where a step's time goes (profiled steps, per step)"
    lines = [f"{title}:", *([f"  {heading}"] if heading else []), f"  {basis_line(sides)}", *rows]
    lines += host_view(sides)
    traces = [str(p.get("trace")) for p in profiles if p and p.get("trace")]
    lines += [f"  trace: probes/{name}" for name in dict.fromkeys(traces)]
    lines += [f"finding: {f['text']}" for f in block.get("findings") or []]
    if block.get("left"):
        lines.append(f"left: {block['left']}")
    return lines


def _gpu_rows(profiles: Sequence[Mapping[str, Any] | None]) -> list[str]:
    """The GPU's busy and idle time, and what it idled on, per column."""
    parsed = [parse_breakdown(p) if p else None for p in profiles]
    gpus = [b.gpu if b is not None else None for b in parsed]
    if not any(g is not None and g.busy_s for g in gpus):
        return []
    busy, idle, causes = [], [], []
    for b, g in zip(parsed, gpus, strict=True):
        if b is None or g is None or g.busy_s is None or not b.step_s:
            busy.append("-")
            idle.append("-")
            causes.append("-")
            continue
        spare = g.idle_s if g.idle_s is not None else max(0.0, b.step_s - g.busy_s)
        busy.append(f"{_ms(g.busy_s)} {100 * g.busy_s / b.step_s:3.0f}%")
        idle.append(f"{_ms(spare)} {100 * spare / b.step_s:3.0f}%")
        said = ", ".join(f"{c.replace('the ', '')} {s:.0%}" for c, s in idle_causes(b)[:2])
        causes.append(said or "-")
    rows = [_row("GPU busy", busy), _row("GPU idle", idle)]
    return rows + ([_row("  idle on", causes)] if any(c != "-" for c in causes) else [])


def host_view(sides: Sequence[Side]) -> list[str]:
    """The host's spans beside the device's parts: where the CPU waited, not the GPU worked."""
    lines = []
    for title, profile in sides:
        spans = (profile or {}).get("host_parts_s")
        step = (profile or {}).get("step_s")
        if not isinstance(spans, Mapping) or not isinstance(step, (int, float)) or step <= 0:
            continue
        ranked = sorted(
            ((n, s) for n, s in spans.items() if isinstance(s, (int, float)) and s / step >= 0.01),
            key=lambda part: -part[1],
        )
        said = ", ".join(f"{n} {s / step:.0%}" for n, s in ranked[:4])
        lines.append(f"    {title}: {said}" if said else f"    {title}: -")
    if not lines:
        return []
    return ["  the host's view (its spans in each range: where the CPU waited):", *lines]


def _tflops(profile: Mapping[str, Any] | None) -> str:
    if not profile or not isinstance(profile.get("tflops"), (int, float)):
        return "-"
    mfu = profile.get("mfu")
    said = f"{profile['tflops']:.3g}"
    return f"{said} ({100 * mfu:.0f}% MFU)" if isinstance(mfu, (int, float)) else said
