"""The promise, verified on this CPU: a cpu-smoke ladder, then `tuneup verify` of its folder.

    python bench/verify_cpu.py --out bench/results/verify_cpu.json

The ladder runs the stages given (default: the batch stage, which adopts batch x2 on a
CPU, so there is a claim above 1x to check), then `tuneup verify DIR --json` runs its
baseline and recommendation for real with `tuneup train`, A B B A, on the preset's own
box (a smoke preset's real run reads it). The record keeps the claim, each target's real
factor and samples/s against it, the verdict (with the part that moved a miss), every
run's epochs, and the two commands that reproduce it. The tutorial's train.py needs CUDA:
on a CPU its target is not run, and the record says so.
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

ROOT = Path(__file__).resolve().parent.parent


def tuneup(*args: str) -> tuple[int, float, str, str]:
    """Run `tuneup ARGS` from the checkout; its exit status, wall seconds and output."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tuneup", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        check=False,
    )
    return done.returncode, time.monotonic() - began, done.stdout, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--stages", default="batch_size", help="the ladder's stages")
    parser.add_argument("--seconds", type=float, default=30.0, help="verify --seconds")
    parser.add_argument("--rounds", type=int, default=2, help="verify --rounds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="verify-cpu-")) / "run"
    ladder = ["probe", "--preset", args.preset, "--stages", args.stages, "--out", str(folder)]
    code, ladder_s, _out, err = tuneup(*ladder)
    if code != 0:
        sys.exit(f"the ladder failed ({code}): {err.strip().splitlines()[-1:]}")
    summary = json.loads((folder / "summary.json").read_text())
    verify = ["verify", str(folder), "--seconds", f"{args.seconds:g}"]
    verify += ["--rounds", str(args.rounds), "--json"]
    code, verify_s, out, err = tuneup(*verify)
    if code != 0:
        sys.exit(f"verify failed ({code}): {err.strip().splitlines()[-1:]}")
    verified = json.loads(out)
    runs = [json.loads(line) for line in (folder / "verify.jsonl").read_text().splitlines()]
    targets = [
        {
            key: entry.get(key)
            for key in (
                "target",
                "claimed_factor",
                "claimed_low",
                "claimed_high",
                "real_factor",
                "real_low",
                "real_high",
                "real_sps",
                "baseline_sps",
                "whole_factor",
                "within_claim",
                "reason",
            )
        }
        for entry in verified["targets"]
    ]
    figures: dict[str, Any] = {
        "preset": args.preset,
        "stages": args.stages,
        "recommendation": summary["recommendation"]["headline"],
        "claim": summary["speedup"],
        "probe_full_sps": {
            "baseline": summary["baseline"].get("full_sps"),
            "recommendation": summary["recommendation"].get("full_sps"),
        },
        "targets": targets,
        "not_run": verified["skipped"],
        "tutorial": "not run on a CPU: the tutorial's train.py needs CUDA (on a GPU node, "
        "tuneup verify DIR --train-py PATH runs it as its README does)",
        "data": verified["data"],
        "runs": [
            {
                key: run[key]
                for key in ("target", "config", "round", "status", "epochs", "val_s", "wall_s")
            }
            for run in runs
        ],
        "ladder_s": round(ladder_s, 1),
        "verify_s": round(verify_s, 1),
        "reproduce": {
            "ladder": "tuneup " + " ".join(ladder[:-1]) + " DIR",
            "verify": f"tuneup verify DIR --seconds {args.seconds:g} --rounds {args.rounds}",
        },
    }
    print(json.dumps(figures, indent=1))
    record("verify_cpu", args.out, **figures)


if __name__ == "__main__":
    main()
