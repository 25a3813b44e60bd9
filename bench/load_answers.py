"""Does README command 1 answer on a shared node as it does on a quiet one?

Runs `tuneup probe` (the default ladder: cpu-smoke without CUDA) `--runs` times quiet and
`--runs` times beside a busy loop at a duty cycle (one process busy `--duty` of each
second: a load of about 1 on top of tuneup's own), alternated quiet, loaded, quiet, ...
so both see the same machine; and, with `--hogs N`, once more beside N busy loops that
never rest. Records each run's exit status, recommended changes, wall time and the
line it ended on, and how many loaded runs answered with the quiet runs' most common
recommendation, whole (exit 0) or naming a stage it left out (exit 4) (issue 50's goal:
8 of 10, and under two busy loops an end within 4 minutes that is true).

    python bench/load_answers.py --runs 10 --out bench/results/load_answers_cpu.json

Not a test: two to three minutes a run on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _record import record


def _busy(duty: float, stop: Any) -> None:
    """Spin `duty` of every second, rest the rest, until `stop` is set."""
    while not stop.is_set():
        began = time.monotonic()
        while time.monotonic() - began < duty:
            pass
        time.sleep(max(0.0, 1.0 - duty))


def one_run(folder: Path, load: str, duty: float, hogs: int) -> dict[str, Any]:
    stop = multiprocessing.Event()
    loops = []
    if load == "duty":
        loops = [multiprocessing.Process(target=_busy, args=(duty, stop))]
    elif load == "hogs":
        loops = [multiprocessing.Process(target=_busy, args=(1.0, stop)) for _ in range(hogs)]
    for loop in loops:
        loop.start()
    command = [sys.executable, "-m", "tuneup", "probe", "--out", str(folder), "--json"]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder.parent)
    finally:
        stop.set()
        for loop in loops:
            loop.join(timeout=5)
            if loop.is_alive():
                loop.kill()
    wall = time.perf_counter() - began
    changes: dict[str, Any] | None = None
    headline = ""
    try:
        summary = json.loads(done.stdout)["summary"]
        changes = summary["recommendation"]["changes"]
        headline = summary["recommendation"]["headline"]
    except (ValueError, KeyError, TypeError):
        pass
    last = next((x for x in reversed(done.stderr.splitlines()) if x.strip()), "")
    return {
        "load": load,
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "changes": changes,
        "headline": headline,
        "last_line": last,
    }


def _answered(run: dict[str, Any]) -> bool:
    """A recommendation, whole (exit 0) or naming a stage it left out (exit 4)."""
    return run["exit"] in (0, 4) and run["changes"] is not None


def _key(changes: dict[str, Any] | None) -> str:
    return json.dumps(changes, sort_keys=True) if changes is not None else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--duty", type=float, default=0.7, help="the busy loop's busy share")
    parser.add_argument("--hogs", type=int, default=2, help="busy loops of the last run (0: none)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for index in range(args.runs):
            for load in ("quiet", "duty"):
                found = one_run(Path(work) / f"{load}-{index}", load, args.duty, 0)
                print(json.dumps(found), flush=True)
                runs.append(found)
        if args.hogs:
            found = one_run(Path(work) / "hogs", "hogs", 1.0, args.hogs)
            print(json.dumps(found), flush=True)
            runs.append(found)
    quiet = [r for r in runs if r["load"] == "quiet"]
    loaded = [r for r in runs if r["load"] == "duty"]
    common, _count = collections.Counter(_key(r["changes"]) for r in quiet).most_common(1)[0]
    same = sum(1 for r in loaded if _key(r["changes"]) == common and _answered(r))
    quiet_same = sum(1 for r in quiet if _key(r["changes"]) == common)
    result = record(
        "load_answers",
        args.out,
        duty=args.duty,
        quiet_answered=sum(1 for r in quiet if _answered(r)),
        loaded_answered=sum(1 for r in loaded if _answered(r)),
        loaded_same_as_quiet=same,
        quiet_same_as_common=quiet_same,
        exits={
            load: collections.Counter(str(r["exit"]) for r in runs if r["load"] == load)
            for load in ("quiet", "duty", "hogs")
        },
        quiet_common=json.loads(common) if common != "none" else None,
        runs=runs,
    )
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
