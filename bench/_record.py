"""How a benchmark records its figures: one JSON document with what ran it and when."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def record(bench: str, out: Path | None, **figures: Any) -> dict[str, Any]:
    """The document (bench name, command, date, the commit it ran at, figures); written to
    `out` when given."""
    document = {
        "bench": bench,
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "commit": code_commit(),
        **figures,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2) + "\n")
    return document


def code_commit() -> str | None:
    """The commit the code ran at (`git rev-parse --short HEAD`), with "-dirty" where code
    outside bench/results differs from it (a record written before is not code); None
    where git cannot say."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, cwd=here,
        )  # fmt: skip
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            capture_output=True, text=True, timeout=10, cwd=here.parent,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    dirty = changed.returncode == 0 and bool(changed.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")
