"""Whether two probes ran under alike conditions: what makes their ratio evidence.

A pair's two sides are compared as if only the knob differed between them. A steady
load slows both alike only when both had it: a candidate measured on a quiet machine
against an incumbent measured under a busy loop is credited with the loop (a resumed
`command` session adopted a 7.45x "win" that way). A probe replayed from the journal
ran in another process, at another time, perhaps under another load: its load is held
against the other side's like any other's, and a mismatch names where each came from.
Pure.
"""

from __future__ import annotations

from tuneup.probe.hostload import STEADY_SHARE
from tuneup.probe.types import ProbeResult

LOAD_APART = 0.25  # CPUs' worth of others' steady load that makes two probes unalike
# ... or hostload's STEADY_SHARE of the larger load, whichever is wider: the share others
# get moves with tuneup's own demand (a loader's threads) even when theirs holds


def steady_load(result: ProbeResult) -> float:
    """Others' load on the probe's CPUs, CPUs' worth: a steady one's, or one too light to
    call contended; 0 where a burst spoiled it or nothing was read."""
    held = result.contention
    if held is None or held.contended:
        return 0.0
    return float(held.other_cpus or 0.0)


def same_load(one: ProbeResult, other: ProbeResult) -> bool:
    """Whether two probes ran under alike loads: neither under a steady load, or loads
    that agree within LOAD_APART (or STEADY_SHARE of the larger)."""
    if not (one.under_load or other.under_load):
        return True
    loads = (steady_load(one), steady_load(other))
    return abs(loads[0] - loads[1]) <= max(LOAD_APART, STEADY_SHARE * max(loads))


def confined(result: ProbeResult) -> int | None:
    """The threads tuneup confined the probe to under others' load (None: not confined)."""
    held = result.contention
    return held.confined_threads if held is not None else None


def unlike(one: ProbeResult, other: ProbeResult) -> str | None:
    """Why `one` and `other` did not run under alike conditions, in a few words; None when
    they did (their ratio is evidence). A side replayed from the journal pairs with one
    measured now where their loads match (a resume's torn last probe measured again pairs
    as it did), and is named where they do not. Two sides on different thread counts that
    tuneup chose (confine.py) are not alike either."""
    if confined(one) != confined(other):
        sides = sorted(_threads(p) for p in (one, other))
        return f"one side ran on {sides[0]}, the other on {sides[1]}"
    if same_load(one, other):
        return None
    loaded, quiet = sorted((one, other), key=steady_load, reverse=True)

    def side(probe: ProbeResult) -> str:
        return "replayed from the journal" if probe.replayed else "measured in this run"

    said = f"{steady_load(loaded):.1f} CPUs of others' steady load on one side"
    said += f", {steady_load(quiet):.1f} on the other"
    if loaded.replayed != quiet.replayed:
        said += f" ({side(loaded)} against one {side(quiet)})"
    return said


def _threads(result: ProbeResult) -> str:
    count = confined(result)
    return f"{count} thread(s) (confined under load)" if count else "torch's own thread count"
