"""The fault matrix: the real cpu-smoke ladder under the faults a hostile node deals it.

Each row injects one fault for real (a small file system, a read-only bind mount, the
data cache deleted, a truncated session.json, a SIGSTOP in a trial, a newline in --out,
a compile killed while it links, a pipe closed early: bench/_fault_rows_heal.py; hostile
input, from exports that would run what they did not write to broken plugins:
bench/_fault_rows_hostile.py, ...),
records the exit status and the line tuneup ended with, then applies the remedy
the line names and records how many journaled probes the next run used again.

    python bench/fault_matrix.py --json bench/results/faults-after.json
    python bench/fault_matrix.py --tuneup-path /tmp/before --json .../faults-before.json

`--tuneup-path` runs another checkout of tuneup (a `git worktree` of an older commit)
with this machine's venv. Rows that mount need `unshare -rm` (a user namespace); where
it is refused they are reported as not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Issue 35's rows (tuneup's own files, exports, streams) share the harness with these.
from _fault_harness import (
    PROBE,
    ROW_LIMIT_S,
    STAGES,
    Harness,
    bundled_preset,
    fill,
    finish,
    journal_lines,
    reused,
    row,
    stopped_after,
    wait_for,
    workers_of,
)
from _fault_rows_heal import HEAL_MOUNT_ROWS, HEAL_ROWS
from _fault_rows_hostile import HOSTILE_ROWS
from _fault_rows_input import INPUT_ROWS

# --- the rows ------------------------------------------------------------------------


def cache_deleted(h: Harness) -> dict[str, Any]:
    out = h.work / "cache-deleted"
    proc = h.start(*PROBE, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= 2)
    for synth in h.cache.glob("synth-*"):
        shutil.rmtree(synth, ignore_errors=True)
    first = finish(proc)
    failed = sum(
        1
        for line in (out / "journal.jsonl").read_text().splitlines()
        if '"status": "ok"' not in line
    )
    return row("synthetic data cache deleted mid-ladder", first, probes_failed=failed)


def all_contended(h: Harness) -> dict[str, Any]:
    out = h.work / "contended"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        first = h.run(*PROBE, "--out", str(out))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return row("every probe contended (4 CPU hogs on 2 cores)", first)


def session_truncated(h: Harness) -> dict[str, Any]:
    out, kept = stopped_after(h, "truncated", PROBE)
    (out / "session.json").write_bytes((out / "session.json").read_bytes()[:700])
    first = h.run("probe", "--resume", str(out))
    again = first
    if first["exit"] == 2:  # the remedy the line names: the preset again
        again = h.run("probe", "--resume", str(out), "--preset", "cpu-smoke", "--stages", STAGES)
    return row(
        "session.json truncated to 700 B, then --resume",
        first,
        journaled=kept,
        remedy_exit=again["exit"],
        reused=reused(again),
        remedy_said=again["said"],
    )


def session_deleted(h: Harness) -> dict[str, Any]:
    out, kept = stopped_after(h, "deleted", PROBE)
    (out / "session.json").unlink()
    other = h.run("probe", "--preset", "cpu-smoke", "--stages", "amp", "--out", str(out))
    mixed = journal_lines(out) != kept
    again = h.run("probe", "--resume", str(out), "--preset", "cpu-smoke", "--stages", STAGES)
    return row(
        "session.json deleted, then a new session with the same --out",
        other,
        journaled=kept,
        journal_mixed=mixed,
        remedy="--resume DIR --preset cpu-smoke --stages optimizer",
        remedy_exit=again["exit"],
        reused=reused(again),
        remedy_said=again["said"],
    )


def baseline_killed(h: Harness) -> dict[str, Any]:
    out = h.work / "baseline-killed"
    proc = h.start(*PROBE, "--out", str(out))
    kills = 0
    end = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < end and kills < 4:
        workers = workers_of(proc.pid)
        if workers:
            time.sleep(1.0)  # inside the baseline's measurement
            for pid in workers_of(proc.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
        time.sleep(0.1)
    first = finish(proc)
    again = h.run("probe", "--resume", str(out))
    return row(
        "baseline's worker SIGKILLed in each attempt, then --resume",
        first,
        kills=kills,
        remedy_exit=again["exit"],
        remedy_said=again["said"],
    )


def newline_out(h: Harness) -> dict[str, Any]:
    out = h.work / "two\nlines"
    first = h.run(*PROBE, "--out", str(out))
    return row("--out with a newline in it", first)


def sigkill_outside(h: Harness) -> dict[str, Any]:
    out = h.work / "sigkill"
    proc = h.start(*PROBE, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= 3)
    wait_for(lambda: bool(workers_of(proc.pid)), 30)
    for pid in workers_of(proc.pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    first = finish(proc)
    reasons = [
        json.loads(line).get("reason", "")
        for line in (out / "journal.jsonl").read_text().splitlines()
        if "SIGKILL" in line
    ]
    return row("a worker SIGKILLed from outside", first, reason=reasons[0] if reasons else "")


def sigstop_trial(h: Harness) -> dict[str, Any]:
    out = h.work / "sigstop"
    proc = h.start(*PROBE, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= 3)
    stopped: list[int] = []
    at = -1
    if wait_for(lambda: bool(workers_of(proc.pid)), 30):
        time.sleep(0.3)
        at = journal_lines(out)  # the probe under way is the next line
        for pid in workers_of(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        time.sleep(8.0)
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
    first = finish(proc)
    lines = (out / "journal.jsonl").read_text().splitlines()
    hit: dict[str, Any] = {}
    if 0 <= at < len(lines):
        probe = json.loads(lines[at])
        kept = [
            t
            for phase in ("full", "io", "synthetic")
            for t in probe.get(f"{phase}_sps_trials") or []
        ]
        hit = {
            "stage": probe.get("stage"),
            "status": probe.get("status"),
            "kept_trials_max_over_min": round(max(kept) / min(kept), 2) if kept else None,
            "iqr_pct": probe.get("iqr_pct"),
            "trials_discarded": probe.get("trials_discarded"),
            "far_trials": probe.get("far_trials"),
        }
    return row("a worker SIGSTOPped 8 s inside its trials", first, probe=hit)


def preset_moved(h: Harness) -> dict[str, Any]:
    out = h.work / "preset-moved"
    mine = h.work / "mine.yaml"
    shown = h.run("presets", "show", "cpu-smoke")
    source = next(
        (
            line.split("from ", 1)[1].strip()
            for line in shown["stdout"].splitlines()
            if "from " in line
        ),
        "",
    )
    shutil.copy(source if Path(source).is_file() else bundled_preset(), mine)
    stopped_after(h, out.name, ["probe", "--preset", str(mine), "--stages", STAGES], lines=3)
    mine.rename(h.work / "moved.yaml")
    first = h.run("probe", "--resume", str(out))
    return row("the preset file moved away before --resume", first)


def readonly_home(h: Harness) -> dict[str, Any]:
    home = h.work / "home"
    home.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(home), str(home)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(home)], check=True)
    env = h.env(HOME=str(home), TUNEUP_CACHE_DIR="", XDG_CACHE_HOME="")
    first = h.run(*PROBE, "--out", str(h.work / "ro-home"), env=env)
    return row("read-only HOME, no cache variable set", first)


def disk_full_mid(h: Harness) -> dict[str, Any]:
    disk = h.work / "small"
    disk.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "none", str(disk)], check=True)
    out = disk / "r"
    proc = h.start("--debug", *PROBE, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= 3)
    fill(disk / "filler")
    first = finish(proc)
    kept = journal_lines(out)
    (disk / "filler").unlink()
    again = h.run("probe", "--resume", str(out))
    return row(
        "the disk fills mid-ladder (4 MB tmpfs, run with --debug)",
        first,
        traceback="Traceback" in first["stderr"],
        journaled=kept,
        remedy="free the space, --resume",
        remedy_exit=again["exit"],
        reused=reused(again),
    )


def disk_full_start(h: Harness) -> dict[str, Any]:
    disk = h.work / "full"
    disk.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(disk)], check=True)
    fill(disk / "filler")
    out = disk / "r"
    first = h.run(*PROBE, "--out", str(out))
    left = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    return row("the disk is full at the start", first, left_in_folder=left)


def readonly_mid(h: Harness) -> dict[str, Any]:
    out = h.work / "ro"
    proc = h.start(*PROBE, "--out", str(out))
    wait_for(lambda: journal_lines(out) >= 3)
    # A read-only bind of the folder over itself: what is open stays writable below it,
    # every new open (the journal opens per line) meets a read-only file system.
    subprocess.run(["mount", "--bind", str(out), str(out)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(out)], check=True)
    first = finish(proc)
    kept = journal_lines(out)
    still = h.run("probe", "--resume", str(out))
    subprocess.run(["umount", str(out)], check=True)
    again = h.run("probe", "--resume", str(out))
    return row(
        "the results folder turns read-only mid-ladder",
        first,
        journaled=kept,
        resume_while_ro_exit=still["exit"],
        resume_while_ro_said=still["said"],
        remedy="make it writable, --resume",
        remedy_exit=again["exit"],
        reused=reused(again),
    )


PLAIN_ROWS: dict[str, Callable[[Harness], dict[str, Any]]] = {
    "cache-deleted": cache_deleted,
    "all-contended": all_contended,
    "session-truncated": session_truncated,
    "session-deleted": session_deleted,
    "baseline-killed": baseline_killed,
    "newline-out": newline_out,
    "sigkill": sigkill_outside,
    "sigstop": sigstop_trial,
    "preset-moved": preset_moved,
    **HEAL_ROWS,
    **HOSTILE_ROWS,
    **INPUT_ROWS,
}
MOUNT_ROWS: dict[str, Callable[[Harness], dict[str, Any]]] = {
    "disk-full-mid": disk_full_mid,
    "disk-full-start": disk_full_start,
    "readonly-mid": readonly_mid,
    "readonly-home": readonly_home,
    **HEAL_MOUNT_ROWS,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuneup-path", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--inside", default="", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:  # one mount row, in the user namespace `unshare -rm` made
        harness = Harness(args.work, args.tuneup_path)
        print(json.dumps(MOUNT_ROWS[args.inside](harness)))
        return 0
    chosen = [r for r in args.rows.split(",") if r] or [*PLAIN_ROWS, *MOUNT_ROWS]
    work = Path(tempfile.mkdtemp(prefix="tuneup-faults-"))
    harness = Harness(work, args.tuneup_path)
    rows = []
    for name in chosen:
        began = time.monotonic()
        play = PLAIN_ROWS.get(name)
        found = play(harness) if play is not None else _in_namespace(name, harness)
        result = {"row": name, **found, "seconds": round(time.monotonic() - began, 1)}
        print(json.dumps(result), flush=True)
        rows.append(result)
    document = {
        "command": " ".join(["python", "bench/fault_matrix.py", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d"),
        "tuneup": subprocess.run(
            [
                "git",
                "-C",
                str(args.tuneup_path or Path(__file__).parent),
                "rev-parse",
                "--short",
                "HEAD",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "rows": rows,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _in_namespace(name: str, harness: Harness) -> dict[str, Any]:
    argv = [
        "unshare",
        "-rm",
        sys.executable,
        __file__,
        "--inside",
        name,
        "--work",
        str(harness.work),
    ]
    if harness.tuneup_path is not None:
        argv += ["--tuneup-path", str(harness.tuneup_path)]
    if shutil.which("unshare") is None:
        return {"fault": name, "not_run": "no unshare here"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3 * ROW_LIMIT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"fault": name, "not_run": (done.stderr.strip().splitlines() or ["?"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


if __name__ == "__main__":
    sys.exit(main())
