"""Where a step's time goes, as bars: one column per profile shown (summary.json's `profile`
block: before and after, the kept baseline alone, or a repeat; or a journaled probe's own).

On a GPU the bars are the device's work by the part that launched it; the caption says
the basis and, beside it, the host's spans (tuning/results/profiles.py words both)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from tuneup.probe.breakdown import idle_causes, parse_breakdown
from tuneup.tuning.results.profiles import Side, basis_line, host_view, part_names, profile_sides

BAR = 16  # the longest part's bar, in cells

__all__ = ["Side", "breakdown_bars", "breakdown_table", "findings_text"]


def breakdown_bars(sides: Sequence[Side], heading: str = "") -> Table | None:
    """A bar per part in ms per step, the longest part across every column BAR cells;
    None where no column holds a profiled part."""
    profiles = [dict(profile or {}) for _title, profile in sides]
    parts = [dict(p.get("parts_s") or {}) for p in profiles]
    longest = max((v for p in parts for v in p.values() if isinstance(v, (int, float))), default=0)
    if not longest:
        return None
    table = Table(expand=True, box=None, header_style="bold", caption_justify="left")
    for column in ("step part", *(title for title, _profile in sides)):
        table.add_column(column)
    for name in part_names(profiles):
        cells = [_bar(p.get(name), longest) for p in parts]
        if any(cells):
            table.add_row(name, *cells)
    table.add_row("step", *(_ms(p.get("step_s")) for p in profiles))
    _gpu_rows(table, profiles)
    if any(isinstance(p.get("tflops"), (int, float)) for p in profiles):
        table.add_row("TFLOP/s", *(_tflops(p) for p in profiles))
    if any(p.get("load") for p in profiles):
        table.add_row("load", *(str(p.get("load") or "-") for p in profiles))
    said = [heading] if heading else []
    said += [basis_line(sides), *(line.strip() for line in host_view(sides))]
    table.caption = "\n".join(said)
    return table


def _gpu_rows(table: Table, profiles: Sequence[Mapping[str, Any]]) -> None:
    """The GPU's busy share, its idle share and what it idled on, where measured."""
    busy = [(p.get("gpu") or {}).get("busy_s") for p in profiles]
    if not any(busy):
        return
    table.add_row("GPU busy", *(_share(b, p) for b, p in zip(busy, profiles, strict=True)))
    idle = [_idle(p) for p in profiles]
    if any(i != "-" for i in idle):
        table.add_row("GPU idle on", *idle)


def _idle(profile: Mapping[str, Any]) -> str:
    causes = idle_causes(parse_breakdown(profile)) if profile else []
    return ", ".join(f"{c.replace('the ', '')} {s:.0%}" for c, s in causes[:2]) or "-"


def breakdown_table(block: Mapping[str, Any] | None) -> Table | None:
    """The summary's profiles (profiles.profile_sides: before and after where the
    configurations differ, one profile where the baseline was kept, else a repeat);
    None: nothing profiled."""
    if not isinstance(block, Mapping):
        return None
    heading, sides = profile_sides(block, None)
    titles = {"recommended": "recommendation"}  # the app's word for it
    return breakdown_bars([(titles.get(t, t), p) for t, p in sides], heading)


def findings_text(block: Mapping[str, Any] | None) -> str:
    """The findings on the recommendation and what is left, one line each."""
    if not isinstance(block, Mapping):
        return ""
    lines = [f"finding: {f.get('text', '')}" for f in block.get("findings") or []]
    if block.get("left"):
        lines.append(f"left: {block['left']}")
    return "\n".join(lines)


def _bar(seconds: Any, longest: float) -> str:
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        return ""
    return f"{'█' * max(1, round(BAR * seconds / longest)):<{BAR}} {1000 * seconds:.1f} ms"


def _ms(seconds: Any) -> str:
    return f"{1000 * seconds:.1f} ms" if isinstance(seconds, (int, float)) else "-"


def _share(busy: Any, profile: Mapping[str, Any]) -> str:
    step = profile.get("step_s")
    if not isinstance(busy, (int, float)) or not isinstance(step, (int, float)) or not step:
        return "-"
    return f"{100 * busy / step:.0f}%"


def _tflops(profile: Mapping[str, Any]) -> str:
    rate, mfu = profile.get("tflops"), profile.get("mfu")
    if not isinstance(rate, (int, float)):
        return "-"
    return f"{rate:.3g} ({100 * mfu:.0f}% MFU)" if isinstance(mfu, (int, float)) else f"{rate:.3g}"
