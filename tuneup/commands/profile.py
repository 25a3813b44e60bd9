"""`tuneup profile DIR --probe N`: profile one journaled configuration again, briefly.

The run is tuning/session/profile_again.py's (the app's `P` key runs the same); this
prints its breakdown, then against now, with the findings (probe/profile_rules.py),
quoting what the ladder did at each stage.

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
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.profiles import profile_lines
from tuneup.tuning.session.profile_again import chosen_probe, profile_again
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
    chosen = chosen_probe(ResultsDir(folder), number)  # a bad --probe before nsys's check
    if nsys and shutil.which("nsys") is None:
        raise UsageError("--nsys: nsys is not on the PATH: load Nsight Systems (module load)")
    launcher: LocalLauncher = LocalLauncher()
    report = Path(folder) / "probes" / f"{number:04d}-profile"
    if nsys:
        launcher = NsysLauncher(report=str(report))
    again = profile_again(folder, number, launcher)
    print(f"probe {number} ({chosen.stage}: {variant_text(chosen)}), profiled again:")
    for line in profile_lines(again.block(), ("then" if again.then else "", "now")):
        print(line)
    for finding in again.findings:
        print(f"finding: {finding.text}")
    if nsys:
        print(f"nsys report: {report}.nsys-rep", file=sys.stderr)
    return ExitCode.OK
