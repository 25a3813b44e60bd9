"""Does tuneup's timing tell the truth on this node? Its SYNTHETIC rate against a bare loop.

The same model, optimizer and cached batch are stepped two ways, interleaved:
through tuneup's own step and workload (what every probe's SYNTHETIC phase
runs), and through a plain forward / L1 / backward / Adam loop written here,
timed with CUDA events on the GPU (perf_counter on the CPU). Their ratio should
be 1; the achieved TFLOP/s against the GPU's peak (MFU) and the host-to-device
bandwidth say what the node delivers.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tuneup.config import build_config
from tuneup.preset.types import ProbePreset
from tuneup.unet.distributed import DistEnv
from tuneup.unet.flops import flops_per_sample, math_mode, peak_tflops

HONEST = (0.97, 1.03)  # the trainer within 3% of the bare loop
# Interleaved pairs x steps per timing: at most STEPS, fewer where a step is long, so a
# timing takes about TIMING_S and the whole check seconds once the first step is done.
REPEATS, STEPS = 7, 20
TIMING_S = 0.2
# The data the honesty check times on: one cached synthetic batch, no loader.
CACHED_BATCH = {"data_loader_config": "synthetic", "num_data_workers": 0, "Nsamples_val": 0}
GPU_CONFIG = {  # the tutorial's model at 16 crops per GPU (its batch 64 over 4 GPUs)
    "device": "cuda",
    "data_size": 64,
    "global_batch_size": 16,
    "base_batch_size": 16,
    "data_loader_config": "synthetic",
    "num_data_workers": 0,
    "box_size": [128, 64],
    "Nsamples": 16 * 64,
    "Nsamples_val": 0,
}
CPU_CONFIG = {  # tiny: seconds on a laptop
    "device": "cpu",
    "levels": 3,
    "width": 4,
    "data_size": 16,
    "global_batch_size": 4,
    "base_batch_size": 4,
    "data_loader_config": "synthetic",
    "num_data_workers": 0,
    "box_size": [32, 16],
    "Nsamples": 4 * 64,
    "Nsamples_val": 0,
}


def preset_case(preset: ProbePreset) -> tuple[dict[str, Any], str]:
    """What the preset's ladder will run, as the honesty check times it on the GPU: its model,
    batch and precision (its train section) on one cached synthetic batch; and in words."""
    values = {**preset.train, "device": "cuda", **CACHED_BATCH}
    cfg = build_config(values, source=f"preset {preset.name}")
    values["Nsamples"] = max(int(cfg.Nsamples), 4 * cfg.global_batch_size)
    precision = math_mode(cfg.amp_mode, cfg.tf32)
    return values, (
        f"preset {preset.name}'s baseline: batch {cfg.global_batch_size}, "
        f"{cfg.data_size}^3 crops, {precision}"
    )


@dataclass(frozen=True)
class Honesty:
    device: str
    config: dict[str, Any]
    case: str  # what was timed, in words (a preset's baseline, or tuneup's own small case)
    trainer_sps: float
    bare_sps: float
    ratio: float
    ratios: tuple[float, ...]
    tflops: float | None
    peak_tflops: float | None
    precision: str  # which peak applies: fp32, tf32, bf16 or fp16
    mfu: float | None
    h2d_pinned_gbs: float | None
    h2d_pageable_gbs: float | None

    @property
    def honest(self) -> bool:
        return HONEST[0] <= self.ratio <= HONEST[1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "honest": self.honest}


def run_honesty(
    *,
    cpu: bool,
    repeats: int = REPEATS,
    steps: int = STEPS,
    case: tuple[dict[str, Any], str] | None = None,
) -> Honesty:
    """Build the config, warm up, then `repeats` interleaved pairs of up to `steps` steps each.

    Args:
        case: the GPU configuration and its words (preset_case: what the user's ladder
            runs); None: tuneup's own small case. The CPU always runs the tiny model.
    """
    import torch  # torch: only the timed honesty check runs it

    from tuneup.unet.build import build_training  # torch: only the timed honesty check runs it

    # torch: only the timed honesty check runs it
    from tuneup.worker.workload import DeviceTimer, SetupWorkload

    on_gpu = not cpu and torch.cuda.is_available()
    if on_gpu and case is not None:
        values, words = dict(case[0]), case[1]
    elif on_gpu:
        values, words = dict(GPU_CONFIG), "tuneup's own case: batch 16, 64^3 crops"
    else:
        values, words = dict(CPU_CONFIG), "a tiny model on the CPU"
    cfg = build_config(values, source="the doctor's honesty check")
    setup = build_training(cfg, DistEnv())
    workload = SetupWorkload(setup, DeviceTimer(setup.device))
    inp, tar = workload.cached_batch
    model, optimizer = setup.model, setup.optimizer

    def bare(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            loss = (model(inp) - tar).abs().mean()
            loss.backward()
            optimizer.step()

    clock = _event_clock(setup.device) if on_gpu else _wall_clock
    workload.synthetic(2)  # warm-up of both paths: the first step, cuDNN autotuning, allocator
    bare(2)
    step_s = clock(functools.partial(workload.synthetic, 2)) / 2
    steps = max(2, min(steps, round(TIMING_S / max(step_s, 1e-9))))
    trainer_rates: list[float] = []
    bare_rates: list[float] = []
    order: list[tuple[Callable[[int], Any], list[float]]] = [
        (workload.synthetic, trainer_rates),
        (bare, bare_rates),
    ]
    for repeat in range(repeats):
        for work, rates in order if repeat % 2 == 0 else order[::-1]:
            seconds = clock(functools.partial(work, steps))
            rates.append(steps * setup.global_batch / seconds)
    ratios = tuple(t / b for t, b in zip(trainer_rates, bare_rates, strict=True))
    trainer_sps = statistics.median(trainer_rates)
    name = torch.cuda.get_device_name(setup.device) if on_gpu else "cpu"
    tflops = trainer_sps * flops_per_sample(cfg.data_size, cfg.width, cfg.unet_levels) / 1e12
    precision = math_mode(cfg.amp_mode, cfg.tf32) if on_gpu else "fp32"
    peak = peak_tflops(name, precision) if on_gpu else None
    pinned, pageable = h2d_bandwidth(setup.device) if on_gpu else (None, None)
    return Honesty(
        device=name,
        config=values,
        case=words,
        trainer_sps=trainer_sps,
        bare_sps=statistics.median(bare_rates),
        ratio=statistics.median(ratios),
        ratios=ratios,
        tflops=tflops,
        peak_tflops=peak,
        precision=precision,
        mfu=None if peak is None else tflops / peak,
        h2d_pinned_gbs=pinned,
        h2d_pageable_gbs=pageable,
    )


def h2d_bandwidth(device: Any, megabytes: int = 256, repeats: int = 5) -> tuple[float, float]:
    """Host-to-device GB/s from pinned and from pageable memory (median of `repeats` copies)."""
    # torch: only the timed honesty check runs it
    import torch

    size = megabytes * 2**20
    target = torch.empty(size, dtype=torch.uint8, device=device)
    rates = []
    for pinned in (True, False):
        source = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
        source.fill_(1)
        clock = _event_clock(device)
        copy = functools.partial(target.copy_, source, non_blocking=pinned)
        seconds = [clock(copy) for _ in range(repeats)]
        rates.append(size / statistics.median(seconds) / 1e9)
    return rates[0], rates[1]


def _wall_clock(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _event_clock(device: Any) -> Callable[[Callable[[], Any]], float]:
    """Seconds of GPU time between two CUDA events around `work`."""
    import torch

    def clock(work: Callable[[], Any]) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        begin.record()
        work()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000.0

    return clock
