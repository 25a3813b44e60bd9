"""`tuneup export DIR --format F`: render a finished session's recommendation."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneup.errors import ExitCode
from tuneup.export.session import read_session_export, render_session, session_notes
from tuneup.hardware.machine import machine_info
from tuneup.paths import atomic_write_text, output_file
from tuneup.tuning.results.journal import ResultsDir, quoted
from tuneup.tuning.session.rebuild import readable_summary


def run_export_command(folder: Path, fmt: str, output: Path | None, edition: str = "sc22") -> int:
    if output is not None:
        output_file(output, "-o", "the export's file")  # before any work
    for line in readable_summary(folder, machine_info):  # a damaged one rebuilt, said
        print(f"tuneup: note: {line}", file=sys.stderr)
    export = read_session_export(folder)
    text = render_session(export, fmt, edition)
    for note in session_notes(export, fmt):  # in the file too, where its format allows
        print(f"tuneup: note: {note}", file=sys.stderr)
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
        # the disk may fill since the check: an earlier export there stays whole
        atomic_write_text(output, text, "the export's file", place="-o")
        print(f"wrote {output}", file=sys.stderr)
    return ExitCode.OK
