"""Knobs: each performance knob's effect on step time and MFU, one knob at a time.

A SYNTHETIC-style timed loop (one device batch, the trainer's own step from
`build_training`, no loader) for the fp32 baseline and each knob on its
own, and cuDNN's benchmark mode off, to tell its autotuning apart in the first
step. The knobs share one warm process, as a ladder's probes do (so the 13-56 s
first step of a fresh process is paid once, and a knob's first step there is
what a warm probe pays), in an order that leaves the knobs that leave state
behind last (CUDA graphs, then torch.compile); TF32 off (set before CUDA
starts) and cuDNN's benchmark off (its algorithm cache is read either way) get
processes of their own. Each row says which (`process`: fresh or shared). The
first step is timed twice: as the knob met it, and for the same configuration
built again in its process. `--fresh` runs every knob in a fresh process.
Reports ms/step,
samples/s, TFLOP/s (the analytic FLOPs of tuneup.unet.flops), MFU (when
tuneup knows the GPU's peak) and the ratio of samples/s to the baseline. A
knob that fails is recorded with its one-line reason and the rest go on.
Writes --out after every knob.

    python bench/gpu/knobs.py --out knobs.json              # batch 64, full model, GPU
    python bench/gpu/knobs.py --cpu --out knobs.json        # tiny model on the CPU
    python bench/gpu/knobs.py --knobs 'bf16+cl limit default,bf16+cl limit 3,bf16+cl limit 1' \
        --out limits.json                                   # cuDNN's search, 3 fresh processes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite_common import model_values, peak_tflops, write_json

HERE = Path(__file__).resolve().parent

LIMIT = "cudnn_benchmark_limit"  # not a tuneup knob: torch's, set by the row (measure_one)
BF16_CL = {"amp_mode": "bf16", "channels_last": True}

# (row name, knob values on top of the baseline, needs CUDA)
KNOBS: list[tuple[str, dict[str, Any], bool]] = [
    ("baseline", {}, False),
    ("tf32 off", {"tf32": False}, True),
    ("amp bf16", {"amp_mode": "bf16"}, False),
    ("amp fp16", {"amp_mode": "fp16"}, False),
    ("channels_last", {"channels_last": True}, False),
    # Where the first step goes: cuDNN's autotuning of the 3D convolutions' algorithms
    # (benchmark mode tries each per shape) against its heuristics alone.
    ("cudnn benchmark off", {"cudnn_benchmark": False}, True),
    # cuDNN's benchmark mode tries up to torch.backends.cudnn.benchmark_limit algorithms
    # per convolution (10 by default); its searches took 431 of the whole H200 ladder's
    # 731 s (2026-11-27c). The ladder's winner, bf16 + channels_last, each in a fresh
    # process: at torch's limit, and at 3 and 1, whether fewer tries cut the first step
    # and keep the step time (what a ladder's probes, and a user's job start, would save).
    ("bf16+cl limit default", {**BF16_CL, LIMIT: None}, True),
    ("bf16+cl limit 3", {**BF16_CL, LIMIT: 3}, True),
    ("bf16+cl limit 1", {**BF16_CL, LIMIT: 1}, True),
    ("fused Adam", {"optimizer_impl": "fused"}, False),
    ("jit script", {"jit": "script"}, False),
    ("cuda_graphs", {"cuda_graphs": True}, True),
    (
        "bf16+cl+fused+graphs",
        {"amp_mode": "bf16", "channels_last": True, "optimizer_impl": "fused", "cuda_graphs": True},
        True,
    ),
    # Last: its compilation is the slowest and likeliest to fail (no C compiler, no Triton).
    ("jit compile", {"jit": "compile"}, False),
]
# The baseline is the trainer's defaults: fp32 with TF32 on, foreach Adam, eager.
BASELINE = {"amp_mode": "none", "tf32": True, "optimizer_impl": "foreach", "jit": "none"}
# The dry run leaves out what takes minutes on 2 cores; --knobs names them to force it.
CPU_SKIP = {
    "jit compile": "left out of the CPU dry run to keep it short (inductor compiles for ~20s "
    "on 2 cores); --knobs 'baseline,jit compile' runs it"
}
TIMEOUT_S = {"gpu": 120.0, "cpu": 30.0}
COMPILE_TIMEOUT_S = {"gpu": 300.0, "cpu": 240.0}


def precision_of(values: dict[str, Any], device: str) -> str:
    """Which peak a row is held against: bf16/fp16, tf32 (on CUDA) or fp32."""
    from tuneup.unet.flops import math_mode

    tf32 = bool(values.get("tf32", True)) and device == "cuda"
    return math_mode(str(values.get("amp_mode", "none")), tf32)


def measure_one(values: dict[str, Any], warm: int, trials: int, steps: int) -> dict[str, Any]:
    """Build the trainer's setup for `values` and time its step on one fixed batch."""
    import torch

    from tuneup.config import build_config
    from tuneup.unet.build import build_training, model_flops
    from tuneup.unet.distributed import DistEnv

    began = time.perf_counter()
    values = dict(values)
    limited = LIMIT in values
    limit = values.pop(LIMIT, None)
    if limit is not None:
        torch.backends.cudnn.benchmark_limit = int(limit)
    cfg = build_config(values)
    setup = build_training(cfg, DistEnv(), with_loaders=False)
    dev = setup.device
    inp, tar = fixed_batch(cfg, setup)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    setup.ensure_graph(inp, tar)
    capture_s = getattr(setup.step, "capture_s", None)
    t0 = time.perf_counter()
    setup.step(inp, tar)
    sync()
    first_s = time.perf_counter() - t0
    rebuilt_first_s = rebuilt_first_step_s(cfg, inp, tar, sync)
    for _ in range(warm):
        setup.step(inp, tar)
    sync()
    per_step = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = setup.step(inp, tar)
        sync()
        per_step.append((time.perf_counter() - t0) / steps)
    step_s = statistics.median(per_step)
    flops = model_flops(cfg)
    sps = setup.global_batch / step_s
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    precision = precision_of(values, dev.type)
    peak, peak_source = peak_tflops(gpu, precision)
    tflops = flops * sps / 1e12
    return {
        "ms_per_step": 1000 * step_s,
        "ms_per_step_trials": [1000 * s for s in per_step],
        "samples_per_s": sps,
        "gflop_per_sample": flops / 1e9,
        "tflops": tflops,
        "precision": precision,
        "peak_tflops": peak,
        "peak_source": peak_source,
        "mfu": tflops / peak if peak else None,
        "first_step_s": first_s,
        "rebuilt_first_step_s": rebuilt_first_s,
        "capture_s": capture_s,
        "setup_s": t0 - began,
        "loss": float(loss.float().item()),
        "mem_peak_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None,
        "tf32_env": os.environ.get("NVIDIA_TF32_OVERRIDE"),
        **({LIMIT: torch.backends.cudnn.benchmark_limit} if limited else {}),
    }


def fixed_batch(cfg: Any, setup: Any) -> tuple[Any, Any]:
    """One random batch (seed 0) on the device, in the set-up's memory format: every step
    of a knob's row takes it."""
    import torch

    dev, side, batch = setup.device, cfg.data_size, setup.local_batch
    gen = torch.Generator().manual_seed(0)
    inp = torch.randn(batch, 4, side, side, side, generator=gen).to(
        dev, memory_format=setup.memory_format
    )
    tar = torch.randn(batch, cfg.N_out_channels, side, side, side, generator=gen).to(
        dev, memory_format=setup.memory_format
    )
    return inp, tar


def rebuilt_first_step_s(cfg: Any, inp: Any, tar: Any, sync: Callable[[], None]) -> float:
    """The same configuration built again in this process (as a warm worker's next probe
    is), its first step timed: what of the first step is the process's (kept: CUDA's
    context and modules, cuDNN's plans) and what each build pays again."""
    from tuneup.unet.build import build_training
    from tuneup.unet.distributed import DistEnv

    again = build_training(cfg, DistEnv(), with_loaders=False)
    again.ensure_graph(inp, tar)
    t1 = time.perf_counter()
    again.step(inp, tar)
    sync()
    return time.perf_counter() - t1


def own_process(values: dict[str, Any]) -> bool:
    """Whether a knob needs a process of its own: TF32 off is read when CUDA starts, and
    cuDNN's benchmarked algorithms are read whether benchmark mode is on or off, whatever
    limit found them."""
    return values.get("tf32") is False or values.get("cudnn_benchmark") is False or LIMIT in values


def measure_many(todo: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    """The child of a shared process: each knob in turn, one JSON line as each finishes."""
    import gc

    import torch

    for name, values in todo:
        began = time.monotonic()
        try:
            row = {"status": "pass", **measure_one(values, args.warm, args.trials, args.steps)}
        except Exception as exc:  # the next knob still runs; its row says what happened here
            row = {"status": "fail", "why": f"{type(exc).__name__}: {exc}"[:300]}
        row.update(knob=name, seconds=time.monotonic() - began)
        print(json.dumps(row), flush=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_children(
    todo: list[tuple[str, dict[str, Any]]], args: argparse.Namespace, timeout: float
) -> dict[str, dict[str, Any]]:
    """Knobs in one process, in order; each one's row, or why it has none."""
    env = dict(os.environ)
    if any(values.get("tf32") is False for _, values in todo):
        env["NVIDIA_TF32_OVERRIDE"] = "0"  # must precede CUDA's start: tuneup's own rule
    else:
        env.pop("NVIDIA_TF32_OVERRIDE", None)
    command = [sys.executable, str(Path(__file__).resolve()), "--many", json.dumps(todo)]
    command += ["--warm", str(args.warm), "--trials", str(args.trials), "--steps", str(args.steps)]
    stderr, ended = "", ""
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        stdout, stderr = done.stdout, done.stderr
        if done.returncode != 0:
            ended = f"exit {done.returncode}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        ended = f"timeout after {timeout:.0f}s"
    rows: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and "knob" in row:
                rows[row.pop("knob")] = row
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), None)
    why = (why or (lines[-1] if lines else ended or "no output")).strip()[:300]
    for position, (name, _) in enumerate(todo):
        if name in rows:
            rows[name]["process"] = "fresh" if position == 0 else "shared"
        else:
            rows[name] = {"status": "fail", "why": f"{ended}: {why}" if ended else why}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="tiny model on the CPU (dry run)")
    parser.add_argument("--knobs", default="", help="only these rows (comma-separated names)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--deadline-s", type=float, default=None, help="stop starting knobs")
    parser.add_argument("--warm", type=int, default=None)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="steps per trial")
    parser.add_argument(
        "--fresh", action="store_true", help="every knob in a fresh process (slower on a GPU)"
    )
    parser.add_argument("--many", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Stopped by the suite (SIGTERM): unwind, so the probe runner's and subprocess.run's
    # clean-up ends the children, which sit in sessions of their own.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    args.warm = args.warm if args.warm is not None else (3 if args.cpu else 10)
    args.steps = args.steps or (5 if args.cpu else 10)
    if args.many:
        measure_many([(name, values) for name, values in json.loads(args.many)], args)
        return
    if args.out is None:
        parser.error("--out is required")
    mode = "cpu" if args.cpu else "gpu"
    chosen = [k for k in args.knobs.split(",") if k]
    unknown = [k for k in chosen if k not in {name for name, _, _ in KNOBS}]
    if unknown:
        parser.error(f"unknown knob row {unknown[0]!r}: {', '.join(n for n, _, _ in KNOBS)}")
    began = time.monotonic()
    base = {**model_values(mode), **BASELINE}
    document: dict[str, Any] = {
        "bench": "knobs",
        "mode": mode,
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "baseline_values": base,
        "loop": {"warm": args.warm, "trials": args.trials, "steps": args.steps},
        "rows": [],
        "done": False,
    }
    rows: list[dict[str, Any]] = document["rows"]
    runnable = plan_rows(rows, mode, chosen, base)
    alone = [[k] for k in runnable if args.fresh or own_process(k[1])]
    shared = [k for k in runnable if not (args.fresh or own_process(k[1]))]
    for group in ([shared] if shared else []) + alone:
        left = None if args.deadline_s is None else args.deadline_s - (time.monotonic() - began)
        names = [name for name, _, _ in group]
        if left is not None and left < 20.0:
            found = {n: {"status": "skipped", "why": f"deadline ({left:.0f}s left)"} for n in names}
        else:
            timeout = sum(t for _, _, t in group)
            timeout = timeout if left is None else min(timeout, left)
            print(f"knobs: {', '.join(names)} ...", file=sys.stderr, flush=True)
            found = run_children([(n, v) for n, v, _ in group], args, timeout)
        for row in rows:
            if row["knob"] in found:
                row.update(found[row["knob"]])
        write_json(args.out, document)
    finish(document, args.out)


def plan_rows(
    rows: list[dict[str, Any]], mode: str, chosen: list[str], base: dict[str, Any]
) -> list[tuple[str, dict[str, Any], float]]:
    """Every knob's row added to `rows`, pending or skipped (and why); the ones to run, with
    their values over the baseline's and their time limit."""
    runnable: list[tuple[str, dict[str, Any], float]] = []
    for name, knobs, needs_cuda in KNOBS:
        row: dict[str, Any] = {"knob": name, "values": knobs, "status": "pending"}
        timeout = (
            COMPILE_TIMEOUT_S if "jit" in knobs and knobs["jit"] == "compile" else TIMEOUT_S
        )[mode]
        if chosen and name not in chosen:
            row.update(status="skipped", why="not selected (--knobs)")
        elif needs_cuda and mode == "cpu":
            row.update(status="skipped", why="needs CUDA")
        elif mode == "cpu" and name in CPU_SKIP and name not in chosen:
            row.update(status="skipped", why=CPU_SKIP[name])
        else:
            runnable.append((name, {**base, **knobs}, timeout))
        rows.append(row)
    return runnable


def finish(document: dict[str, Any], out: Path) -> None:
    """Each passing row's speed over the baseline's, the document written done, the rows
    printed."""
    rows: list[dict[str, Any]] = document["rows"]
    baseline_sps = next(
        (r["samples_per_s"] for r in rows if r["knob"] == "baseline" and r["status"] == "pass"),
        None,
    )
    for row in rows:
        if row["status"] == "pass":
            row["ratio_to_baseline"] = row["samples_per_s"] / baseline_sps if baseline_sps else None
    document["done"] = True
    write_json(out, document)
    for row in rows:
        figures = (
            f"{row['ms_per_step']:8.2f} ms/step {row['samples_per_s']:9.1f} samples/s"
            if row["status"] == "pass"
            else row.get("why", "")
        )
        print(f"{row['knob']:22s} {row['status']:8s} {figures}")


if __name__ == "__main__":
    main()
