"""Does the probe worker's FULL samples/s tell the truth?

Runs, interleaved, (a) `python -m tuneup.worker` on a config through the probe
runner (its FULL median) and (b) an independent bare loop in its own fresh
process on the same config: the same loader and model, timed with
perf_counter around K*T real steps after a warm-up, no tuneup phase code.
Reports both medians and their ratio (the issue asks for agreement within 3%).

    python bench/worker_vs_bare.py                       # CPU, medium model
    python bench/worker_vs_bare.py --device cuda --width 64 --levels 6 --crop 64 --batch 64

Not a test: it takes minutes. `--out FILE` writes the summary as JSON.
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
from typing import Any

BARE = r"""
import json, sys, time, torch
from tuneup.config import build_config
from tuneup.unet.build import build_training
from tuneup.unet.distributed import DistEnv
values, steps, warm = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
setup = build_training(build_config(values), DistEnv())
model, opt, dev = setup.model, setup.optimizer, setup.device
def batches():
    while True:
        yield from setup.train_loader
it = batches()
def step():
    x, y = next(it)
    x, y = x.to(dev), y.to(dev)
    opt.zero_grad(set_to_none=True)
    loss = (model(x) - y).abs().mean()
    loss.backward()
    opt.step()
    return loss
for _ in range(warm):
    step()
if dev.type == "cuda":
    torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(steps):
    loss = step()
loss.item()
if dev.type == "cuda":
    torch.cuda.synchronize()
print(steps * setup.global_batch / (time.perf_counter() - start))
"""


def parser_of() -> argparse.ArgumentParser:
    """The command line: the model and loader both sides run, and how long each measures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--levels", type=int, default=4)
    parser.add_argument("--crop", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--box", type=int, default=96)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--loader", default="inmem")
    parser.add_argument("--trial-steps", type=int, default=10, help="the bare loop's trial")
    parser.add_argument("--trial-s", type=float, default=0.2, help="the worker's trial")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--direct", action="store_true", help="also run the worker with no runner around it"
    )
    return parser


def main() -> None:
    args = parser_of().parse_args()

    # tuneup.unet.synth brings torch: imported here, so --help answers at once
    from tuneup.cluster.launch import LocalLauncher
    from tuneup.probe.plan import ProbeSpec, plan_probe
    from tuneup.probe.runner import ProbeRunner
    from tuneup.probe.types import ProbeBudget
    from tuneup.unet.synth import synthesize

    work = Path(tempfile.mkdtemp())
    data = synthesize(work / "box", box=args.box, val_box=16, seed=0)
    steps = args.trial_steps * args.trials
    values = config_values(args, data.train_path, data.val_path, steps)
    budget = ProbeBudget(
        trial_s=args.trial_s,
        min_trials=args.trials,
        max_trials=args.trials,
        loss_steps=5,
        limit_s=1200,
    )
    runner = ProbeRunner(LocalLauncher(), work / "probes")
    worker: list[float] = []
    bare: list[float] = []
    direct: list[float] = []
    spec = ProbeSpec(config=values, plan=plan_probe(budget, whole=False), seed=0)
    spec_path = work / "direct-spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    for repeat in range(args.repeats):
        result = runner.run("bench", {}, spec)
        if not result.ok:
            raise SystemExit(f"worker probe failed: {result.status.value}: {result.reason}")
        worker.append(result.full_sps)
        if args.direct:
            direct.append(direct_sps(spec_path))
        bare.append(bare_sps(values, steps))
        row = {"repeat": repeat, "worker_full_sps": worker[-1], "bare_sps": bare[-1]}
        if direct:
            row["worker_direct_sps"] = direct[-1]
        print(json.dumps(row), flush=True)
    summary = summary_of(args, worker, bare, direct)
    print(json.dumps(summary, indent=2))
    print(f"worker FULL is {100 * summary['ratio']:.1f}% of the bare loop")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


def config_values(
    args: argparse.Namespace, train_path: Path, val_path: Path, steps: int
) -> dict[str, Any]:
    """The one configuration both sides train: the model and loader the flags name."""
    return {
        "device": args.device,
        "width": args.width,
        "levels": args.levels,
        "data_size": args.crop,
        "global_batch_size": args.batch,
        "base_batch_size": args.batch,
        "Nsamples": args.batch * (steps + 200),
        "Nsamples_val": 0,
        "data_loader_config": args.loader,
        "num_data_workers": args.workers,
        "persistent_workers": args.workers > 0,
        "train_path": str(train_path),
        "val_path": str(val_path),
    }


def direct_sps(spec_path: Path) -> float:
    """The same worker with no runner watching it: tells the worker's own cost apart from
    its parent's (polling, the reader thread)."""
    from tuneup.probe.events import ResultEvent, parse_events

    done = subprocess.run(
        [sys.executable, "-m", "tuneup.worker", str(spec_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    events = parse_events(done.stdout.splitlines())
    return next(e.full_sps for e in events if isinstance(e, ResultEvent))


def bare_sps(values: dict[str, Any], steps: int) -> float:
    """The bare loop's samples/s, in a fresh process of its own (10 warm-up steps)."""
    done = subprocess.run(
        [sys.executable, "-c", BARE, json.dumps(values), str(steps), "10"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def summary_of(
    args: argparse.Namespace, worker: list[float], bare: list[float], direct: list[float]
) -> dict[str, Any]:
    """Both sides' medians, their ratio and the raw repeats, as the JSON says them."""
    summary = {
        "bench": "worker_vs_bare",
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "worker_full_sps_median": statistics.median(worker),
        "bare_sps_median": statistics.median(bare),
        "ratio": statistics.median(worker) / statistics.median(bare),
        "ratios_paired": [w / b for w, b in zip(worker, bare, strict=True)],
        "repeats_raw": [
            {"worker_full_sps": w, "bare_sps": b} for w, b in zip(worker, bare, strict=True)
        ],
    }
    if direct:
        summary["worker_direct_sps_median"] = statistics.median(direct)
        summary["direct_ratio"] = statistics.median(direct) / statistics.median(bare)
    return summary


if __name__ == "__main__":
    main()
