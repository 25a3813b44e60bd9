"""A finished session's profiles read again from their traces: the device's story, no GPU.

summary.json and the journal keep each profile's figures as computed when it ran;
a session recorded before the device was read has parts that are the host's
spans (under asynchronous CUDA, where the CPU waited, not where the GPU worked).
Where a profile's trace is still in `probes/`, its breakdown is derived from the
trace again (probe/timeline.py) on the profile's own steps and step time: the
parts become the device's work by the range that launched it, the host's spans
stay beside them. What the wall clock measured (the step, TFLOP/s, MFU, the
overhead) stays as journaled; a trace gone or unreadable leaves its profile as
journaled (on the host's basis, said so). Only the profiles shown are read, the
baseline's and the recommendation's: each adoption's stays as journaled, its trace
named for the user to open. Where the recommendation's profile was read again, the
findings and what is left are derived again from it (else they stay as journaled,
worded as its figures are). One configuration is one profile
(tuning/results/profiles.py): a session that kept its baseline is said so, and
each profile carries the load its probe ran under, from the journal. Nothing here
writes: the folder stays as the session left it.

`tuneup export --format md` and the app read a session's profiles through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.breakdown import whats_left
from tuneup.probe.jsonvalues import count, number, text
from tuneup.probe.profile_rules import StageOutcome
from tuneup.probe.timeline import breakdown, rounded
from tuneup.probe.trace_file import device_of, read_events, window
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.profiles import finding_rows, load_text
from tuneup.tuning.results.summary import Summary

PROBES = "probes"


def from_trace(profile: Mapping[str, Any], probes: Path) -> dict[str, Any]:
    """One profile, its breakdown derived again from its trace where that is in `probes`."""
    name = profile.get("trace")
    if not isinstance(name, str) or not name:
        return dict(profile)
    path = probes / Path(name).name  # a name in the folder, never a path out of it
    if not path.is_file():
        return dict(profile)
    try:
        events = read_events(path)
    except UsageError:
        return dict(profile)
    span = window(events)
    steps = count(profile.get("steps")) or span.steps
    step_s = number(profile.get("step_s")) or span.step_s
    device = text(profile.get("device")) or device_of(events)
    figures = rounded(breakdown(events, steps=steps, step_s=step_s, device=device))
    return {**profile, **figures}


def _loads(results: ResultsDir) -> dict[str, str]:
    """The load each profiled probe ran under, by its trace's name (the journal's)."""
    try:
        probes = results.results() if results.has_journal() else []
    except UsageError:
        return {}
    loads = {}
    for probe in probes:
        trace = probe.profile.get("trace") if probe.profile else None
        load = load_text(probe.contention)
        if isinstance(trace, str) and trace and load:
            loads[trace] = load
    return loads


def _stages(summary: Summary) -> dict[str, StageOutcome]:
    """What the ladder said at each stage, for the findings to quote; a stage the ladder
    skipped was not tried."""
    return {
        s.stage: StageOutcome(
            tried=s.winner is not None or s.gain_pct is not None or not s.reason.startswith("skip"),
            summary=s.reason,
        )
        for s in summary.stages
    }


def _figures(profile: Any) -> dict[str, Any]:
    """A profile's own figures, less the load the block adds beside them."""
    return {k: v for k, v in profile.items() if k != "load"} if isinstance(profile, Mapping) else {}


def read_again(document: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """summary.json's document with its `profile` block read again from the traces in
    `folder` (the module docstring); the same document where it holds no profile."""
    block = document.get("profile")
    if not isinstance(block, Mapping):
        return dict(document)
    probes = Path(folder) / PROBES
    loads = _loads(ResultsDir(Path(folder)))
    read: dict[str, dict[str, Any]] = {}  # one read per trace: the baseline may be the best

    def again(profile: Any) -> Any:
        if not isinstance(profile, Mapping):
            return profile
        key = str(profile.get("trace") or "")
        found = read.get(key) if key else None
        if found is None:
            found = from_trace(profile, probes)
            load = loads.get(key)
            found = {**found, "load": load} if load and "load" not in found else found
            if key:
                read[key] = found
        return found

    summary = Summary.from_document(document)
    new = dict(block)
    new["baseline"] = again(block.get("baseline"))
    new["recommendation"] = again(block.get("recommendation"))
    if summary.recommendation.recorded:
        new["same_config"] = dict(summary.baseline.values) == dict(summary.recommendation.values)
    best = new["recommendation"]
    if isinstance(best, Mapping) and _figures(best) != _figures(block.get("recommendation")):
        config = summary.recommendation.values
        new["findings"] = finding_rows(best, _stages(summary), config)
        new["left"] = whats_left(best)
    return {**document, "profile": new}
