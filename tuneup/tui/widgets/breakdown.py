"""Where a step's time goes, as bars: one column per profiled probe (summary.json's `profile`
block, or a journaled probe's own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from tuneup.tuning.results.profiles import PART_ROWS

BAR = 16  # the longest part's bar, in cells

Side = tuple[str, Mapping[str, Any] | None]  # a column's title and its profile


def breakdown_bars(sides: Sequence[Side]) -> Table | None:
    """A bar per part in ms per step, the longest part across every column BAR cells;
    None where no column holds a profiled part."""
    profiles = [dict(profile or {}) for _title, profile in sides]
    parts = [dict(p.get("parts_s") or {}) for p in profiles]
    longest = max((v for p in parts for v in p.values() if isinstance(v, (int, float))), default=0)
    if not longest:
        return None
    table = Table(expand=True, box=None, header_style="bold")
    for column in ("step part", *(title for title, _profile in sides)):
        table.add_column(column)
    for name in PART_ROWS:
        cells = [_bar(p.get(name), longest) for p in parts]
        if any(cells):
            table.add_row(name, *cells)
    table.add_row("step", *(_ms(p.get("step_s")) for p in profiles))
    busy = [(p.get("gpu") or {}).get("busy_s") for p in profiles]
    if any(busy):
        table.add_row("GPU busy", *(_share(b, p) for b, p in zip(busy, profiles, strict=True)))
    if any(isinstance(p.get("tflops"), (int, float)) for p in profiles):
        table.add_row("TFLOP/s", *(_tflops(p) for p in profiles))
    return table


def breakdown_table(block: Mapping[str, Any] | None) -> Table | None:
    """Baseline against recommendation (summary.json's `profile`); None: nothing profiled."""
    if not isinstance(block, Mapping):
        return None
    return breakdown_bars(
        [("baseline", block.get("baseline")), ("recommendation", block.get("recommendation"))]
    )


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
