"""`tuneup monitor --json` beside a step: what the GPU did for exactly the step's duration.

The whole ladder is the window's main measurement; the monitor's trace beside
it (one JSON object a second: utilisation, power, memory, clocks, throttling)
says what the GPU did meanwhile, and is kept gzipped as monitor.jsonl.gz. Where
NVML is missing (a CPU machine) the monitor says why and exits: the reason goes
in the step's record and the step goes on.

`Monitor` owns the process and the files; `verdict` reads what it printed.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suite_types import Context, last_line

INTERVAL_S = 1.0
TRACE = "monitor.jsonl.gz"


def monitor_command(ctx: Context) -> list[str]:
    """One JSON object per second, as `tuneup monitor --help` documents --json."""
    return ctx.tuneup("monitor", "--json", "--interval", f"{INTERVAL_S:g}")


def verdict(
    text: str, stderr: str, rc: int | None, outlived: bool, seconds: float
) -> dict[str, Any]:
    """What the monitor gave: samples of a GPU, or why none (its own words where it says).

    Args:
        text: its stdout, JSON lines.
        stderr: its stderr.
        rc: its exit status.
        outlived: it was still running when the step ended (and was stopped then).
        seconds: from its start to the step's end.
    """
    samples = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                samples.append(value)
    with_gpus = [s for s in samples if s.get("gpus")]
    said = next((str(s["error"]) for s in reversed(samples) if s.get("error")), "")
    if outlived and with_gpus:
        status = "ran"
        why = f"{len(with_gpus)} samples over {seconds:.0f}s, beside the whole step"
    elif outlived:
        status = "no samples"
        why = said or "no GPU in its samples"
    else:
        status = "refused"
        why = said or last_line(stderr, "rror") or last_line(stderr) or f"exited {rc}"
        why = f"exited {rc} before the step ended: {why}"
    return {
        "status": status,
        "why": why,
        "samples": len(with_gpus),
        "lines": len(samples),
        "seconds": round(seconds, 1),
        "rc": rc,
    }


class Monitor:
    """The monitor's process, started before a step's command and stopped right after it."""

    def __init__(self, command: list[str], env: Mapping[str, str], cwd: Path, logs: Path) -> None:
        self.command = command
        self.raw = logs / "monitor.jsonl"
        self.err = logs / "monitor.err"
        self.began = time.monotonic()
        self.proc: subprocess.Popen[bytes] | None = None
        self.failed = ""
        try:
            with self.raw.open("wb") as out, self.err.open("wb") as err:
                self.proc = subprocess.Popen(
                    command, stdout=out, stderr=err, env=dict(env), cwd=cwd, start_new_session=True
                )
        except OSError as exc:
            self.failed = f"could not start: {exc}"

    def stop(self, trace: Path) -> dict[str, Any]:
        """Stop it (its process group), gzip its output to `trace`; what it gave."""
        seconds = time.monotonic() - self.began
        outlived = self.proc is not None and self.proc.poll() is None
        if self.proc is not None and outlived:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=5.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
        text = _read(self.raw)
        with gzip.open(trace, "wt") as packed:
            packed.write(text)
        self.raw.unlink(missing_ok=True)
        if self.failed:
            found = {"status": "refused", "why": self.failed, "samples": 0, "lines": 0}
        else:
            rc = None if self.proc is None else self.proc.returncode
            found = verdict(text, _read(self.err), None if outlived else rc, outlived, seconds)
        return {"file": trace.name, **found}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
