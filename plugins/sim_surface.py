"""The `sim` trainer's response surface: the rates, memory, communication and losses its
knobs give on the simulated machine, noise-free (tuneup_plugins.sim documents the model),
apart from how the trainer draws probes from them.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

from tuneup.config import TrainConfig, loader
from tuneup.probe.types import Status
from tuneup.unet.schedule import initial_lr

MODELED_KNOBS: tuple[str, ...] = (
    "device",
    "num_data_workers",
    "data_loader_config",
    "amp_mode",
    "tf32",
    "optimizer_impl",
    "jit",
    "compile_mode",
    "cuda_graphs",
    "channels_last",
    "cudnn_benchmark",
    "global_batch_size",
    "local_batch_size",
    "base_batch_size",
    "lr_schedule",
)
DDP_KNOBS = ("bucket_cap_mb", "broadcast_buffers", "gradient_as_bucket_view", "noddp")
MODELED_KNOBS += DDP_KNOBS
LOWMEM_RATE = 44.6
# The simulated speed of a loader against lowmem's, where it differs (a loader it does not
# name runs as lowmem): the simulator's model, not a list of loaders.
LOADER_FACTOR = {"inmem": 1.6, "synthetic": 4.0}
DALI_IO = 790.0
GPU_RATE = 416.0
CPU_RATE = 3.2
LOSS_STEPS = 20
DEFAULT_LR = 2e-4
UNSTABLE_LR = 5e-3

# The communication model (tuneup_plugins.sim's docstring, Communication).
GRADIENT_BYTES = 117e6 * 4
RING_BANDWIDTH = 100e9  # B/s between the GPUs of one node
GLOO_BANDWIDTH = 2e9  # B/s between CPU ranks
BUCKET_LATENCY_S = 80e-6
OVERLAP = 0.8  # share of the all-reduce of all buckets but the last hidden behind backward
BROADCAST_S = 1.8e-3
COPY_BANDWIDTH = 1e12  # B/s of the gradient-to-bucket copy
STRAGGLER_SLOWDOWN = 0.15


def _defaults() -> dict[str, Any]:
    return {name: getattr(TrainConfig(), name) for name in MODELED_KNOBS}


_DEFAULTS = _defaults()


def buckets(bucket_cap_mb: float) -> int:
    """Gradient buckets DDP all-reduces each step: one NCCL call each."""
    return math.ceil(GRADIENT_BYTES / (bucket_cap_mb * 2**20))


class SimSurface:
    """The noise-free surface of the `sim` trainer (tuneup_plugins.sim's docstring) on the
    simulated machine its attributes describe: SimTrainer sets them and measures from it."""

    cores: int
    gpu_memory_gb: float
    cuda: bool
    dali: bool
    apex: bool
    world_size: int
    straggler: int | None
    effects: dict[str, float]

    @property
    def rank_cores(self) -> int:
        """Cores each rank's loader has: its share of the node."""
        return max(1, self.cores // self.world_size)

    def knobs(self, values: dict[str, Any]) -> dict[str, Any]:
        """The modeled knobs of `values`, defaults filled in from TrainConfig."""
        knobs = {**_DEFAULTS, **{k: v for k, v in values.items() if k in _DEFAULTS}}
        knobs["lr_schedule"] = {**_DEFAULTS["lr_schedule"], **dict(knobs["lr_schedule"])}
        return knobs

    def problem(
        self, values: dict[str, Any], ranks: int | None = None
    ) -> tuple[Status, str] | None:
        """Why these values cannot run here (`unsupported` or `oom`), or None."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        gpu = self._on_gpu(k)
        if k["device"] == "cuda" and not self.cuda:
            return Status.UNSUPPORTED, "device=cuda but the simulated machine has no GPU"
        if k["local_batch_size"] is None and k["global_batch_size"] < ranks:
            return Status.UNSUPPORTED, (
                f"global_batch_size {k['global_batch_size']} is smaller than the {ranks} ranks"
            )
        if k["cuda_graphs"] and not gpu:
            return Status.UNSUPPORTED, "cuda_graphs needs a CUDA device"
        if loader(k["data_loader_config"]).dali and not (gpu and self.dali):
            return Status.UNSUPPORTED, "a DALI loader needs a CUDA device and DALI installed"
        if k["optimizer_impl"] == "apex" and not (gpu and self.apex):
            return Status.UNSUPPORTED, "optimizer_impl=apex needs NVIDIA apex and a GPU"
        if k["cuda_graphs"] and k["amp_mode"] == "fp16":
            return Status.UNSUPPORTED, "cuda_graphs cannot capture the fp16 GradScaler's checks"
        if k["cuda_graphs"] and k["jit"] == "compile" and k["compile_mode"] == "reduce-overhead":
            return Status.UNSUPPORTED, "cuda_graphs and compile_mode=reduce-overhead both capture"
        if gpu and self.memory_gb(values, ranks) > self.gpu_memory_gb:
            need = self.memory_gb(values, ranks)
            return Status.OOM, f"needs {need:.0f} GB of the GPU's {self.gpu_memory_gb:.0f} GB"
        return None

    def memory_gb(self, values: dict[str, Any], ranks: int | None = None) -> float:
        """Peak GPU memory of one rank's step (see Memory and Communication in sim's docstring)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        per_sample = 0.45 * (0.55 if k["amp_mode"] != "none" else 1.0)
        per_sample *= 1.05 if k["cuda_graphs"] else 1.0
        buckets_gb = 0.0
        if _exchanges(k, ranks) and not k["gradient_as_bucket_view"]:
            buckets_gb = GRADIENT_BYTES / 1e9
        return 2.0 + _batch(k, ranks) * per_sample + buckets_gb

    def communication_s(self, values: dict[str, Any], ranks: int | None = None) -> float:
        """Seconds of a rank's step spent on gradient exchange (sim's docstring, Communication)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        if not _exchanges(k, ranks):
            return 0.0
        bandwidth = RING_BANDWIDTH if self._on_gpu(k) else GLOO_BANDWIDTH
        ring = 2 * (ranks - 1) / ranks * GRADIENT_BYTES / bandwidth
        last = min(1.0, k["bucket_cap_mb"] * 2**20 / GRADIENT_BYTES)
        exposed = (1 - OVERLAP) * ring * (1 - last) + ring * last
        exposed += BUCKET_LATENCY_S * buckets(k["bucket_cap_mb"])
        broadcast = BROADCAST_S if k["broadcast_buffers"] else 0.0
        copy = 0.0 if k["gradient_as_bucket_view"] else GRADIENT_BYTES / COPY_BANDWIDTH
        return exposed + broadcast + copy

    def expected_sps(self, values: dict[str, Any], ranks: int | None = None) -> dict[str, float]:
        """Noise-free IO, SYNTHETIC and FULL samples/s of the job (the surface itself)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        batch = _batch(k, ranks)
        io = self._io(k)
        step = batch / self._synthetic(k, batch) + self.communication_s(values, ranks)
        if self.straggler is not None and self.straggler < ranks:
            step *= 1 + STRAGGLER_SLOWDOWN  # every rank waits for the slowest
        syn = batch / step
        dali = loader(k["data_loader_config"]).dali
        p = 1.0 if k["num_data_workers"] == 0 and not dali else 2.5
        full = (io**-p + syn**-p) ** (-1.0 / p)
        gain = 1.0
        for knob, effect in self.effects.items():
            if values.get(knob):
                gain *= 1.0 + effect
        return {
            "io": ranks * io * gain,
            "synthetic": ranks * syn * gain,
            "full": ranks * full * gain,
        }

    def losses(self, values: dict[str, Any], ranks: int | None = None) -> list[float]:
        """The fixed-seed loss curve (see Losses in sim's docstring)."""
        ranks = ranks or self.world_size
        k = self.knobs(values)
        sched = k["lr_schedule"]
        batch = _batch(k, ranks) * ranks  # the global batch sets the learning rate
        base = k["base_batch_size"]
        peak = initial_lr(sched["start_lr"], sched["scaling"], batch, base)
        warmup = sched["warmup_steps"] if batch > base and sched["scaling"] != "none" else 0
        wobble = 0.01 if k["amp_mode"] != "none" else (0.003 if k["tf32"] else 0.0)
        arith = random.Random(_digest(f"{k['amp_mode']}|{k['tf32']}|{k['jit']}"))
        crops = random.Random(1234)  # the fixed training seed: same crops for every probe
        losses: list[float] = []
        progress = 0.0
        value = 0.12
        for step in range(1, LOSS_STEPS + 1):
            lr = peak * min(1.0, step / warmup) if warmup else peak
            progress += lr / DEFAULT_LR
            jitter = 0.02 * crops.uniform(-1, 1) + wobble * arith.uniform(-1, 1)
            if peak > UNSTABLE_LR:
                value = value * (1.0 + 0.3 * peak / UNSTABLE_LR)
                losses.append(value if value < 1e3 else math.nan)
            else:
                value = 0.04 + 0.08 * math.exp(-0.08 * progress)
                losses.append(value * (1.0 + jitter))
        return losses

    def _on_gpu(self, k: dict[str, Any]) -> bool:
        return self.cuda and k["device"] in ("auto", "cuda")

    def _io(self, k: dict[str, Any]) -> float:
        kind = k["data_loader_config"]
        if loader(kind).dali:
            return DALI_IO
        rate = LOWMEM_RATE * LOADER_FACTOR.get(kind, 1.0)
        workers = k["num_data_workers"]
        if workers == 0:
            return 0.9 * rate
        cores = self.rank_cores
        half = 14.2 * math.sqrt(cores / 32)
        return rate * workers / (1 + (workers / half) ** 3) * min(1.0, cores / workers)

    def _synthetic(self, k: dict[str, Any], batch: int) -> float:
        """One rank's SYNTHETIC samples/s at `batch`, before any communication."""
        amp = k["amp_mode"] != "none"
        if not self._on_gpu(k):
            prec = {"none": 1.0, "bf16": 1.05, "fp16": 0.6}[k["amp_mode"]]
            jit = 1.08 if k["jit"] == "compile" else 1.0
            return batch / (batch / (CPU_RATE * prec * jit) + 0.05)
        prec = {"none": 1.0, "fp16": 1.55, "bf16": 1.57}[k["amp_mode"]]
        if not k["tf32"]:
            prec *= 0.97 if amp else 0.33
        cl = (1.10 if amp else 0.97) if k["channels_last"] else 1.0
        jit = {"none": 1.0, "script": 1.02, "compile": 1.10 if amp else 1.04}[k["jit"]]
        bench = 1.0 if k["cudnn_benchmark"] else 0.85
        rate = GPU_RATE * prec * cl * jit * bench * (batch / 64) ** 0.1
        launches = 0.0012 if k["jit"] == "compile" else 0.002
        launches *= 0.15 if k["cuda_graphs"] else 1.0
        adam = 0.012 if k["optimizer_impl"] == "foreach" else 0.002
        return batch / (batch / rate + launches + adam)


def _batch(k: dict[str, Any], ranks: int = 1) -> int:
    """The per-rank batch: local_batch_size, else the global batch shared out."""
    local = k.get("local_batch_size")
    return int(local) if local else max(1, int(k["global_batch_size"]) // ranks)


def _exchanges(k: dict[str, Any], ranks: int) -> bool:
    """Whether the ranks all-reduce gradients (DDP on, several ranks)."""
    return ranks > 1 and not k["noddp"]


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
