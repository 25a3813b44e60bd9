"""Profiling one journaled configuration again, briefly: `tuneup profile` and the app's key.

The ladder profiles its baseline and each adoption; any other configuration it
measured can be profiled on demand. Its values (the journal line's config) run
again in a fresh worker with the session's budget, judged on FULL and asked for
a profile (worker/profile.py): its trials, then a trial's worth of profiled
steps. The trace is written beside the session's own (`probes/`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneup.cluster.launch import Launcher, LocalLauncher
from tuneup.errors import UsageError
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.profile_rules import Finding, StageOutcome, findings
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget, ProbeResult
from tuneup.tuning.results.journal import SUMMARY, ResultsDir, quoted

# Runs one spec in a fresh worker: (label, variant, spec) -> its result.
RunProbe = Callable[[str, dict[str, Any], ProbeSpec], ProbeResult]


@dataclasses.dataclass(frozen=True)
class ProfiledAgain:
    """A journaled probe, its profile as journaled (None: not profiled then) and now."""

    number: int
    chosen: ProbeResult
    then: dict[str, Any] | None
    now: dict[str, Any]
    findings: tuple[Finding, ...]

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


def runner_probe(launcher: Launcher, workdir: Path) -> RunProbe:
    """Each call runs its spec in a fresh worker under `launcher`, its files in `workdir`."""

    def run(label: str, variant: dict[str, Any], spec: ProbeSpec) -> ProbeResult:
        runner = ProbeRunner(launcher, workdir)
        try:
            return runner.run(label, variant, spec)
        finally:
            runner.close()

    return run


def profile_again(
    folder: Path, number: int, launcher: Launcher | None = None, run: RunProbe | None = None
) -> ProfiledAgain:
    """Probe `number` of the session in `folder`, run again and profiled.

    Args:
        launcher: how the worker starts (`tuneup profile --nsys` wraps it in nsys);
            a LocalLauncher when None.
        run: runs the spec (tests pass a fake); a fresh ProbeRunner's run when None.

    Raises:
        UsageError: no such probe, or it did not run again (its status says why).
    """
    results = ResultsDir(Path(folder))
    chosen = chosen_probe(results, number)
    session = results.session()
    budget = ProbeBudget.from_dict(dict(session.get("budget") or {}))
    spec = ProbeSpec(
        config=dict(chosen.config),
        plan=plan_probe(budget, judged="full", whole=False, loss=False, profile=True),
        seed=int(session.get("seed") or 0),
    )
    if run is None:
        run = runner_probe(launcher or LocalLauncher(), results.path / "probes")
    result = run("profile", dict(chosen.variant), spec)
    if not result.ok or not result.profile:
        raise UsageError(
            f"probe {number} ({chosen.stage}) did not run again here: {result.status.value}"
            f"{': ' + result.reason if result.reason else ''}"
        )
    stages = ladder_stages(results)
    return ProfiledAgain(
        number=number,
        chosen=chosen,
        then=dict(chosen.profile) if chosen.profile else None,
        now=dict(result.profile),
        findings=tuple(findings(result.profile, stages, chosen.config)),
    )
