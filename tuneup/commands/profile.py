"""`tuneup profile DIR --probe N`: profile one journaled configuration again, briefly.

The ladder profiles its baseline and each adoption; any other configuration it
measured can be profiled on demand. Its values (the journal line's config) run
again in a fresh worker with the session's budget, judged on FULL and asked for
a profile (worker/profile.py): its trials, then a trial's worth of profiled
steps. The trace is written beside the session's own (`probes/`), and the
breakdown is printed with the findings (probe/profile_rules.py), quoting what
the ladder did at each stage.

`--nsys` runs that probe under Nsight Systems the tutorial's way
(`--capture-range=cudaProfilerApi`): the worker opens the capture around the
profiled steps alone, and the report is `probes/NNNN-profile.nsys-rep`.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

from tuneup.cluster.launch import LocalLauncher
from tuneup.errors import ExitCode, UsageError
from tuneup.probe.describe import variant_text
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.profile_rules import StageOutcome, findings
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget
from tuneup.tuning.journal import SUMMARY, ResultsDir, quoted
from tuneup.tuning.profiles import profile_lines
from tuneup.worker.profile import NSYS_ENV


@dataclasses.dataclass(frozen=True)
class NsysLauncher(LocalLauncher):
    """The worker under `nsys profile`, capturing what the worker's profiler API opens."""

    report: str = "profile"

    def command(self, spec_path: Path) -> list[str]:
        return [
            "nsys",
            "profile",
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            "--trace=cuda,nvtx,osrt",
            "--force-overwrite=true",
            "-o",
            self.report,
            *super().command(spec_path),
        ]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """The worker's, told to open nsys's capture range around its profiled steps."""
        return {**super().env(base), NSYS_ENV: "1"}


def run_profile_command(folder: Path, number: int, nsys: bool = False) -> int:
    results = ResultsDir(folder)
    if not results.has_journal():
        raise UsageError(
            f"{folder} holds no journal: give a results folder of tuneup probe (--out)"
        )
    probes = results.results()
    if not 1 <= number <= len(probes):
        raise UsageError(
            f"--probe {number}: {folder} journals probes 1 to {len(probes)}: give one of those "
            f"(tuneup tui --results {quoted(folder)} lists them)"
        )
    if nsys and shutil.which("nsys") is None:
        raise UsageError("--nsys: nsys is not on the PATH: load Nsight Systems (module load)")
    chosen = probes[number - 1]
    session = results.session()
    budget = ProbeBudget.from_dict(dict(session.get("budget") or {}))
    spec = ProbeSpec(
        config=dict(chosen.config),
        plan=plan_probe(budget, judged="full", whole=False, loss=False, profile=True),
        seed=int(session.get("seed") or 0),
    )
    workdir = results.path / "probes"
    launcher: LocalLauncher = LocalLauncher()
    if nsys:
        report = workdir / f"{number:04d}-profile"
        launcher = NsysLauncher(report=str(report))
    runner = ProbeRunner(launcher, workdir)
    try:
        result = runner.run("profile", dict(chosen.variant), spec)
    finally:
        runner.close()
    if not result.ok or not result.profile:
        raise UsageError(
            f"probe {number} ({chosen.stage}) did not run again here: {result.status.value}"
            f"{': ' + result.reason if result.reason else ''}"
        )
    stages = {}
    if (results.path / SUMMARY).is_file():  # a stopped session's ladder said less
        stages = {
            s.stage: StageOutcome(tried=True, summary=s.reason) for s in results.summary().stages
        }
    said = variant_text(chosen)
    print(f"probe {number} ({chosen.stage}: {said}), profiled again:")
    journaled = chosen.profile or None  # where the ladder profiled it then
    block = {"baseline": journaled, "recommendation": result.profile}
    for line in profile_lines(block, ("then" if journaled else "", "now")):
        print(line)
    for finding in findings(result.profile, stages, chosen.config):
        print(f"finding: {finding.text}")
    if nsys:
        print(f"nsys report: {workdir / (Path(report).name + '.nsys-rep')}", file=sys.stderr)
    return ExitCode.OK
