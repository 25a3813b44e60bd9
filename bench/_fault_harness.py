"""What every row of the fault matrix shares: the harness that runs tuneup, how a run
ends and what it said, the probes it journaled, the workers below it, and a row's record.

Apart from the rows (fault_matrix.py's own and bench/_fault_rows_*.py) so that each
imports it and none imports another: fault_matrix.py gathers the rows, the rows
import only this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES = "optimizer"
PROBE = ["probe", "--preset", "cpu-smoke", "--stages", STAGES]
ROW_LIMIT_S = 240


class Harness:
    """Runs tuneup (the checkout at `tuneup_path`, or this one) with its own cache."""

    def __init__(self, work: Path, tuneup_path: Path | None) -> None:
        self.work = work
        self.cache = work / "cache"
        self.tuneup_path = tuneup_path

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, TUNEUP_CACHE_DIR=str(self.cache), COLUMNS="200")
        env.pop("TUNEUP_FAULT", None)
        if self.tuneup_path is not None:
            env["PYTHONPATH"] = str(self.tuneup_path)
        env.update(extra)
        return {k: v for k, v in env.items() if v != ""}

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tuneup", *args],
            env=env or self.env(),
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        proc = self.start(*args, env=env)
        return finish(proc)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=ROW_LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return {"exit": proc.returncode, "said": last_words(out, err), "stdout": out, "stderr": err}


def last_words(out: str, err: str) -> str:
    """The line a user reads last: the headline, else the last line on stderr."""
    for line in reversed(out.splitlines()):
        if line.startswith(("recommendation:", "partial", "tuneup: no answer")):
            return line.strip()
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def journal_lines(folder: Path) -> int:
    try:
        return sum(1 for line in (folder / "journal.jsonl").read_text().splitlines() if line)
    except OSError:
        return 0


def wait_for(check: Callable[[], bool], limit_s: float = ROW_LIMIT_S) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return False


def workers_of(pid: int) -> list[int]:
    """The worker processes (python -m tuneup.worker) below `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "tuneup.worker" in cmd and _descends(int(entry.name), pid, int(stat[1])):
            found.append(int(entry.name))
    return found


def _descends(pid: int, root: int, parent: int) -> bool:
    while parent > 1:
        if parent == root:
            return True
        try:
            parent = int(
                (Path("/proc") / str(parent) / "stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except OSError:
            return False
    return False


def reused(result: dict[str, Any]) -> int:
    """Probes a resumed run took from the journal (each says [from journal])."""
    return (result["stdout"] + result["stderr"]).count("[from journal]")


def stopped_after(h: Harness, name: str, command: list[str], lines: int = 4) -> tuple[Path, int]:
    """A ladder in h.work/name stopped by SIGINT once `lines` probes are journaled; its
    folder and the probes it journaled."""
    out = h.work / name
    proc = h.start(*command, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= lines)
    proc.send_signal(signal.SIGINT)
    finish(proc)
    return out, journal_lines(out)


def row(fault: str, first: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"fault": fault, "exit": first["exit"], "said": first["said"], **more}


def fill(path: Path) -> None:
    """Writes zeros to `path` until its file system refuses more."""
    with path.open("wb") as file, contextlib.suppress(OSError):
        while True:
            file.write(b"\0" * 65536)
            file.flush()


def bundled_preset() -> Path:
    """The checkout's own cpu-smoke preset file."""
    return Path(__file__).resolve().parents[1] / "presets" / "cpu-smoke.yaml"
