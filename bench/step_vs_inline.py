"""Is tuneup's training step as fast as the same step written inline? (one process, CPU)

Steps one model on one cached batch four ways, in shuffled order each round:
a bare loop (L1 written out), the same step inline with tuneup's loss and
autocast, `setup.step` (tuneup's EagerStep, what `tuneup train` and every probe
run) and a fresh EagerStep. Reports each one's median samples/s and its median
paired ratio to the bare loop. This is how the EagerStep loss-lifetime cost
(glibc trimming and re-faulting the heap every step) was found and checked.

    python bench/step_vs_inline.py --out bench/results/step_vs_inline_cpu.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _record import record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    setup = training()
    assert setup.train_loader is not None
    inp, tar = next(iter(setup.train_loader))
    kinds = step_kinds(setup, inp, tar)
    rates = measure(kinds, args.rounds, args.steps, setup.global_batch)
    summary = {
        name: {
            "median_sps": statistics.median(values),
            "paired_ratio_to_bare": statistics.median(
                [a / b for a, b in zip(values, rates["bare"], strict=True)]
            ),
        }
        for name, values in rates.items()
    }
    document = record(
        "step_vs_inline", args.out, args=vars(args) | {"out": str(args.out)}, **summary
    )
    for name, figures in summary.items():
        print(
            f"{name:18s} {figures['median_sps']:7.1f} samples/s  "
            f"x{figures['paired_ratio_to_bare']:.3f}"
        )
    print(f"recorded {document['date']}")


def training() -> Any:
    """tuneup's training set-up of a small model on a synthetic box, on the CPU."""
    # torch comes with these: imported here, so --help answers at once
    from tuneup.config import build_config
    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv
    from tuneup.unet.synth import synthesize

    data = synthesize(Path(tempfile.mkdtemp()) / "box", box=96, val_box=16, seed=0)
    values = {
        "device": "cpu",
        "width": 16,
        "levels": 4,
        "data_size": 32,
        "global_batch_size": 8,
        "base_batch_size": 8,
        "Nsamples": 8 * 100,
        "Nsamples_val": 0,
        "data_loader_config": "inmem",
        "num_data_workers": 0,
        "train_path": str(data.train_path),
        "val_path": str(data.val_path),
    }
    return build_training(build_config(values), DistEnv())


def step_kinds(setup: Any, inp: Any, tar: Any) -> dict[str, Callable[[int], None]]:
    """The four ways to take `n` steps on the one batch: a bare loop, the step written
    inline with tuneup's loss and autocast, `setup.step`, and a fresh EagerStep."""
    from tuneup.unet.step import EagerStep  # torch: see training()

    model, optimizer = setup.model, setup.optimizer
    fresh = EagerStep(model, setup.loss_fn, optimizer, setup.precision, 0.0)

    def bare(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            loss = (model(inp) - tar).abs().mean()
            loss.backward()
            optimizer.step()

    def inline(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            with setup.precision.autocast():
                loss = setup.loss_fn(model(inp), tar, setup.cfg.lambda_rho)
            loss.backward()
            optimizer.step()

    def step(n: int) -> None:
        for _ in range(n):
            setup.step(inp, tar)

    def fresh_step(n: int) -> None:
        for _ in range(n):
            fresh(inp, tar)

    return {"bare": bare, "inline": inline, "eager_step": step, "fresh_eager_step": fresh_step}


def measure(
    kinds: dict[str, Callable[[int], None]], rounds: int, steps: int, batch: int
) -> dict[str, list[float]]:
    """Each kind's samples/s, `rounds` times, in shuffled order each round (after a
    warm-up of 3 steps each)."""
    for work in kinds.values():
        work(3)
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    names = list(kinds)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            start = time.perf_counter()
            kinds[name](steps)
            rates[name].append(steps * batch / (time.perf_counter() - start))
    return rates


if __name__ == "__main__":
    main()
