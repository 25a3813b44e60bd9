"""A finished probe in words: the one line the CLI and the app both show for it.

Pure text from values: no terminal, no widgets, so both front ends
(`tuneup.commands.progress` and the app's TUNE screen) import it from here
and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.probe.types import ProbeResult


def sps_text(value: float | None) -> str:
    """Samples/s with thousands separators and one decimal; "-" when not measured."""
    return "-" if value is None else f"{value:,.1f}"


def stragglers_text(result: ProbeResult) -> str:
    """ " (stragglers: ranks 1, 3)" for a probe with slow ranks; empty without."""
    if not result.stragglers:
        return ""
    ranks = ", ".join(str(r) for r in result.stragglers)
    many = len(result.stragglers) > 1
    return f" (straggler{'s' if many else ''}: rank{'s' if many else ''} {ranks})"


def ranks_tag(ranks: int, session_ranks: int) -> str:
    """The probe's ranks when it had several, or one in a session of several."""
    if ranks > 1:
        return f" [{ranks} ranks]"
    return " [1 rank]" if session_ranks > 1 else ""


def session_ranks(info: Mapping[str, Any]) -> int:
    """The ranks a session's probes run with, from its info (launch, else machine)."""
    for holder in (info.get("launch"), info.get("machine")):
        if isinstance(holder, dict) and isinstance(holder.get("world_size"), int):
            return int(holder["world_size"])
    return 1


def _unchanged(stage: str) -> str:
    """What a probe that changes nothing measured: the baseline, or a stage's incumbent."""
    return "baseline" if stage in ("baseline", "confirm") else "incumbent"


def result_line(
    result: ProbeResult,
    baseline_sps: float | None,
    reused: bool = False,
    *,
    ranks: int = 1,
) -> str:
    """One line per finished probe: stage, variant (and ranks), FULL rate, change, status.

    `ranks` is the session's world size: a probe on fewer ranks (a 1-rank
    reference) says so even when it ran on one.
    """
    label = ", ".join(f"{k}={v}" for k, v in result.variant.items()) or _unchanged(result.stage)
    label += ranks_tag(result.ranks, ranks)
    if result.ok and result.full_sps and baseline_sps:
        change = f" ({100 * (result.full_sps / baseline_sps - 1):+.1f}% vs baseline)"
    else:
        change = ""
    status = result.status.value if result.ok else f"{result.status.value}: {result.reason}"
    if result.ok and result.throttled:
        status += " (throttled: noisy)"
    if result.ok and result.contention is not None and result.contention.contended:
        status += f" (contended: {result.contention.note})"
    status += stragglers_text(result)
    if result.ok and result.stopped_early:
        status += f" (stopped early: {len(result.full_sps_trials)} FULL trials, clearly slower)"
    again = " [from journal]" if reused else ""
    return (
        f"{result.stage:<13} {label:<32} FULL {sps_text(result.full_sps):>10} samples/s"
        f"{change}  {status}{again}"
    )
