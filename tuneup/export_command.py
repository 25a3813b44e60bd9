"""`tuneup export DIR --format F`: render a finished session's recommendation."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneup.errors import ExitCode


def run_export_command(folder: Path, fmt: str, output: Path | None) -> int:
    from tuneup.export import render
    from tuneup.export.slurm import hints_from_session
    from tuneup.probe.journal import ResultsDir

    results = ResultsDir(folder)
    session = results.session()
    summary = results.summary()
    values = summary["recommendation"]["values"]
    # The probed layout and the probe's job, so the script asks for what was measured.
    text = render(fmt, values, hints=hints_from_session(session))
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output}", file=sys.stderr)
    return ExitCode.OK
