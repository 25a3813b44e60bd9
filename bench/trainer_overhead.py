"""Does the trainer's FULL loop cost anything over a bare training loop?

Runs, interleaved, (a) tuneup's FULL loop (loader over an in-memory box,
scheduler, AMP/optimizer plumbing, metrics windows) and (b) a bare loop of the
same model, optimizer and batch size on one cached batch, then reports the
median samples/s of each and their ratio. The trainer must reach >= 97%.

    python bench/trainer_overhead.py                    # CPU, the full-size model
    python bench/trainer_overhead.py --device cuda --batch 32 --workers 8

Not a test: it takes minutes on a CPU. Results go to stdout as one JSON line
per repeat and a summary; `--out FILE` also writes the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from tuneup.config import build_config
from tuneup.unet.build import build_model, build_training
from tuneup.unet.distributed import DistEnv
from tuneup.unet.loop import run_training
from tuneup.unet.model import l1_rho_loss
from tuneup.unet.synth import synthesize


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bare_loop(model, x, y, steps: int, device: torch.device) -> float:
    """The loop a user would write, on one cached batch: samples/s over `steps` steps."""
    # the trainer's default optimizer_impl=foreach, so only the loop around it differs
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, foreach=True)
    for _ in range(2):  # warm-up, not counted
        optimizer.zero_grad(set_to_none=True)
        l1_rho_loss(model(x), y, 0.0).backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = l1_rho_loss(model(x), y, 0.0)
        loss.backward()
        optimizer.step()
    loss.item()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * x.shape[0] / (time.perf_counter() - start)


def trainer_loop(values: dict, steps: int) -> float:
    """tuneup's loop over the real loader; the first epoch is warm-up, the second counts."""
    cfg = build_config({**values, "Nsamples": steps * values["global_batch_size"], "num_epochs": 2})
    setup = build_training(cfg, DistEnv())
    result = run_training(setup)
    return result.epoch_samples_per_s[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--levels", type=int, default=6)
    parser.add_argument("--crop", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--box", type=int, default=128)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    data = synthesize(Path(tempfile.mkdtemp()) / "box", box=args.box, val_box=16, seed=0)
    values = {
        "device": args.device,
        "width": args.width,
        "levels": args.levels,
        "data_size": args.crop,
        "global_batch_size": args.batch,
        "base_batch_size": args.batch,
        "Nsamples_val": 0,
        "data_loader_config": "inmem",
        "num_data_workers": args.workers,
        "persistent_workers": args.workers > 0,
        "train_path": str(data.train_path),
        "val_path": str(data.val_path),
        "log_every": max(args.steps, 1),
    }
    cfg = build_config({**values, "Nsamples": args.batch})
    device = torch.device("cuda" if args.device == "cuda" else "cpu")
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    # one real batch from the same box, cached on the device
    probe = build_training(cfg, DistEnv())
    x, y = probe.to_device(*next(iter(probe.train_loader)))
    del probe

    bare, trainer = [], []
    for repeat in range(args.repeats):  # interleaved so drift hits both alike
        bare.append(bare_loop(model, x, y, args.steps, device))
        trainer.append(trainer_loop(values, args.steps))
        print(
            json.dumps({"repeat": repeat, "bare_sps": bare[-1], "trainer_sps": trainer[-1]}),
            flush=True,
        )
    summary = {
        "bench": "trainer_overhead",
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "bare_sps_median": statistics.median(bare),
        "trainer_sps_median": statistics.median(trainer),
        "ratio": statistics.median(trainer) / statistics.median(bare),
        "repeats_raw": [
            {"bare_sps": b, "trainer_sps": t} for b, t in zip(bare, trainer, strict=True)
        ],
    }
    print(json.dumps(summary, indent=2))
    print(
        f"trainer reaches {100 * summary['ratio']:.1f}% of the bare loop "
        f"({summary['trainer_sps_median']:.3f} vs {summary['bare_sps_median']:.3f} samples/s)"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
