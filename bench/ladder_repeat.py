"""Does `tuneup probe` give the same recommendation run after run on this machine?

Runs the default ladder (`tuneup probe --json`, cpu-smoke without CUDA)
several times in a row and reports each run's headline, recommended changes,
measured instability, probe count and wall time. With `--before PATH` (a
checkout of an earlier tuneup) the earlier version's runs are interleaved
with this one's (A B A B A), so both see the same machine.

    python bench/ladder_repeat.py --runs 3 --before /tmp/tuneup-5cb2700 \\
        --after /tmp/tuneup-HEAD --out bench/results/ladder_repeat_cpu.json

(`git worktree add /tmp/tuneup-5cb2700 5cb2700` makes such a checkout; the
runs import tuneup from it, so the code measured cannot change under them.)

Not a test: it takes about five minutes a run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _record import record


def one_run(version: str, code: Path | None, folder: Path) -> dict[str, Any]:
    env = dict(os.environ)
    if code is not None:
        # The checkout's own built-in plugins too: the package maps plugins/ to tuneup_plugins.
        shim = folder.parent / f"{version}-plugins"
        if not shim.exists():
            shim.mkdir(parents=True)
            (shim / "tuneup_plugins").symlink_to(code / "plugins")
            (shim / "tuneup_presets").symlink_to(code / "presets")  # its own presets
        env["PYTHONPATH"] = os.pathsep.join([str(code), str(shim)])
    command = [sys.executable, "-m", "tuneup", "probe", "--out", str(folder), "--json"]
    start = time.perf_counter()
    # Never from this folder: `python -m` puts the working folder first on sys.path,
    # where it would shadow the checkout named by PYTHONPATH.
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder.parent)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tuneup probe failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)["summary"]
    journal = (folder / "journal.jsonl").read_text().splitlines()
    probes = [json.loads(line) for line in journal]
    stability = summary.get("stability") or {}
    return {
        "version": version,
        "wall_s": round(wall, 1),
        "probes": sum(1 for p in probes if p["status"] != "skipped"),
        "headline": summary["recommendation"]["headline"],
        "changes": summary["recommendation"]["changes"],
        "instability_pct": stability.get("instability_pct"),
        "needed_pct": stability.get("needed_pct"),
        "notes": stability.get("notes", []),
        "stages": {s["stage"]: s["reason"] for s in summary["stages"]},
        "confirmation": (summary.get("confirmation") or {}).get("status"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of an earlier tuneup")
    parser.add_argument(
        "--after", type=Path, help="a checkout of the version measured (default: the installed)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    after = args.after.resolve() if args.after is not None else None
    order: list[tuple[str, Path | None]] = []
    for i in range(args.runs):
        order.append(("after", after))
        if args.before is not None and i < args.runs - 1:
            order.append(("before", args.before.resolve()))
    rows = []
    for index, (version, code) in enumerate(order):
        row = one_run(version, code, root / f"run{index}")
        rows.append(row)
        print(
            f"{row['version']:<7} {row['probes']:>3} probes {row['wall_s']:>6.0f} s  "
            f"{row['headline']}",
            flush=True,
        )
    record("ladder_repeat", args.out, runs=rows)


if __name__ == "__main__":
    main()
