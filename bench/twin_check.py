"""Check the twin against reality on this machine: gather, predict, then run real ladders.

    python bench/twin_check.py                                  # cpu-smoke, 2 ladders
    python bench/twin_check.py --ladders 2 --out bench/results/twin_check_cpu.json

In one run, on the machine it runs on:

1. `bench/gpu_twin.py --gather`: the machine's evidence, without a ladder
   (bench/twin_gather.py);
2. the twin's prediction of the preset's default ladder from that evidence
   (likely over 5 noise seeds, with its low and high ends), written down
   before any ladder runs;
3. `tuneup probe --preset P` run for real, `--ladders` times, one after the
   other, each timed from outside (the command's wall time);
4. the comparison: wall time and probes against each real ladder, and part by
   part (process starts, set-ups, first steps, compiles, warm-ups and loss
   steps, trials, bookkeeping, the session's start), so a miss says which
   part missed; stage by stage (probes, seconds); and probe by probe, where
   the twin's ladder and a real one ran the same probe (a miss in probes
   apart from one in the price of each).

With `--out`, the check is also packed under bench/results/twin_checks/ (its gather and
its ladders' journals, 45-60 KB): bench/twin_replay.py sets a later twin beside every ladder
a check has run.

The claim it checks (issue 32): the prediction lands within 25% of the real
ladders in wall time and in probes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401  (the checkout's root on sys.path: twin/ is not installed)
from _ladder_run import run_ladder
from _record import code_commit, record
from _twin_archive import ARCHIVES, pack
from _twin_ladder import ladder_parts
from _twin_predict import predict
from twin_gather import gather

from twin.against import probe_by_probe
from twin.evidence import read_journal
from twin.model import read_evidence

TOLERANCE = 0.25


def real_ladder(preset: str, out: Path) -> dict[str, Any]:
    """`tuneup probe --preset P --out DIR` timed from outside, its journal read back."""
    run = run_ladder(preset, out)
    last = (run.stdout.strip().splitlines() or [""])[-1]
    return ladder_record(run.lines, run.wall_s, run.exit, last)


def ladder_record(
    lines: list[dict[str, Any]], wall: float, exit_: int, last_line: str = ""
) -> dict[str, Any]:
    """A real ladder as the comparison reads it: its wall from outside, its journal's
    probes, parts and stages."""
    probe_walls = sum(float(line.get("wall_s") or 0.0) for line in lines)
    parts = ladder_parts(lines)
    # what the journal does not hold: the command's start, its data check, the bookkeeping
    # between probes, the summary: the wall less the probes
    parts["overhead_and_start"] = round(wall - probe_walls, 1)
    stages: dict[str, dict[str, float]] = {}
    for line in lines:
        entry = stages.setdefault(str(line.get("stage")), {"probes": 0, "wall_s": 0.0})
        entry["probes"] += 1
        entry["wall_s"] = round(entry["wall_s"] + float(line.get("wall_s") or 0.0), 1)
    return {
        "exit": exit_,
        "wall_s": round(wall, 1),
        "probes": len(lines),
        "parts": parts,
        "stages": stages,
        "last_line": last_line,
        "lines": lines,
    }


def compare(
    predicted: dict[str, Any],
    ladders: list[dict[str, Any]],
    predicted_lines: list[dict[str, Any]],
) -> dict[str, Any]:
    """The prediction against each real ladder and their mean: errors, which part missed, and
    the probes both ran (the twin's first run's, `predicted_lines`), probe by probe."""
    wall = statistics.mean(ladder["wall_s"] for ladder in ladders)
    probes = statistics.mean(ladder["probes"] for ladder in ladders)
    mine = dict(predicted["parts"])
    mine["overhead_and_start"] = round(mine.pop("overhead") + mine.pop("session_start"), 1)
    # the worker counts a compile in its first steps; the cost model prices it apart
    mine["first_steps"] = round(mine["first_steps"] + mine.pop("compile"), 1)
    by_part = {}
    for name, value in mine.items():
        real = statistics.mean(
            ladder["parts"].get(name, 0.0)
            + (ladder["parts"].get("compile", 0.0) if name == "first_steps" else 0.0)
            for ladder in ladders
        )
        by_part[name] = {
            "predicted_s": value,
            "measured_s": round(real, 1),
            "miss_s": round(value - real, 1),
        }
    missed = max(by_part, key=lambda n: abs(by_part[n]["miss_s"]))
    # the probes each ladder ran that the twin's also ran, priced against their walls
    kept = ("matched", "measured_s", "predicted_s", "error", "median_abs_miss_s")
    by_probe = [
        {k: v for k, v in probe_by_probe(predicted_lines, ladder["lines"]).items() if k in kept}
        for ladder in ladders
    ]
    stages = {}
    for stage, entry in predicted["stages"].items():
        real = [ladder["stages"].get(stage, {"probes": 0, "wall_s": 0.0}) for ladder in ladders]
        stages[stage] = {
            "predicted": entry,
            "measured_probes": [r["probes"] for r in real],
            "measured_s": [r["wall_s"] for r in real],
        }
    wall_error = predicted["wall_s"] / wall - 1.0
    probe_error = predicted["probes"] / probes - 1.0
    return {
        "wall_error": round(wall_error, 3),
        "probe_error": round(probe_error, 3),
        "per_ladder": [
            {
                "wall_error": round(predicted["wall_s"] / ladder["wall_s"] - 1.0, 3),
                "probe_error": round(predicted["probes"] / ladder["probes"] - 1.0, 3),
            }
            for ladder in ladders
        ],
        "within_tolerance": abs(wall_error) <= TOLERANCE and abs(probe_error) <= TOLERANCE,
        "inside_low_high": predicted["wall_s_low"] <= wall <= predicted["wall_s_high"],
        "part_that_missed_most": missed,
        "parts": by_part,
        "probe_by_probe": by_probe,
        "stages": stages,
    }


def fresh_compile_cache(folder: Path) -> None:
    """torch.compile's disk caches in a folder of this check's own, empty: the gather compiles
    cold as a user's first ladder does, and the ladders find what it compiled (the twin's
    `--compile-cache auto`). tuneup's own compile cache outlives sessions, and an earlier
    check's graphs there made every compile of this one warm: the twin, pricing the graphs
    no gather compiled cold at its assumed 60 s, then missed by 170%."""
    for variable, name in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        os.environ[variable] = str(folder / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-smoke")
    parser.add_argument("--ladders", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the evidence and ladders here")
    parser.add_argument("--out", type=Path, help="record under bench/results")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="twin-check-"))
    fresh_compile_cache(folder / "compile")
    began = time.monotonic()
    gather(folder / "evidence", args.preset)
    gather_s = time.monotonic() - began
    evidence = read_evidence(folder / "evidence")
    keep = folder / "predicted-probes.jsonl"
    predicted = predict(evidence, preset=args.preset, seeds=args.seeds, keep=keep)
    print(
        f"predicted before any ladder: {predicted['wall_s']:.0f} s "
        f"(low {predicted['wall_s_low']:.0f}, high {predicted['wall_s_high']:.0f}), "
        f"{predicted['probes']:.0f} probes (seeds: {predicted['probes_range']})",
        flush=True,
    )
    ladders = []
    for n in range(args.ladders):
        ladders.append(real_ladder(args.preset, folder / f"ladder-{n + 1}"))
        print(
            f"ladder {n + 1}: {ladders[-1]['wall_s']:.0f} s, {ladders[-1]['probes']} probes, "
            f"exit {ladders[-1]['exit']}",
            flush=True,
        )
    verdict = compare(predicted, ladders, read_journal(keep))
    show_verdict(verdict)
    if args.out:
        keep_check(folder, args.out, args.preset, gather_s, predicted, ladders, verdict)


def show_verdict(verdict: dict[str, Any]) -> None:
    """The check's verdict: its errors, then part by part what was predicted and measured."""
    print(
        json.dumps(
            {
                k: verdict[k]
                for k in (
                    "wall_error",
                    "probe_error",
                    "per_ladder",
                    "within_tolerance",
                    "inside_low_high",
                    "part_that_missed_most",
                )
            },
            indent=1,
        )
    )
    for name, part in verdict["parts"].items():
        print(
            f"  {name:20s} predicted {part['predicted_s']:7.1f} s  measured "
            f"{part['measured_s']:7.1f} s  miss {part['miss_s']:+7.1f} s"
        )


def keep_check(
    folder: Path,
    out: Path,
    preset: str,
    gather_s: float,
    predicted: dict[str, Any],
    ladders: list[dict[str, Any]],
    verdict: dict[str, Any],
) -> None:
    """The check kept: its gather and ladders packed under bench/results/twin_checks (for
    twin_replay.py), its figures recorded at `out`."""
    pack(
        folder,
        ARCHIVES / f"{out.stem}.tar.gz",
        ladders,
        preset=preset,
        predicted={k: predicted[k] for k in ("wall_s", "wall_s_low", "wall_s_high", "probes")},
        commit=code_commit(),
    )
    record(
        "twin_check",
        out,
        preset=preset,
        gather_s=round(gather_s, 1),
        predicted={
            k: predicted[k]
            for k in (
                "wall_s",
                "wall_s_low",
                "wall_s_high",
                "probes",
                "probes_range",
                "parts",
                "parts_low",
                "parts_high",
                "stages",
                "decisions",
                "figures",
                "runs",
                "compile_cache",
            )
        },
        ladders=[{k: v for k, v in ladder.items() if k != "lines"} for ladder in ladders],
        verdict=verdict,
    )


if __name__ == "__main__":
    main()
