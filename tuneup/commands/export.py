"""`tuneup export DIR --format F`: render a finished session's recommendation."""

from __future__ import annotations

import sys
from pathlib import Path

from tuneup.errors import ExitCode
from tuneup.export.session import read_session_export, render_session


def run_export_command(folder: Path, fmt: str, output: Path | None, edition: str = "sc22") -> int:
    text = render_session(read_session_export(folder), fmt, edition)
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output}", file=sys.stderr)
    return ExitCode.OK
