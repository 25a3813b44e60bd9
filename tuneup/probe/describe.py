"""A finished probe in words: the one line the CLI and the app both show for it.

Pure text from values: no terminal, no widgets, so both front ends
(`tuneup.commands.progress` and the app's TUNE screen) import it from here
and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuneup.probe.conditions import same_load
from tuneup.probe.types import BASELINE_STAGE, ProbeResult


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


REUSED = " [from journal]"  # a probe a resume took from the journal instead of running


def variant_text(result: ProbeResult) -> str:
    """What the probe changed, one name everywhere: its knob values; "baseline" for the
    baseline's (and the confirmation's) unchanged probe; "incumbent" for a stage's
    re-measure of its incumbent."""
    text = ", ".join(f"{k}={v}" for k, v in result.variant.items())
    if text:
        return text
    return "baseline" if result.stage in ("baseline", "confirm") else "incumbent"


def shown_phase(result: ProbeResult) -> str:
    """The phase a probe's line reports: FULL where it measured it, else the one it did."""
    for phase in ("full", "synthetic", "io"):
        if result.rate(phase) is not None:
            return phase
    return "full"


def fair_baseline(result: ProbeResult) -> bool:
    """Whether a "vs baseline" figure may be taken against this probe: a baseline that ran
    ok and uncontended (against a contended one a percentage would credit the knobs with
    what other processes did)."""
    return result.stage == BASELINE_STAGE and result.ok and not result.contended


def baseline_reference(probes: Sequence[ProbeResult]) -> ProbeResult | None:
    """The first fair baseline (`fair_baseline`); None when every one ran contended."""
    return next((p for p in probes if fair_baseline(p)), None)


def versus_baseline(result: ProbeResult, baseline: ProbeResult | None) -> str:
    """The change against the baseline, on the phase the probe reports ("" if unknown, when
    that baseline ran contended (`fair_baseline`), or under another load than the probe:
    `same_load`)."""
    if baseline is not None and (baseline.contended or not same_load(baseline, result)):
        return ""
    phase = shown_phase(result)
    mine = result.rate(phase) if result.ok else None
    theirs = baseline.rate(phase) if baseline is not None else None
    if phase == "io" and baseline is not None and theirs is None:
        theirs = baseline.io_sps  # the baseline's carried IO is still its figure
    if not mine or not theirs:
        return ""
    return f"{100 * (mine / theirs - 1):+.1f}%"


def status_text(result: ProbeResult, reused: bool = False, *, brief: bool = False) -> str:
    """The status with every reason a reader needs: why it failed, and when it ran ok but
    was contended (left out of comparisons) or under a steady load (kept), throttled,
    straggling or stopped early. `brief` leaves out the load's note (a table of many
    probes says it once)."""
    text = result.status.value
    if result.reason and not result.ok:
        text += f": {result.reason}"
    if result.ok and result.contended and result.contention is not None:
        text += (
            " (contended, left out)"
            if brief
            else (f" (contended, left out: {result.contention.note})")
        )
    elif result.ok and result.under_load and result.contention is not None:
        text += (
            " (under a steady load)"
            if brief
            else f" (under a steady load: {result.contention.note})"
        )
    if result.ok and result.throttled:
        text += " (throttled: noisy)"
    if result.ok and result.far_trials:
        text += (
            f" ({result.far_trials} trial(s) far from the rest, still apart when measured "
            "again: figure uncertain)"
        )
    text += stragglers_text(result)
    text += unsettled_text(result)
    if result.ok and result.stopped_early:
        phase = shown_phase(result)
        trials = len(result.trials_of(phase))
        text += f" (stopped early: {trials} {phase.upper()} trials, clearly slower)"
    return text + (REUSED if reused else "")


def unsettled_text(result: ProbeResult) -> str:
    """The phases whose warm-up ran to its cap without a steady step (a loader that paces
    the loop wanders): measured all the same, said so it is not taken for a steady figure."""
    plan = result.plan or {}
    recorded = plan.get("stable")
    stable: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    cap = plan.get("warmup_cap_s")
    unsettled = [phase.upper() for phase, ok in stable.items() if ok is False]
    if not result.ok or not unsettled or cap is None:
        return ""
    return f" ({', '.join(unsettled)} warm-up unsettled after its {float(cap):g} s cap)"


def result_line(
    result: ProbeResult,
    baseline: ProbeResult | None,
    reused: bool = False,
    *,
    ranks: int = 1,
) -> str:
    """One line per finished probe: stage, variant (and ranks), the rate of the phase it
    reports, its change against the baseline's same phase, status.

    `ranks` is the session's world size: a probe on fewer ranks (a 1-rank
    reference) says so even when it ran on one.
    """
    label = variant_text(result) + ranks_tag(result.ranks, ranks)
    phase = shown_phase(result)
    versus = versus_baseline(result, baseline)
    change = f" ({versus} vs baseline)" if versus else ""
    rate = result.rate(phase)
    return (
        f"{result.stage:<13} {label:<32} {phase.upper():<9} {sps_text(rate):>10} samples/s"
        f"{change}  {status_text(result, reused)}"
    )
