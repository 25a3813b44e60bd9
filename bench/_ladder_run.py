"""One real `tuneup probe` ladder, timed from outside and its journal read back: what the
benches that set a ladder against something (a prediction, a variant) run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LadderRun:
    """The command's exit status, its wall time from outside, its output and journal."""

    exit: int
    wall_s: float
    stdout: str
    lines: list[dict[str, Any]]


def run_ladder(preset: str, out: Path, env: dict[str, str] | None = None) -> LadderRun:
    """`tuneup probe --preset P --out DIR`, with `env` added to this process's environment."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", "probe", "--preset", preset, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )
    wall = time.monotonic() - began
    journal = out / "journal.jsonl"
    lines = (
        [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
        if journal.is_file()
        else []
    )
    return LadderRun(done.returncode, wall, done.stdout, lines)
