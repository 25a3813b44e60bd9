"""Honesty: does the probe worker's FULL samples/s match an independent bare loop?

For each config (plain fp32, and tuned: bf16 + channels_last + fused Adam +
CUDA graphs on a GPU), runs interleaved repeats of (a) `python -m
tuneup.worker` through the probe runner, FULL phase only, and (b)
bench/gpu/bare_loop.py in a fresh process on the same config, alternating
which goes first. Both read the device-resident `gpu` loader, so the model,
not the host, sets the pace. Writes its figures to --out after every repeat.

Pass (on a GPU): the median of the paired worker/bare ratios lies within
0.97-1.03 for every config the bare loop ran like for like. When the bare
loop could not capture a CUDA graph it runs eager, and that config's ratio
is informational. On the CPU dry run (tiny model, shared cores) every ratio
is informational.

    python bench/gpu/honesty.py --out honesty.json            # GPU
    python bench/gpu/honesty.py --cpu --out honesty.json      # CPU dry run
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from suite_common import MODEL, last_json_line, model_values, write_json

HERE = Path(__file__).resolve().parent
LOW, HIGH = 0.97, 1.03

PLAIN = {"amp_mode": "none", "tf32": True, "channels_last": False, "optimizer_impl": "foreach"}
TUNED = {"amp_mode": "bf16", "channels_last": True, "optimizer_impl": "fused", "cuda_graphs": True}


def configs_for(mode: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The knob values of each named config; CUDA graphs are left out on the CPU."""
    known = {"plain": dict(PLAIN), "tuned": dict(TUNED)}
    known["tuned-eager"] = {k: v for k, v in TUNED.items() if k != "cuda_graphs"}
    if mode == "cpu":
        known["tuned"].pop("cuda_graphs")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown config {unknown[0]!r}: choose from {', '.join(known)}")
    return {n: known[n] for n in names}


def summarize(rows: list[dict[str, Any]], name: str, mode: str) -> dict[str, Any]:
    """Medians, paired ratios and the verdict of one config's repeats."""
    done = [r for r in rows if r["config"] == name and r.get("ratio") is not None]
    if not done:
        errors = [r.get("error") for r in rows if r["config"] == name and r.get("error")]
        return {"verdict": "fail", "why": errors[0] if errors else "no repeat finished"}
    worker = statistics.median(r["worker_full_sps"] for r in done)
    bare = statistics.median(r["bare_sps"] for r in done)
    ratios = [r["ratio"] for r in done]
    ratio = statistics.median(ratios)
    modes = {r.get("bare_mode") for r in done}
    like_for_like = not any(r.get("bare_note") for r in done)
    if mode == "cpu":
        verdict = "info" if ratio > 0 else "fail"
        why = "CPU dry run: tiny model on shared cores, the ratio is informational"
    elif not like_for_like:
        verdict = "info"
        why = "the bare loop could not capture a CUDA graph and ran eager: informational"
    elif LOW <= ratio <= HIGH:
        verdict, why = "pass", f"median paired ratio {ratio:.3f} within {LOW}-{HIGH}"
    else:
        verdict, why = "fail", f"median paired ratio {ratio:.3f} outside {LOW}-{HIGH}"
    return {
        "worker_full_sps_median": worker,
        "bare_sps_median": bare,
        "ratio": ratio,
        "ratios_paired": ratios,
        "repeats": len(done),
        "bare_modes": sorted(m for m in modes if m),
        "verdict": verdict,
        "why": why,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="tiny model on the CPU (dry run)")
    parser.add_argument("--configs", default="plain,tuned", help="plain, tuned, tuned-eager")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (GPU), 1 (CPU)")
    parser.add_argument("--trial-steps", type=int, default=None)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    # Stopped by the suite (SIGTERM): unwind, so the probe runner's and subprocess.run's
    # clean-up ends the children, which sit in sessions of their own.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    mode = "cpu" if args.cpu else "gpu"
    repeats = args.repeats or (1 if args.cpu else 3)
    trial_steps = args.trial_steps or (5 if args.cpu else 10)
    configs = configs_for(mode, [c for c in args.configs.split(",") if c])

    from tuneup.cluster.launch import LocalLauncher
    from tuneup.probe.runner import ProbeRunner
    from tuneup.probe.types import ProbeBudget
    from tuneup.unet.synth import synthesize

    work = Path(tempfile.mkdtemp(prefix="tuneup-honesty-"))
    try:
        box = MODEL[mode]["box"]
        data = synthesize(work / "box", box=box, val_box=16, seed=0)
        steps = trial_steps * args.trials
        common = common_values(mode, box, data.train_path, data.val_path, steps)
        budget = ProbeBudget(
            trial_s=0.1 if args.cpu else 0.5,
            min_trials=args.trials,
            max_trials=args.trials,
            loss_steps=3 if args.cpu else 5,
            limit_s=120 if args.cpu else 300,
        )
        runner = ProbeRunner(LocalLauncher(), work / "probes")
        document: dict[str, Any] = {
            "bench": "honesty",
            "mode": mode,
            "command": "python " + " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%d"),
            "common": common,
            "configs": configs,
            "budget": budget.to_dict(),
            "bare_steps": steps,
            "rows": [],
            "summary": {},
            "done": False,
        }
        warm = 10 if not args.cpu else 3
        measure_rows(document, repeats, runner, budget, steps, warm, args.out)
        document["done"] = True
        write_json(args.out, document)
        print(json.dumps(document["summary"], indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def common_values(
    mode: str, box: int, train_path: Path, val_path: Path, steps: int
) -> dict[str, Any]:
    """What every config shares: the mode's model, on the device-resident `gpu` loader."""
    common = model_values(mode)
    batch = common["global_batch_size"]
    common.update(
        {
            "Nsamples": batch * (steps + 400),
            "data_loader_config": "gpu",
            "num_data_workers": 0,
            "box_size": [box, 16],
            "train_path": str(train_path),
            "val_path": str(val_path),
        }
    )
    return common


def measure_rows(
    document: dict[str, Any],
    repeats: int,
    runner: Any,
    budget: Any,
    steps: int,
    warm: int,
    out: Path,
) -> None:
    """Every config's repeats (the document's mode, configs and common values), the worker
    and the bare loop in alternating order, each row added to the document and written to
    `out` as it finishes."""
    from tuneup.probe.plan import ProbeSpec, plan_probe  # as main's: after the arguments

    mode, configs, common = document["mode"], document["configs"], document["common"]
    rows: list[dict[str, Any]] = document["rows"]
    for repeat in range(repeats):
        for name, knobs in configs.items():
            values = {**common, **knobs}
            order = ("worker", "bare") if repeat % 2 == 0 else ("bare", "worker")
            row: dict[str, Any] = {"repeat": repeat, "config": name, "order": list(order)}
            for side in order:
                if side == "worker":
                    plan = plan_probe(budget, whole=False)  # FULL alone
                    _worker(runner, ProbeSpec(values, plan, 0), row)
                else:
                    _bare(values, steps, warm, row)
            if row.get("worker_full_sps") and row.get("bare_sps"):
                row["ratio"] = row["worker_full_sps"] / row["bare_sps"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            document["summary"] = {n: summarize(rows, n, mode) for n in configs}
            write_json(out, document)


def _worker(runner: Any, spec: Any, row: dict[str, Any]) -> None:
    result = runner.run("honesty", {}, spec)
    if result.ok:
        row["worker_full_sps"] = result.full_sps
        row["worker_iqr_pct"] = result.iqr_pct
    else:
        _error(row, f"worker: {result.status.value}: {result.reason}")


def _bare(values: dict[str, Any], steps: int, warm: int, row: dict[str, Any]) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "bare_loop.py"), json.dumps(values), str(steps), str(warm)],
        capture_output=True,
        text=True,
    )
    out = last_json_line(done.stdout)
    if done.returncode != 0 or out is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        _error(row, f"bare loop exited {done.returncode}: {tail}")
        return
    row["bare_sps"] = out["bare_sps"]
    row["bare_mode"] = out["mode"]
    if out.get("note"):
        row["bare_note"] = out["note"]


def _error(row: dict[str, Any], text: str) -> None:
    row["error"] = f"{row['error']}; {text}" if row.get("error") else text


if __name__ == "__main__":
    main()
