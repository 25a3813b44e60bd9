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
        "commit": _commit(),
        **figures,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2) + "\n")
    return document


def _commit() -> str | None:
    """`git describe --always --dirty` of the working tree, None where git cannot say."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
