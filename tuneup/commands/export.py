"""`tuneup export DIR --format F`: render a finished session's recommendation."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneup.errors import ExitCode, UsageError
from tuneup.export.session import read_session_export, render_session
from tuneup.hardware.machine import machine_info
from tuneup.paths import output_file, problem
from tuneup.tuning.journal import ResultsDir, quoted
from tuneup.tuning.rebuild import readable_summary


def run_export_command(folder: Path, fmt: str, output: Path | None, edition: str = "sc22") -> int:
    if output is not None:
        output_file(output, "-o", "the export's file")  # before any work
    for line in readable_summary(folder, machine_info):  # a damaged one rebuilt, said
        print(f"tuneup: note: {line}", file=sys.stderr)
    text = render_session(read_session_export(folder), fmt, edition)
    partial = ResultsDir(folder).summary().partial
    if partial is not None:
        print(
            f"tuneup: note: the session stopped before its end ({partial.why}): this is its "
            "best configuration so far, upheld by its stages' pairs but not confirmed against "
            f"the baseline; finish it with: tuneup probe --resume {quoted(folder)}",
            file=sys.stderr,
        )
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:  # the disk filled since the check, say
            raise UsageError(problem(output, exc, "-o", "the export's file")) from None
        print(f"wrote {output}", file=sys.stderr)
    return ExitCode.OK
