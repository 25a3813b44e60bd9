"""Does the ladder spend its time measuring? One preset's ladder before and after, interleaved.

Runs `tuneup probe` (default: the cpu-smoke ladder) with two versions of tuneup in
alternation (before, after, before, after, ...), each run in a folder of its own,
and reports per run and per version (medians, with min and max):

* **wall_s**: the command's wall time; **probes**: the probes it ran;
* **trial_share**: the share of that wall time spent in timed trials (every
  trial of every phase, dropped ones included). A version that journals
  `timed_s` gives it exactly; for one that does not, it is rebuilt from the
  journaled rates (FULL's trials, T x the IO and SYNTHETIC medians), and the
  same rebuilt figure (`trial_share_rebuilt`) is given for both, so they compare;
* where the time went: probes in a fresh process and in a shared one, their
  median wall time, the median start-up (`spawn` or `setup`) and warm-up;
* **the recommendation** and each stage's decision (adopted label, or kept);
* **the estimate's error**: for a version that ends each probe line with the
  time left (`· ladder: about 1 min 20 s left`), how far elapsed + left was from
  the real wall time, at the first estimate measured on this machine and at a
  quarter, half and three quarters of the probes.

`--also-old-budget` runs the after version a third time per round on the before
version's preset (its budget), to tell the machinery's gain from the budget's.
Without `--before`, only the after version runs (the GPU suite's `speed` step:
the default single-GPU ladder, whatever tuneup picks on that machine).

    git worktree add /tmp/tuneup-before c99afa0 && git worktree add /tmp/tuneup-after HEAD
    python bench/ladder_speed.py --before /tmp/tuneup-before --after /tmp/tuneup-after \\
        --rounds 2 --also-old-budget --out bench/results/ladder_speed_cpu.json
    python bench/ladder_speed.py --after . --rounds 1 --keep /tmp/ladder --out speed.json

Not a test: a round takes a few minutes on 2 cores (the before version most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _record import record

# "(a guess ...)" before a version said what an estimate rests on; "(measured here)" after
LEFT = re.compile(r"· ladder: about (.+?) left(?: \((?P<basis>[^)]*)\))?")
CHECKPOINTS = (0.25, 0.5, 0.75)


def seconds_of(text: str) -> float | None:
    """The seconds duration_text wrote: "45 s", "3 min 20 s", "12 min", "2 h 05 min"."""
    total, found = 0.0, False
    for amount, unit in re.findall(r"(\d+) (h|min|s)\b", text):
        total += int(amount) * {"h": 3600, "min": 60, "s": 1}[unit]
        found = True
    return total if found else None


def environment(code: Path, scratch: Path) -> dict[str, str]:
    """Run `code` (a checkout) with its own plugins and presets, whatever is installed."""
    shim = scratch / f"shim-{abs(hash(str(code)))}"
    if not shim.exists():
        shim.mkdir(parents=True)
        (shim / "tuneup_plugins").symlink_to(code / "plugins")
        (shim / "tuneup_presets").symlink_to(code / "presets")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(shim)])}


def one_run(version: str, code: Path, folder: Path, preset: str | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "tuneup", "probe", "--out", str(folder)]
    if preset is not None:
        command += ["--preset", preset]
    lines: list[tuple[float, str]] = []
    start = time.perf_counter()
    # Never from this folder: `python -m` puts the working folder first on sys.path.
    with subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(code, folder.parent),
        cwd=folder.parent,
    ) as child:
        assert child.stderr is not None
        for line in child.stderr:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
            # passed on as it comes: a ladder stopped at its limit still leaves its log
            print(line, end="", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        tail = "\n".join(text for _, text in lines[-20:])
        raise SystemExit(f"{version}: tuneup probe failed ({child.returncode}):\n{tail}")
    return {"version": version, "wall_s": round(wall, 2), **figures(folder, wall, lines)}


def figures(folder: Path, wall: float, lines: list[tuple[float, str]]) -> dict[str, Any]:
    session = json.loads((folder / "session.json").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    probes = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    budget = session["budget"]
    measured = [p for p in probes if p["status"] != "skipped"]
    fresh = [p for p in measured if not p.get("served_before")]
    shared = [p for p in measured if p.get("served_before")]
    timed = [p.get("timed_s") for p in measured if p["status"] == "ok"]  # a failure timed none
    exact = sum(t for t in timed if t) if all(t is not None for t in timed) else None
    rebuilt = sum(rebuilt_trial_seconds(p, budget) for p in measured)

    def start_up(p: dict[str, Any]) -> float | None:
        costs = p.get("one_time_s") or {}
        return costs.get("spawn", costs.get("setup"))

    return {
        "preset": session["preset"],
        "budget": dict(budget),
        "probes": len(measured),
        "trial_share": None if exact is None else round(exact / wall, 3),
        "trial_share_rebuilt": round(rebuilt / wall, 3),
        "fresh_probes": len(fresh),
        "shared_probes": len(shared),
        "fresh_wall_s_median": _median([p["wall_s"] for p in fresh]),
        "shared_wall_s_median": _median([p["wall_s"] for p in shared]),
        "fresh_start_s_median": _median([start_up(p) for p in fresh]),
        "shared_start_s_median": _median([start_up(p) for p in shared]),
        "warmup_s_median": _median([p.get("warmup_s") for p in measured]),
        "stopped_early": sum(1 for p in measured if p.get("stopped_early")),
        "io_carried": sum(1 for p in measured if p.get("io_from")),
        "headline": summary["recommendation"]["headline"],
        "changes": summary["recommendation"].get("changes"),
        "decisions": {s["stage"]: s.get("winner") for s in summary["stages"]},
        "estimate": estimate_errors(lines, wall),
    }


def rebuilt_trial_seconds(probe: dict[str, Any], budget: dict[str, Any]) -> float:
    """A probe's timed seconds from its journaled rates (FULL's trials, T x the medians), for
    a version before trials were timed in seconds; a later one journals them (timed_s)."""
    if probe["status"] != "ok":
        return 0.0
    if "trial_steps" not in budget:
        return float(probe.get("timed_s") or 0.0)
    config = probe.get("config") or {}
    samples = int(config.get("global_batch_size") or 0) * int(budget["trial_steps"])
    seconds = sum(samples / r for r in probe.get("full_sps_trials") or [] if r)
    for phase in ("io_sps", "synthetic_sps"):
        rate = probe.get(phase)
        if rate and not (phase == "io_sps" and probe.get("io_from")):
            seconds += int(budget["trials"]) * samples / rate
    return seconds


def estimate_errors(lines: list[tuple[float, str]], wall: float) -> dict[str, Any] | None:
    """elapsed + left against the real wall time, where the probe lines say the time left."""
    said = []
    for when, text in lines:
        found = LEFT.search(text)
        if found and text.startswith("["):
            left = seconds_of(found.group(1))
            if left is not None:
                basis = found.group("basis") or ""
                said.append((when, left, basis in ("", "measured here")))
    if not said:
        return None

    def error(index: int) -> float:
        when, left, _ = said[index]
        return round(abs(when + left - wall) / wall, 3)

    first = next((i for i, (_, _, measured) in enumerate(said) if measured), None)
    errors = {"first_measured": None if first is None else error(first)}
    for share in CHECKPOINTS:
        errors[f"at_{int(100 * share)}pct"] = error(min(len(said) - 1, int(share * len(said))))
    errors["first_measured_after_probes"] = None if first is None else first + 1
    return errors


def _median(values: list[Any]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.median(kept), 3) if kept else None


def spread(rows: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the earlier version")
    parser.add_argument("--after", type=Path, required=True, help="a checkout of this version")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preset", help="a preset name (default: the one tuneup picks)")
    parser.add_argument("--also-old-budget", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the runs' results folders here")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    after = args.after.resolve()
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp())
    root.mkdir(parents=True, exist_ok=True)
    arms: list[tuple[str, Path, str | None]] = [("after", after, args.preset)]
    if args.before is not None:
        before = args.before.resolve()
        arms.insert(0, ("before", before, args.preset))
        if args.also_old_budget:
            old = before / "presets" / f"{args.preset or 'cpu-smoke'}.yaml"
            arms.append(("after, before's budget", after, str(old)))
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for version, code, preset in arms:
            row = one_run(version, code, root / f"{len(rows):02d}", preset)
            row["round"] = round_ + 1
            rows.append(row)
            print(
                f"{version:<24} {row['wall_s']:>7.1f} s {row['probes']:>4} probes "
                f"trials {row['trial_share_rebuilt']:.0%} of the wall  {row['headline']}",
                flush=True,
            )
    versions = {}
    for version, _, _ in arms:
        mine = [r for r in rows if r["version"] == version]
        versions[version] = {
            key: spread(mine, key)
            for key in ("wall_s", "probes", "trial_share", "trial_share_rebuilt")
        }
    walls = {v: versions[v]["wall_s"]["median"] for v in versions}  # type: ignore[index]
    speedup = round(walls["before"] / walls["after"], 2) if "before" in walls else None
    record(
        "ladder_speed",
        args.out,
        rounds=args.rounds,
        versions=versions,
        speedup_median_wall=speedup,
        runs=rows,
    )


if __name__ == "__main__":
    main()
