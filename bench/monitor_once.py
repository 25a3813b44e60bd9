"""How fast does `tuneup monitor --once` answer? (The monitor issue asks for under a second.)

    python bench/monitor_once.py --out bench/results/monitor_once_cpu.json

Times five runs of the real command in fresh processes and reports the best
and the median wall time, with what the command printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="time `--once --json` instead")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    command = [sys.executable, "-m", "tuneup", "monitor", "--once"] + (
        ["--json"] if args.json else []
    )
    times, output = [], ""
    for _ in range(args.runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise SystemExit(f"monitor --once failed ({done.returncode}): {output}")
    summary = {
        "bench": "monitor_once",
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "best_s": min(times),
        "median_s": statistics.median(times),
        "output": output[-4000:],
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
