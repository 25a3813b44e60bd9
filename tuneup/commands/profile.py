"""`tuneup profile DIR --probe N`: profile one journaled configuration again, briefly.

The run is tuning/session/profile_again.py's, through the session's trainer (the app's
`p` key runs the same); this prints its breakdown, then against now, with the findings
(probe/profile_rules.py), quoting what the ladder did at each stage. A session whose
trainer takes no profile (the sim's, a command's) is told so in one line, exit 2; a
stop signal ends the run at once, in one line saying nothing of the session changed.

`--nsys` runs that probe under Nsight Systems the tutorial's way
(`--capture-range=cudaProfilerApi`): the worker opens the capture around the
profiled steps alone, and the report is `probes/NNNN-profile.nsys-rep`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

from tuneup.cluster.launch import LocalLauncher
from tuneup.cluster.signals import Stopped, StopSignals, signal_name
from tuneup.errors import ExitCode, UsageError
from tuneup.probe.describe import variant_text
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.profiles import profile_lines
from tuneup.tuning.session.profile_again import (
    NothingToProfile,
    chosen_probe,
    profile_again,
    report_stem,
    why_no_profile,
)
from tuneup.worker.profile import NSYS_ENV, OFF_ENV


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
    chosen = chosen_probe(ResultsDir(folder), number)  # a bad --probe before nsys's check
    nothing = why_no_profile(folder, chosen, number)  # a sim session's: before nsys's check
    if nothing:
        raise NothingToProfile(f"probe {number}: {nothing}")
    if os.environ.get(OFF_ENV) == "0":
        raise UsageError(f"{OFF_ENV}=0 in the environment turns profiles off: unset it")
    if nsys and shutil.which("nsys") is None:
        raise UsageError("--nsys: nsys is not on the PATH: load Nsight Systems (module load)")
    report = Path(folder) / "probes" / report_stem(number)
    with StopSignals():  # a signal stops the run at once: a profile keeps nothing half-made
        try:
            again = profile_again(
                folder, number, NsysLauncher(report=str(report)) if nsys else None
            )
        except Stopped as exc:
            print(
                f"tuneup: {signal_name(exc.signum)}: stopped profiling probe {number}, no "
                "profile taken; the session's journal, summary and traces are as they were",
                file=sys.stderr,
            )
            return exc.exit_code
    for note in again.notes:
        print(f"tuneup: {note}", file=sys.stderr)
    print(f"probe {number} ({chosen.stage}: {variant_text(chosen)}), profiled again:")
    titles = ("in the ladder", "now") if again.then else ("not profiled then", "now")
    for line in profile_lines(again.block(), titles):
        print(line)
    for finding in again.findings:
        print(f"finding: {finding.text}")
    if nsys:
        print(f"nsys report: {report}.nsys-rep", file=sys.stderr)
    return ExitCode.OK
