"""How long does a whole probe ladder take, and what does each probe cost to start?

Runs `tuneup probe --json` on a preset (default: the one tuneup picks, cpu-smoke
without CUDA) and reports the wall time, the number of probes, the median
probe wall time and the median start-up cost (process start to trainer built,
the worker's `spawn` one-time cost).

    python bench/ladder.py --out bench/results/ladder_cpu_smoke.json
    python bench/ladder.py --preset generic-cuda --keep bench/results/ladder-h200

Not a test. `--keep DIR` keeps the session's results folder there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset")
    parser.add_argument("--trainer", default="unet")
    parser.add_argument("--keep", type=Path, help="results folder to keep")
    parser.add_argument("--out", type=Path, help="write the summary JSON here")
    args = parser.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp()) / "ladder"
    command = [
        sys.executable,
        "-m",
        "tuneup",
        "probe",
        "--out",
        str(folder),
        "--json",
        "--trainer",
        args.trainer,
    ]
    if args.preset:
        command += ["--preset", args.preset]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tuneup probe failed ({done.returncode}): {done.stderr[-2000:]}")
    document = json.loads(done.stdout)
    journal = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    spawns = [r["one_time_s"].get("spawn") for r in journal if r.get("one_time_s")]
    spawns = [s for s in spawns if s is not None]
    session = json.loads((folder / "session.json").read_text())
    summary = {
        "bench": "ladder",
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "preset": session["preset"],
        "trainer": args.trainer,
        "machine": session["machine"],
        "wall_s": wall,
        "probes": len(journal),
        "statuses": document["summary"].get("probes"),
        "probe_wall_s_median": statistics.median(r["wall_s"] for r in journal),
        "startup_s_median": statistics.median(spawns) if spawns else None,
        "recommendation": document["summary"]["recommendation"]["headline"],
        "speedup": document["summary"].get("speedup"),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
