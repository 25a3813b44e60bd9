"""Profiling one journaled configuration again, briefly: `tuneup profile` and the app's key.

The ladder profiles its baseline and each adoption; any other configuration it
measured can be profiled on demand, through the session's own trainer (the one its
session.json records): a trainer that declares `profiles` runs the journal line's
values again in a fresh process with the session's budget, judged on FULL and asked
for a profile (its trials, then a trial's worth of profiled steps); any other says
in one line why there is nothing to profile, and how the user can take one. As a
ladder does before each probe, tuneup's own synthetic box is made again where it went.
The trace is written beside the session's own, under the probe's number
(`probes/NNNN-profile.trace.json.gz`). Nothing here writes the journal: a profile
never costs a measurement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneup.cluster.launch import Launcher
from tuneup.errors import UsageError
from tuneup.preset.load import ProbePreset, parse_preset
from tuneup.probe.backend import as_backend
from tuneup.probe.profile_rules import Finding, StageOutcome, findings
from tuneup.probe.types import PROFILE_MISSING, Candidate, ProbeBudget, ProbeResult
from tuneup.trainers.adapters import DEFAULT_TRAINER, TrainerAdapter, TrainerContext, load_trainer
from tuneup.tuning.results.journal import SUMMARY, ResultsDir, quoted
from tuneup.tuning.session.control import DataGone
from tuneup.tuning.session.datakeep import data_keeper, reads_npy

TRACE = ".trace.json.gz"  # the end of a trace's name, as the worker writes it


class NothingToProfile(UsageError):
    """The session's trainer takes no profile (the sim's, a command's): said, nothing run."""


@dataclasses.dataclass(frozen=True)
class ProfiledAgain:
    """A journaled probe, its profile as journaled (None: not profiled then) and now, with
    what was done on the way (tuneup's box made again), one line each."""

    number: int
    chosen: ProbeResult
    then: dict[str, Any] | None
    now: dict[str, Any]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()

    def block(self) -> dict[str, Any]:
        """Then against now, in the shape `profile_lines` and the breakdown bars read."""
        return {"baseline": self.then, "recommendation": self.now}


def chosen_probe(results: ResultsDir, number: int) -> ProbeResult:
    """The journal's probe `number` (1-based), or a one-line error saying which exist."""
    if not results.has_journal():
        raise UsageError(
            f"{results.path} holds no journal: give a results folder of tuneup probe (--out)"
        )
    probes = results.results()
    if not 1 <= number <= len(probes):
        raise UsageError(
            f"--probe {number}: {results.path} journals probes 1 to {len(probes)}: give one of "
            f"those (tuneup tui --results {quoted(results.path)} lists them)"
        )
    return probes[number - 1]


def ladder_stages(results: ResultsDir) -> dict[str, StageOutcome]:
    """What the ladder said at each stage, for the rules to quote; empty where it has no
    summary yet (a stopped or running session) or its summary is unreadable."""
    if not (results.path / SUMMARY).is_file():
        return {}
    try:
        decided = results.summary().stages
    except UsageError:
        return {}
    return {s.stage: StageOutcome(tried=True, summary=s.reason) for s in decided}


def journal_number(results: ResultsDir, result: ProbeResult) -> int | None:
    """Where `result` stands in the journal (1-based), for `--probe N`; None: not journaled
    (yet): a row the app shows and the journal's line read back are equal records."""
    if not results.has_journal():
        return None
    line = result.to_journal()
    for number, journaled in enumerate(results.results(), start=1):
        if journaled.to_journal() == line:
            return number
    return None


def report_stem(number: int) -> str:
    """Probe `number`'s profile files in `probes/` (its trace, an nsys report), without the
    suffix: numbered as the ladder's own traces are."""
    return f"{number:04d}-profile"


def _trainer(session: Mapping[str, Any]) -> TrainerAdapter:
    return load_trainer(str(session.get("trainer") or DEFAULT_TRAINER))


def _refusal(
    results: ResultsDir,
    session: Mapping[str, Any],
    adapter: TrainerAdapter,
    probe: ProbeResult,
    number: int | None,
) -> str:
    """The trainer's own words for why `probe` (journaled as `number`) cannot be profiled,
    and how the user can."""
    section = session.get(adapter.name) if adapter.section else None
    report = results.path / "probes" / (report_stem(number) if number else "profile")
    return adapter.no_profile(
        section if isinstance(section, Mapping) else None, dict(probe.config), report
    )


def why_no_profile(folder: Path, probe: ProbeResult, number: int | None = None) -> str | None:
    """Why the session in `folder` has nothing to profile in `probe` (its journal's `number`,
    found when None): its trainer takes no profile, in one line; None where it may be
    profiled, or where the folder cannot say (profiling it then says why)."""
    results = ResultsDir(folder)
    try:
        session = results.session()
        adapter = _trainer(session)
    except UsageError:
        return None
    if adapter.profiles:
        return None
    number = number if number is not None else journal_number(results, probe)
    return _refusal(results, session, adapter, probe, number)


def _recorded_preset(session: Mapping[str, Any]) -> ProbePreset | None:
    """The preset the session ran, as its session.json keeps it; None: not kept, or no
    longer one this tuneup reads."""
    document = session.get("preset_document")
    if not isinstance(document, Mapping) or not document:
        return None
    source = str(session.get("preset_source") or session.get("preset") or "preset")
    try:
        return parse_preset(document, source, default_name=str(session.get("preset") or ""))
    except UsageError:
        return None


def _keep_data(
    preset: ProbePreset | None, adapter: TrainerAdapter, probe: ProbeResult, folder: Path
) -> str | None:
    """The data the probe reads, as a ladder keeps it before each probe (datakeep.py):
    tuneup's own box made again where it went; what was done, in one line.

    Raises:
        UsageError: a file of the user's is gone.
    """
    values = dict(probe.config)
    check = data_keeper(preset, adapter, values, folder, npy=reads_npy(values)) if preset else None
    if check is None:
        return None
    try:
        return check()
    except DataGone:
        paths = (probe.config.get(k) for k in ("train_path", "val_path"))
        gone = next((p for p in paths if p and not Path(str(p)).is_file()), "its data")
        raise UsageError(
            f"the probe reads {gone}, which is gone: put it back, then profile it again"
        ) from None


def _named_for(probes: Path, number: int, profile: dict[str, Any]) -> dict[str, Any]:
    """The profile, its trace (and the run's spec and log) renamed for the probe's number;
    a later profile of the same probe takes their place. Unrenamed where the folder
    refuses: the profile names the trace where it is."""
    trace = str(profile.get("trace") or "")
    stem, wanted = trace.removesuffix(TRACE), report_stem(number)
    if not trace.endswith(TRACE) or stem == wanted:
        return profile
    try:
        os.replace(probes / trace, probes / f"{wanted}{TRACE}")
    except OSError:
        return profile
    for end in (".json", ".stderr.log"):
        with contextlib.suppress(OSError):
            os.replace(probes / f"{stem}{end}", probes / f"{wanted}{end}")
    return {**profile, "trace": f"{wanted}{TRACE}"}


def _checked(number: int, chosen: ProbeResult, result: ProbeResult) -> dict[str, Any]:
    """The new profile, or the one line that says why there is none."""
    if not result.ok:
        raise UsageError(
            f"probe {number} ({chosen.stage}) did not run again here: {result.status.value}"
            f"{': ' + result.reason if result.reason else ''}"
        )
    profile = dict(result.profile)
    if not profile:
        raise UsageError(f"probe {number} ran again but took no profile")
    missing = profile.get(PROFILE_MISSING)
    if missing and not profile.get("parts_s"):
        raise UsageError(
            f"probe {number} ran again, but its profile has {missing}; the session's journal "
            "is as it was"
        )
    return profile


def profile_again(folder: Path, number: int, launcher: Launcher | None = None) -> ProfiledAgain:
    """Probe `number` of the session in `folder`, run again through its trainer and profiled.

    Args:
        launcher: how the probe's process starts (`tuneup profile --nsys` wraps it in nsys);
            the trainer's own way when None.

    Raises:
        NothingToProfile: the session's trainer takes no profile (its line says how).
        UsageError: no such probe, its data gone, or it did not run again (its status says
            why), or its profile has no breakdown (a trace TMPDIR could not hold).
    """
    results = ResultsDir(Path(folder))
    chosen = chosen_probe(results, number)
    session = results.session()
    adapter = _trainer(session)
    if not adapter.profiles:
        why = _refusal(results, session, adapter, chosen, number)
        raise NothingToProfile(f"probe {number}: {why}")
    preset = _recorded_preset(session)
    notes = [said] if (said := _keep_data(preset, adapter, chosen, results.path)) else []
    probes = results.path / "probes"
    context = TrainerContext(
        workdir=probes,
        budget=ProbeBudget.from_dict(dict(session.get("budget") or {})),
        seed=int(session.get("seed") or 0),
        preset=preset,
        fresh_processes=True,  # a process of its own: an nsys launcher wraps it whole
        launcher=launcher,
    )
    backend = as_backend(adapter.backend(context))
    wanted = Candidate(
        "profile", dict(chosen.variant), judged="full", whole=False, loss=False, profile=True
    )
    try:
        result = backend("profile", wanted, dict(chosen.config))
    finally:
        backend.close()
    now = _named_for(probes, number, _checked(number, chosen, result))
    if now.get(PROFILE_MISSING):
        notes.append(str(now[PROFILE_MISSING]))
    return ProfiledAgain(
        number=number,
        chosen=chosen,
        then=dict(chosen.profile) if chosen.profile else None,
        now=now,
        findings=tuple(findings(now, ladder_stages(results), chosen.config)),
        notes=tuple(notes),
    )
