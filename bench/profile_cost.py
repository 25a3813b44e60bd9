"""What the profiles cost a ladder: the cpu-smoke ladder with profiles and without, interleaved.

    python bench/profile_cost.py --rounds 2 --out bench/results/profile_cost_cpu.json

Each round runs `tuneup probe --preset P` twice, in alternating order: once as
it is (the baseline, each adopted configuration and so the recommendation are
profiled) and once with `TUNEUP_PROFILE=0` (no profile taken). Two figures:

* the profiles' own seconds (each profile's `seconds`: its steps, its trace
  written, its breakdown) over the ladder's wall time: what the profiles cost,
  measured inside the probes, free of the ladder's noise;
* the ladders' wall times with and without (medians and ranges): the same cost
  seen from outside, where a noisy 2-core machine moves a ladder by 20-50%.

It also checks each profile's parts against its measured step (`covered`): the
issue asks them to add up within 10%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _ladder_run import run_ladder
from _record import record


def ladder(preset: str, out: Path, profiles: bool) -> dict[str, Any]:
    run = run_ladder(preset, out, {"TUNEUP_PROFILE": "1" if profiles else "0"})
    wall, lines = run.wall_s, run.lines
    taken = [line["profile"] for line in lines if line.get("profile")]
    return {
        "profiles": profiles,
        "exit": run.exit,
        "wall_s": round(wall, 1),
        "probes": len(lines),
        "profiled_probes": len(taken),
        "profile_s": round(sum(p.get("seconds", 0.0) for p in taken), 2),
        "covered": [p.get("covered") for p in taken],
        "overhead": [p.get("overhead") for p in taken],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="profile-cost-"))
    runs = []
    for n in range(args.rounds):
        for profiles in (True, False) if n % 2 == 0 else (False, True):
            run = ladder(args.preset, folder / f"{n}-{int(profiles)}", profiles)
            runs.append(run)
            print(json.dumps(run), flush=True)
    with_ = [r for r in runs if r["profiles"]]
    without = [r for r in runs if not r["profiles"]]
    share = [r["profile_s"] / r["wall_s"] for r in with_]
    covered = [c for r in with_ for c in r["covered"] if c is not None]
    figures = {
        "profile_share_of_wall": {"median": statistics.median(share), "max": max(share)},
        "wall_with_s": [r["wall_s"] for r in with_],
        "wall_without_s": [r["wall_s"] for r in without],
        "wall_ratio_of_medians": statistics.median(r["wall_s"] for r in with_)
        / statistics.median(r["wall_s"] for r in without),
        "covered_min": min(covered) if covered else None,
    }
    print(json.dumps(figures, indent=1))
    record("profile_cost", args.out, preset=args.preset, runs=runs, **figures)


if __name__ == "__main__":
    main()
